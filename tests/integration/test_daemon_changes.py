"""sandlotd's change tracking, bounded in bytes (src/daemon/changes.c): per
scan, per answer, per sandbox and per daemon, with the memory, the budget
and the registry space given back when a sandbox ends.

The attack these tests scale down: 50,000 files with 3.7 KB paths grew
sandlotd from 62 to 1,174 MiB, one exec answer to 183 MiB and the registry
from 9 to 446 MiB, and on the next exec the sandbox's init was OOM-killed
and its workspace deleted; none of it came back after the sandbox was
deleted.  Here the daemon runs with limits a sixteenth of the defaults and
the sandbox with 64M of memory, so that 5,000 such files (18 MB of paths)
go past every limit in a few seconds.

Daemon RSS is measured from /proc (VmHWM, VmRSS) on the daemon as shipped
(PLAIN_BIN_DIR): under AddressSanitizer, whose quarantine keeps freed
memory, resident memory says nothing.  The other tests run on the daemon
under test (sanitized in scripts/check.sh) and flood it too.
"""
import json
import os
import sqlite3
import threading
import time

import pytest

from conftest import PLAIN_BIN_DIR, sanitized, wait_until
from daemon import Daemon

MIB = 1 << 20
# A sixteenth of the defaults (8M, 8M, 16M, 256M).
LIMITS = ["--changes-scan-bytes", "512K", "--changes-answer-bytes", "512K",
          "--changes-log-bytes", "1M", "--changes-total-bytes", "4M"]

LONG_PATHS = """
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
p = os.path.join('/home/user', top, *[('d%02d' % i) + 'x' * 247 for i in range(14)])
os.makedirs(p)
for i in range(n):
    open(os.path.join(p, ('%08d' % i) + 'y' * 190), 'w').close()
print(len(p) + 200)
"""


@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    made = []

    def make(extra_args=LIMITS, plain=False):
        binary = None
        if plain:
            binary = PLAIN_BIN_DIR / "sandlotd"
            if not os.access(binary, os.X_OK) or sanitized(binary):
                pytest.fail(f"no plain (unsanitized) sandlotd at {binary}: run `make`, or set "
                            "SANDLOT_PLAIN_BIN_DIR", pytrace=False)
        base = tmp_path_factory.mktemp("sandlotd-changes", numbered=True)
        d = Daemon(base, extra_args=list(extra_args), binary=binary,
                   data_dir=session_dirs["data_dir"] / "daemon" / base.name).start()
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            assert d.stop() == 0, d.logs()


def kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def registry_bytes(d):
    return sum(os.path.getsize(d.data_dir / n) for n in ("sandlot.db", "sandlot.db-wal")
               if (d.data_dir / n).exists())


def registry_rows(d, sid):
    db = sqlite3.connect(f"file:{d.data_dir / 'sandlot.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COUNT(*) FROM changes WHERE sandbox = ?", (sid,)).fetchone()[0]
    finally:
        db.close()


def flood(d, sid, n, top="t", timeout=300):
    """Make n files with 3.7 KB paths under /home/user/top; the raw answer."""
    r = d.post(f"/v1/sandboxes/{sid}/exec",
               json_body={"argv": ["python3", "-c", LONG_PATHS, top, str(n)]}, timeout=timeout)
    assert r.status == 200, r
    return r


def all_pages(d, sid, since=0):
    """Follow GET .../changes pages ("more") to the end: (entries, pages)."""
    out, pages = [], []
    while True:
        r = d.get(f"/v1/sandboxes/{sid}/changes?since={since}")
        assert r.status == 200, r
        page = r.json()
        pages.append((len(r.body), page))
        out += page["changes"]
        if not page.get("more"):
            return out, pages
        assert page["cursor"] == page["changes"][-1]["cursor"], page["cursor"]
        since = page["cursor"]


def test_long_path_flood_is_bounded_everywhere(own_daemon):
    d = own_daemon(plain=True)
    pid = d.proc.pid
    sid = d.create(memory="64M", disk="1G")
    d.exec(sid, command="true")  # the daemon's own first-use allocations
    rss0, hwm0, reg0 = kib(pid, "VmRSS"), kib(pid, "VmHWM"), registry_bytes(d)

    r = flood(d, sid, 5000)
    res = r.json()
    print(f"exec answer {len(r.body)} bytes, {len(res['changes'])} changes")
    assert res["exit_code"] == 0 and int(res["stdout"]) > 3700, res["stderr"]  # path length
    assert res["changes_truncated"] is True
    assert len(r.body) < 512 * 1024 + 4096, len(r.body)  # the answer limit (+ the rest)
    assert res["changes"], "some changes are reported"

    # A second flood, walked first ("a/" sorts before "t/"): the log passes
    # its 1M window, which forgets its oldest entries.
    res2 = flood(d, sid, 1000, top="a").json()
    assert res2["exit_code"] == 0 and res2["changes_truncated"] is True and res2["changes"]
    # The sandbox lives on (its init was OOM-killed here before), and a
    # later change is found: the walk stops in the big trees, so make it
    # where the walk goes first ("0-late" sorts before "a/").
    again = d.exec(sid, command="echo late > 0-late.txt")
    assert again["exit_code"] == 0
    assert [c["path"] for c in again["changes"]] == ["/home/user/0-late.txt"], again["changes"]
    assert again["changes_truncated"] is True  # the tree is still past the walk's limit
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"

    # The log: a bounded window, paged within the answer limit.
    entries, pages = all_pages(d, sid)
    assert all(size < 512 * 1024 + 4096 for size, _ in pages), [s for s, _ in pages]
    log_bytes = sum(len(c["path"]) + len(c["source"]) + 2 + 100 for c in entries)
    assert log_bytes <= 1 * MIB + 64 * 1024, log_bytes
    cursors = [c["cursor"] for c in entries]
    assert cursors == sorted(set(cursors)), "pages overlap or are out of order"
    assert cursors[-1] == again["cursor"]
    assert pages[0][1].get("truncated") is True  # the oldest entries were forgotten
    assert registry_rows(d, sid) == len(entries)

    reg1 = registry_bytes(d)
    hwm1 = kib(pid, "VmHWM")
    print(f"sandlotd RSS {rss0} KiB at start, peak {hwm1} KiB (+{(hwm1 - hwm0) >> 10} MiB); "
          f"registry {reg0} -> {reg1} bytes")
    assert reg1 - reg0 < 8 * MIB, (reg0, reg1)

    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert registry_rows(d, sid) == 0
    # The reaper gives the file space back within a second or two.
    assert wait_until(lambda: registry_bytes(d) < reg0 + MIB, 10), (reg0, registry_bytes(d))
    rss2 = kib(pid, "VmRSS")
    print(f"after DELETE: RSS {rss2} KiB, registry {registry_bytes(d)} bytes")
    # Before: +1,112 MiB at the full size; with these limits a few MiB.
    assert hwm1 - hwm0 < 48 * 1024, (hwm0, hwm1)
    assert rss2 - rss0 < 16 * 1024, (rss0, rss2)


def test_daemon_budget_keeps_other_sandboxes_whole(own_daemon):
    """Two sandboxes flood their logs past the daemon-wide budget: the
    largest logs lose their oldest entries first, and a third sandbox with
    a small log keeps it whole, its scans complete and never refused."""
    d = own_daemon(["--changes-scan-bytes", "512K", "--changes-answer-bytes", "512K",
                    "--changes-log-bytes", "1M", "--changes-total-bytes", "2M"])
    calm = d.create()
    small = d.exec(calm, command="mkdir keep && for i in $(seq 1 50); do echo $i > keep/f$i; done")
    assert small["changes_truncated"] is False and len(small["changes"]) == 51
    floods = [d.create(memory="64M") for _ in range(2)]
    for round in range(4):
        for sid in floods:
            res = flood(d, sid, 300, top=f"r{round}").json()
            assert res["exit_code"] == 0 and res["changes"], res["stderr"]
        res = d.exec(calm, command=f"echo {round} > keep/round")
        assert res["changes_truncated"] is False and len(res["changes"]) == 1, res["changes"]
    entries, pages = all_pages(d, calm)
    assert not pages[0][1].get("truncated"), "the small log lost entries"
    assert len(entries) == 51 + 4
    for sid in floods:
        _, pages = all_pages(d, sid)
        assert pages[0][1].get("truncated") is True, "the flooding logs were not trimmed"
    assert "reason=daemon_budget" in d.log_path.read_text(), "no budget trim was logged"


def changes_bytes(d):
    """The daemon-wide changes budget in use (the sandlot_changes_bytes gauge)."""
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith("sandlot_changes_bytes "):
            return int(line.split()[1])
    raise AssertionError("no sandlot_changes_bytes in /metrics")


def test_concurrent_floods_and_deletes_keep_the_budget(own_daemon):
    """Three sandboxes flood their logs at the same time, a fourth is
    deleted while it floods, and a calm sandbox's execs run between them:
    every calm scan is whole and its log untouched, the budget is within its
    limit once the scans are done, and it is back to zero when every
    sandbox has ended (no byte stays counted).  Also run with sandlotd under
    ThreadSanitizer (tests/tsan-tests.txt)."""
    # Room for the five scans' reservations (2.5M) and some of the logs
    # (three floods of up to 1M each): when the budget is full the floods'
    # logs are trimmed, and the calm one, far the smallest, is never the
    # largest.  (Whether it fills depends on how the scans overlap: the
    # sequential test above always fills it.)
    total = 4 * MIB
    d = own_daemon(["--changes-scan-bytes", "512K", "--changes-answer-bytes", "512K",
                    "--changes-log-bytes", "1M", "--changes-total-bytes", "4M"])
    calm = d.create()
    floods = [d.create(memory="64M") for _ in range(3)]
    victim = d.create(memory="64M")
    failures = []
    first_done = threading.Event()

    def flooder(sid, rounds):
        try:
            for r in range(rounds):
                res = flood(d, sid, 300, top=f"r{r}").json()
                assert res["exit_code"] == 0 and res["changes"], res
        except Exception as e:  # reported by the main thread
            failures.append((sid, repr(e)))

    def victim_flooder():
        # Floods until its sandbox is gone: then the exec in flight is
        # killed (its changes unknown) or refused (404, 410).
        for r in range(20):
            resp = d.post(f"/v1/sandboxes/{victim}/exec", timeout=300,
                          json_body={"argv": ["python3", "-c", LONG_PATHS, f"v{r}", "300"]})
            first_done.set()
            if resp.status in (404, 410):
                return
            res = resp.json() if resp.status == 200 else {}
            if res.get("signal") == 9 and res["changes"] == [] and res["changes_truncated"]:
                return
            if res.get("exit_code") != 0:
                failures.append((victim, repr(resp)))
                return
        failures.append((victim, "the deleted sandbox's execs went on"))

    threads = [threading.Thread(target=flooder, args=(sid, 3)) for sid in floods]
    threads.append(threading.Thread(target=victim_flooder))
    for t in threads:
        t.start()
    calm_changes = 0
    try:
        for i in range(6):
            res = d.exec(calm, command=f"echo {i} > calm{i}.txt")
            assert res["changes_truncated"] is False, res
            assert [c["path"] for c in res["changes"]] == [f"/home/user/calm{i}.txt"], res
            calm_changes += 1
            if i == 1:
                assert first_done.wait(300)
                assert d.delete(f"/v1/sandboxes/{victim}").status == 204
    finally:
        for t in threads:
            t.join(600)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)

    entries, pages = all_pages(d, calm)
    assert not pages[0][1].get("truncated") and len(entries) == calm_changes
    assert registry_rows(d, victim) == 0
    used = changes_bytes(d)
    assert 0 < used <= total, used
    for sid in floods + [calm]:
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert changes_bytes(d) == 0


def test_changes_answer_limit_in_code_cells(own_daemon):
    d = own_daemon()
    sid = d.create(memory="64M")
    code = "import os\n" + "\n".join(
        ["p = '/home/user/c/' + '/'.join(('d%02d' % i) + 'x' * 247 for i in range(14))",
         "os.makedirs(p)",
         "for i in range(2000): open(os.path.join(p, ('%08d' % i) + 'y' * 190), 'w').close()"])
    r = d.post(f"/v1/sandboxes/{sid}/code", json_body={"language": "python", "code": code},
               timeout=300)
    assert r.status == 200, r
    res = r.json()
    assert res["status"] == "ok", res
    assert res["changes_truncated"] is True
    assert 0 < len(res["changes"]) < 2000
    assert len(r.body) < 512 * 1024 + 8192, len(r.body)
    plain = d.post(f"/v1/sandboxes/{sid}/code", json_body={"language": "python", "code": "1"}).json()
    assert plain["changes_truncated"] is True and plain["changes"] == []


def test_paused_sandbox_keeps_its_log_across_a_restart(own_daemon):
    """The registry's rows are the log of a paused sandbox: after a daemon
    restart and a resume, GET .../changes still has them."""
    d = own_daemon()
    sid = d.create()
    res = d.exec(sid, command="echo a > a.txt; echo b > b.txt")
    assert len(res["changes"]) == 2
    assert d.post(f"/v1/sandboxes/{sid}/pause").status == 200
    assert d.stop() == 0
    d.start()
    assert d.post(f"/v1/sandboxes/{sid}/resume").status == 200
    page = d.get(f"/v1/sandboxes/{sid}/changes").json()
    assert [c["path"] for c in page["changes"]] == ["/home/user/a.txt", "/home/user/b.txt"], page
    assert page["cursor"] == res["cursor"] and not page.get("truncated")
    res = d.exec(sid, command="echo c > c.txt")
    assert res["changes"][0]["cursor"] == page["cursor"] + 1
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert registry_rows(d, sid) == 0


def test_registry_made_before_is_converted_to_incremental_vacuum(own_daemon):
    """A registry made without auto_vacuum (by an earlier sandlotd) is
    converted at start-up, keeping its rows, so that its space comes back."""
    d = own_daemon()
    sid = d.create()
    d.exec(sid, command="echo a > a.txt")
    assert d.post(f"/v1/sandboxes/{sid}/pause").status == 200
    assert d.stop() == 0
    db = sqlite3.connect(str(d.data_dir / "sandlot.db"))
    db.execute("PRAGMA auto_vacuum=NONE")
    db.execute("VACUUM")
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    db.close()
    d.start()
    db = sqlite3.connect(f"file:{d.data_dir / 'sandlot.db'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    finally:
        db.close()
    assert registry_rows(d, sid) == 1
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert registry_rows(d, sid) == 0


@pytest.mark.parametrize("args,why", [
    (["--changes-scan-bytes", "1K"], "at least 64K"),
    (["--changes-log-bytes", "1M", "--changes-scan-bytes", "2M"], "--changes-log-bytes"),
    (["--changes-total-bytes", "4M", "--changes-scan-bytes", "4M", "--changes-log-bytes", "4M"],
     "twice"),
    (["--changes-answer-bytes", "lots"], "--changes-answer-bytes"),
])
def test_bad_changes_limits(tmp_path, args, why):
    import subprocess
    from daemon import SANDLOTD
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/s.sock",
                        "--data-dir", str(tmp_path / "data"), *args],
                       capture_output=True, timeout=10)
    assert p.returncode == 2, p
    assert why.encode() in p.stderr, p.stderr


def test_net_view_pages_fold_from_one_base(own_daemon):
    """GET .../changes?net=1&exclude_hidden=1 with answers of 64 KiB: the
    view takes several pages, each asked with the same `since` and `after`
    set to the last page's cursor; together they hold one entry per path
    with its net kind since `since` (not since the page's start), the
    hidden paths are counted once across the pages, and a path changed
    again while the pages are read shows again, later, with its new state."""
    d = own_daemon(["--changes-answer-bytes", "64K"])
    sid = d.create()
    long = "n" * 180
    base = d.exec(sid, command=f"mkdir -p w; for i in $(seq 100 399); do echo old > w/k${{i}}{long}; "
                               f"echo old > w/g${{i}}{long}; done")["cursor"]
    d.exec(sid, command=f"for i in $(seq 100 399); do echo new > w/c${{i}}{long}; echo tmp > w/t${{i}}{long}; "
                        f"echo more >> w/k${{i}}{long}; done; mkdir -p w/.cache; "
                        f"for i in $(seq 100 149); do echo c > w/.cache/h${{i}}{long}; done")
    d.exec(sid, command=f"rm w/t*; for i in $(seq 100 399); do rm w/g${{i}}{long}; done")

    def page(after):
        r = d.get(f"/v1/sandboxes/{sid}/changes?since={base}&after={after}&net=1&exclude_hidden=1")
        assert r.status == 200, r
        assert len(r.body) <= 64 * 1024, len(r.body)
        return r.json()

    pages, after, hidden, seen = [], base, 0, {}
    while True:
        p = page(after)
        pages.append(p)
        hidden += p["hidden"]
        for c in p["changes"]:
            assert c["cursor"] > after, (c, after)
            seen.setdefault(c["path"], []).append(c)
        if len(pages) == 1:
            # a file of the first page changes again before the rest is read
            again = next(c["path"] for c in p["changes"]
                         if c["path"].rsplit("/", 1)[-1].startswith("c"))
            d.exec(sid, argv=["sh", "-c", 'echo again >> "$1"', "sh", again])
        if not p.get("more"):
            break
        assert p["cursor"] > after
        after = p["cursor"]
    assert len(pages) >= 4, [len(p["changes"]) for p in pages]
    assert not any(p.get("truncated") for p in pages)
    # the changed-again path: twice, the second time later and with its new size
    first, second = seen.pop(again)
    assert second["cursor"] > first["cursor"] and second["size"] > first["size"]
    assert second["kind"] == first["kind"]
    name = lambda p: p.rsplit("/", 1)[-1][:1]  # noqa: E731
    files = {p: c[0]["kind"] for p, c in seen.items() if c[0]["type"] == "file"}
    assert all(len(c) == 1 for c in seen.values())
    kinds = {}
    for p, k in files.items():
        kinds.setdefault((name(p), k), 0)
        kinds[(name(p), k)] += 1
    kinds[(name(again), first["kind"])] = kinds.get((name(again), first["kind"]), 0) + 1
    # created, modified, deleted since the base; created-then-deleted: nothing
    assert kinds == {("c", "created"): 300, ("k", "modified"): 300, ("g", "deleted"): 300}, kinds
    assert hidden == 51  # .cache and its 50 files
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
