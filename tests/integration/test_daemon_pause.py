"""sandlotd pause, resume, snapshots and kept workspaces (src/daemon/workspaces.c).

A paused sandbox has no process and no cgroup left on the host, only its
workspace in the data dir's storage pool (<data-dir>/storage/mnt/kept/<id>,
its lock free); resume brings the same files back (SHA-256 checked), across
clean restarts and kill -9 of the daemon too; from_snapshot clones a paused
or expired sandbox's workspace into a new sandbox; DELETE and retention
remove workspaces, and nothing is left that should not be.  Workspaces of
the former layout (an ext4 image per sandbox) are brought into the pool.

Each test drives a real sandlotd (the `sandlotd` fixture, or its own Daemon
when it restarts it).
"""
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import re
import tarfile
import threading
import time
from pathlib import Path

import pytest

import hostscan
from conftest import wait_until
from daemon import Daemon

SMALL = {"memory": "64M", "disk": "32M", "pids": 32}


# ---- helpers -----------------------------------------------------------------

def assert_error(r, status, code=None):
    assert r.status == status, r
    err = r.json()["error"]
    assert err["code"] and err["message"], r
    if code:
        assert err["code"] == code, r
    return err


def state(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200, r
    return r.json()


def ts(s):
    """An API timestamp ("2026-01-02T03:04:05.678Z") in seconds."""
    from datetime import datetime
    return datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def wait_state(d, sid, want, timeout):
    return wait_until(lambda: state(d, sid)["state"] == want, timeout, interval=0.1)


def cgroups_of(sid):
    return {p for p in hostscan.sandbox_cgroups() if p.endswith("/" + sid)}


def inits_of(daemon_pid):
    return {p for p in hostscan.init_pids() if hostscan.ppid(p) == daemon_pid}


def image_of(d, sid):
    """The kept workspace of sandbox sid in the daemon's storage pool."""
    return Path(d.data_dir) / "storage" / "mnt" / "kept" / sid


def images(d):
    """The kept workspaces (complete ones) in the daemon's storage pool."""
    ws = Path(d.data_dir) / "storage" / "mnt" / "kept"
    return sorted(p.name for p in ws.iterdir() if not p.name.startswith(".")) \
        if ws.is_dir() else []


def in_use(path):
    """Whether a process (a sandbox's init) holds the workspace's lock."""
    try:
        fd = os.open(path / ".lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def run(d, sid, command, **kw):
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": command, **kw})
    assert r.status == 200, r
    return r.json()


def sh_ok(d, sid, command):
    out = run(d, sid, command)
    assert out["exit_code"] == 0, out
    return out["stdout"]


def put(d, sid, path, data):
    r = d.put(f"/v1/sandboxes/{sid}/files?path={path}", data)
    assert r.status == 201, r


def get_file(d, sid, path):
    r = d.get(f"/v1/sandboxes/{sid}/files?path={path}")
    assert r.status == 200, r
    return r.body


def pause(d, sid):
    r = d.post(f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200, r
    assert r.json()["state"] == "paused", r
    return r.json()


def resume(d, sid, **body):
    r = d.post(f"/v1/sandboxes/{sid}/resume", json_body=body or None)
    assert r.status == 200, r
    assert r.json()["state"] == "running", r
    return r.json()


def tar_of(files):
    """An in-memory tar of {relative name: bytes}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hashes_inside(d, sid, top="/home/user"):
    """{relative path: sha256} of every regular file under top, computed in
    the sandbox."""
    out = sh_ok(d, sid, f"cd {top} && find . -type f -print0 | sort -z | xargs -0 -r sha256sum")
    got = {}
    for ln in out.splitlines():
        h, name = ln.split("  ", 1)
        got[name[2:]] = h
    return got


def gone_from_host(d, sid, init_pid):
    """Problems if anything of the running sandbox is still on the host."""
    problems = []
    if init_pid in hostscan.init_pids():
        problems.append(f"sandlot-init {init_pid} still running")
    if cgroups_of(sid):
        problems.append(f"cgroups left: {sorted(cgroups_of(sid))}")
    if in_use(image_of(d, sid)):
        problems.append("the workspace is still in use")
    return problems


@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    made = []

    def make(extra_args=(), env=None):
        base = tmp_path_factory.mktemp("sandlotd-pause", numbered=True)
        d = Daemon(base, extra_args=extra_args, env=env,
                   data_dir=session_dirs["data_dir"] / "daemon" / base.name)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            d.stop()


# ---- pause and resume ----------------------------------------------------------------

def test_pause_frees_everything_but_the_files(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    put(d, sid, "notes/a.txt", b"hello\n")
    sh_ok(d, sid, "echo tmp > /tmp/t.txt; ln -s notes/a.txt link; mkdir -p e/f; chmod 700 e")
    before = hashes_inside(d, sid)
    [init] = inits_of(d.proc.pid)
    assert cgroups_of(sid)
    assert image_of(d, sid).exists()

    t0 = time.monotonic()
    sb = pause(d, sid)
    elapsed = time.monotonic() - t0
    assert sb["paused_at"] and sb["workspace_kept"] is True, sb
    assert sb["workspace_expires_at"], sb  # the daemon's default retention
    # Everything of the running sandbox is gone, at once: its processes
    # (init and all), its cgroup (so its memory), its hold on the workspace.
    problems = wait_until(lambda: gone_from_host(d, sid, init) == [], 5) or \
        gone_from_host(d, sid, init)
    assert problems is True, problems
    assert image_of(d, sid).exists()
    assert elapsed < 5, elapsed

    assert state(d, sid)["state"] == "paused"
    assert [s["id"] for s in d.get("/v1/sandboxes").json()["sandboxes"]] == []
    assert [s["id"] for s in d.get("/v1/sandboxes?state=paused").json()["sandboxes"]] == [sid]
    assert d.get("/v1/health").json()["sandboxes"] == 0
    metrics = d.get("/metrics").body.decode()
    assert 'sandlot_sandboxes{state="paused"} 1' in metrics, metrics

    sb = resume(d, sid)
    assert sb["paused_at"] is None and sb["workspace_kept"] is False, sb
    [init2] = inits_of(d.proc.pid)
    assert init2 != init
    assert hashes_inside(d, sid) == before
    assert sh_ok(d, sid, "cat /tmp/t.txt; readlink link; stat -c '%a %U' e") == \
        "tmp\nnotes/a.txt\n700 user\n"
    # owned by the user, and writable again, in both places
    assert sh_ok(d, sid, "find /home/user /tmp/t.txt ! -user user | wc -l") == "0\n"
    sh_ok(d, sid, "echo more >> notes/a.txt && touch /tmp/u")
    assert get_file(d, sid, "notes/a.txt") == b"hello\nmore\n"
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert not image_of(d, sid).exists()


def test_calls_on_a_paused_sandbox_are_refused(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    put(d, sid, "x", b"x")
    pause(d, sid)
    for method, path, body in [
        ("POST", "exec", {"command": "true"}),
        ("GET", "files?path=x", None),
        ("GET", "files/list?path=.", None),
        ("GET", "changes", None),
        ("POST", "keepalive", {}),
        ("GET", "snapshot", None),
    ]:
        r = d.request(method, f"/v1/sandboxes/{sid}/{path}", json_body=body)
        err = assert_error(r, 409, "sandbox_paused")
        assert err["state"] == "paused" and "resume" in err["message"], r
    # pause again: nothing to do; the record is readable
    assert pause(d, sid)["state"] == "paused"
    assert state(d, sid)["state"] == "paused"
    resume(d, sid)
    assert resume(d, sid)["state"] == "running"  # resume of a running one: no-op
    assert get_file(d, sid, "x") == b"x"
    assert_error(d.post(f"/v1/sandboxes/{sid}/pause", json_body={"bogus": 1}), 400, "bad_request")
    assert_error(d.post(f"/v1/sandboxes/{sid}/resume", json_body={"ttl_seconds": -1}), 400)
    assert_error(d.post("/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaaaaaaaa/pause"), 404, "not_found")
    assert_error(d.post("/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaaaaaaaa/resume"), 404, "not_found")
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert_error(d.post(f"/v1/sandboxes/{sid}/pause"), 410, "sandbox_ended")
    assert_error(d.post(f"/v1/sandboxes/{sid}/resume"), 410, "sandbox_ended")


def test_auto_resume(sandlotd):
    d = sandlotd
    r = d.post("/v1/sandboxes", json_body={**SMALL, "auto_resume": True})
    assert r.status == 201 and r.json()["auto_resume"] is True, r
    sid = r.json()["id"]
    put(d, sid, "data.bin", b"\x00\x01binary\xff")
    pause(d, sid)
    # any call resumes it: an exec...
    assert run(d, sid, "cat data.bin | od -An -tx1 | tr -d ' \\n'")["stdout"] == \
        "000162696e617279ff"
    assert state(d, sid)["state"] == "running"
    # ...a file read, concurrent calls (one resume, all answered)
    pause(d, sid)
    results = []

    def reader():
        results.append(d.get(f"/v1/sandboxes/{sid}/files?path=data.bin"))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r.status for r in results] == [200] * 4, results
    assert all(r.body == b"\x00\x01binary\xff" for r in results)
    assert d.log_text().count(f"event=resumed sandbox={sid}") == 2
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_pause_kills_running_commands_and_resume_restarts_the_ttl(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL, ttl_seconds=600)
    r = d.post(f"/v1/sandboxes/{sid}/exec",
               json_body={"command": "sleep 300", "background": True})
    assert r.status == 202, r
    exec_id = r.json()["exec_id"]
    created_expiry = state(d, sid)["expires_at"]
    [init] = inits_of(d.proc.pid)
    sleeps = wait_until(lambda: [p for p in hostscan.find_pids(["sleep", "300"])
                                 if hostscan.sandbox_init_of(p) == init], 5)
    assert sleeps
    # Not synchronization: the TTL counted from the resume can only be told
    # from the one counted from the create if time passed between them.
    time.sleep(1.1)
    assert pause(d, sid)["expires_at"] is None  # no TTL runs while paused
    assert not [p for p in sleeps if os.path.exists(f"/proc/{p}")]
    before = time.time()
    sb = resume(d, sid)
    # counted from the resume
    assert before + 599.5 <= ts(sb["expires_at"]) <= time.time() + 600.5, sb
    assert ts(sb["expires_at"]) >= ts(created_expiry) + 1, (sb, created_expiry)
    # the exec history went with the processes
    assert_error(d.get(f"/v1/sandboxes/{sid}/execs/{exec_id}"), 404)
    sb = resume(d, sid, ttl_seconds=30)
    assert sb["ttl_seconds"] == 30
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_paused_sandboxes_do_not_count_toward_max(own_daemon):
    d = own_daemon(["--max-sandboxes", "1"]).start()
    a = d.create(**SMALL)
    put(d, a, "f", b"a")
    pause(d, a)
    b = d.create(**SMALL)  # a paused sandbox frees its place
    assert_error(d.post(f"/v1/sandboxes/{a}/resume"), 429, "too_many_sandboxes")
    assert state(d, a)["state"] == "paused"
    assert d.delete(f"/v1/sandboxes/{b}").status == 204
    resume(d, a)
    assert get_file(d, a, "f") == b"a"
    assert d.stop() == 0


# ---- restarts ---------------------------------------------------------------------

def big_workspace(d, sid):
    """1,000 small files (through a tar upload) and a 50 MiB random file;
    returns their SHA-256 by relative path."""
    rnd = os.urandom
    files = {f"many/d{i % 10}/f{i:04d}.bin": rnd(i % 3000) for i in range(1000)}
    r = d.post(f"/v1/sandboxes/{sid}/files/archive?path=/home/user",
               json_body=None, body=tar_of(files),
               headers={"Content-Type": "application/x-tar"})
    assert r.status == 200 and r.json()["files"] == 1000, r
    big = rnd(50 << 20)
    put(d, sid, "big.bin", big)
    want = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    want["big.bin"] = hashlib.sha256(big).hexdigest()
    return want


def check_big_workspace(d, sid, want):
    got = hashes_inside(d, sid)
    assert len(got) == len(want) == 1001
    assert got == want
    assert hashlib.sha256(get_file(d, sid, "big.bin")).hexdigest() == want["big.bin"]
    assert sh_ok(d, sid, "find /home/user ! -user user | wc -l") == "0\n"


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_paused_sandbox_survives_a_daemon_restart(own_daemon, how):
    d = own_daemon().start()
    sid = d.create(memory="128M", disk="256M", pids=32, metadata={"who": how})
    want = big_workspace(d, sid)
    running = d.create(**SMALL)  # a running one, for contrast
    pause(d, sid)
    if how == "sigterm":
        assert d.stop() == 0
    else:
        d.kill9()
    d.start()
    sb = state(d, sid)
    assert sb["state"] == "paused" and sb["metadata"] == {"who": how}, sb
    # a running sandbox does not survive: deleted (SIGTERM) or lost (kill -9),
    # and its image goes with it
    gone = state(d, running)
    assert gone["state"] == ("deleted" if how == "sigterm" else "lost"), gone
    assert gone["workspace_kept"] is False
    assert wait_until(lambda: not image_of(d, running).exists(), 5)
    assert images(d) == [sid]
    resume(d, sid)
    check_big_workspace(d, sid, want)
    # and once more, paused across a second restart
    pause(d, sid)
    d.kill9() if how == "sigterm" else d.stop()
    d.start()
    resume(d, sid)
    assert hashes_inside(d, sid) == want
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert images(d) == []
    assert d.stop() == 0


def test_code_contexts_are_lost_across_an_ns_pause_and_a_restart(own_daemon):
    """An ns sandbox's pause ends its processes, interpreters included: after
    a restart of sandlotd and the resume, the context's next cell runs on a
    fresh interpreter and says that its state was lost."""
    d = own_daemon().start()
    sid = d.create(**SMALL)
    r = d.post(f"/v1/sandboxes/{sid}/contexts", json_body={"language": "python"})
    assert r.status == 201, r
    cid = r.json()["id"]

    def cell(src):
        r = d.post(f"/v1/sandboxes/{sid}/code",
                   json_body={"language": "python", "code": src, "context": cid}, timeout=60)
        assert r.status == 200, r
        return r.json()

    assert cell("x = 41")["status"] == "ok"
    pause(d, sid)
    assert d.stop() == 0
    d.start()
    resume(d, sid)
    r = cell("x + 1")
    assert r["status"] == "error" and r["state_lost"] is True, r
    assert "NameError" in r["error"]["name"], r
    r = cell("x = 1; x + 1")
    assert r["value"] == "2" and r["state_lost"] is False, r
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert d.stop() == 0


def stopped(pid):
    """Whether process pid is stopped (state T in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] in "Tt"


@pytest.mark.parametrize("point", ["pause-before-registry", "pause-after-registry"])
def test_kill9_in_the_middle_of_a_pause(own_daemon, point):
    """The registry says paused before the sandbox is torn down.  A daemon
    killed after that comes back with a paused sandbox whose files are all
    there; killed before it, with the sandbox lost.  Either way no cgroup
    of it is left.  The kill lands exactly at each point: the daemon stops
    itself there (a fault-injection point, SANDLOT_FAULT; test builds only,
    see tests/README.md)."""
    d = own_daemon(env={"SANDLOT_FAULT": point}).start()
    if f"fault_injection point={point}" not in d.log_text():
        pytest.skip("this sandlotd has no fault-injection points (build it with "
                    "-Dfault_injection=true, as scripts/check.sh builds build-asan)")
    sid = d.create(**SMALL)
    put(d, sid, "keep.txt", b"kept\n")
    # a command that keeps the sandbox busy writing
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={
        "command": "trap '' TERM; while :; do date >> /tmp/log; done", "background": True})
    assert r.status == 202, r

    def pause_request():
        try:
            d.post(f"/v1/sandboxes/{sid}/pause", timeout=30)
        except Exception:  # noqa: BLE001 - the daemon died under it: expected
            pass

    t = threading.Thread(target=pause_request)
    t.start()
    pid = d.proc.pid
    assert wait_until(lambda: stopped(pid), 20), f"sandlotd never reached {point}:\n{d.logs()}"
    assert f"fault_point point={point}" in d.log_text()
    d.kill9()
    t.join(30)
    d.env.pop("SANDLOT_FAULT")
    d.start()
    want = "lost" if point == "pause-before-registry" else "paused"
    assert state(d, sid)["state"] == want, state(d, sid)
    assert wait_until(lambda: not cgroups_of(sid), 5)
    if want == "paused":
        resume(d, sid)
        assert get_file(d, sid, "keep.txt") == b"kept\n"
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    else:
        assert wait_until(lambda: not image_of(d, sid).exists(), 5)
    assert d.stop() == 0


# ---- snapshots ----------------------------------------------------------------------

def test_from_snapshot_of_a_paused_sandbox(sandlotd):
    d = sandlotd
    src = d.create(memory="64M", disk="48M", pids=32)
    put(d, src, "proj/main.py", b"print('hi')\n")
    put(d, src, "proj/data.bin", os.urandom(3 << 20))
    sh_ok(d, src, "echo scratch > /tmp/scratch")
    want = hashes_inside(d, src)
    # a running sandbox cannot be the source: its files are changing
    assert_error(d.post("/v1/sandboxes", json_body={"from_snapshot": src}), 409, "conflict")
    pause(d, src)

    r = d.post("/v1/sandboxes", json_body={"from_snapshot": src, "memory": "64M",
                                           "metadata": {"restored": "yes"}})
    assert r.status == 201, r
    new = r.json()
    assert new["id"] != src and new["options"]["from_snapshot"] == src, new
    assert new["options"]["disk"] == 48 << 20, new
    assert hashes_inside(d, new["id"]) == want
    assert sh_ok(d, new["id"], "cat /tmp/scratch; python3 proj/main.py") == "scratch\nhi\n"
    # independent: changes to the copy do not reach the source
    sh_ok(d, new["id"], "rm -r proj")
    assert state(d, src)["state"] == "paused"
    resume(d, src)
    assert hashes_inside(d, src) == want

    assert_error(d.post("/v1/sandboxes", json_body={"from_snapshot": "sb-" + "a" * 26}), 404)
    assert_error(d.post("/v1/sandboxes", json_body={"from_snapshot": "nope"}), 400)
    pause(d, src)
    assert_error(d.post("/v1/sandboxes", json_body={"from_snapshot": src, "disk": "1G"}), 400,
                 "bad_request")
    for sid in (src, new["id"]):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert images(d) == []


def test_from_snapshot_of_an_expired_sandbox(sandlotd):
    """The path agent frameworks take: their sandbox expired; they create a
    new one from it and find their files."""
    d = sandlotd
    old = d.create(**SMALL, ttl_seconds=1)
    put(d, old, "work/result.csv", b"a,b\n1,2\n")
    want = hashes_inside(d, old)
    assert wait_state(d, old, "expired", 10)
    sb = state(d, old)
    assert sb["end_reason"] == "ttl" and sb["workspace_kept"] is True, sb
    assert sb["workspace_expires_at"] > sb["ended_at"], sb
    assert image_of(d, old).exists()
    # let go of once its teardown (which follows the expiry) is done
    assert wait_until(lambda: not in_use(image_of(d, old)), 10)
    assert_error(d.get(f"/v1/sandboxes/{old}/files?path=work/result.csv"), 410, "sandbox_ended")

    new = d.create(from_snapshot=old, ttl_seconds=600)
    assert hashes_inside(d, new) == want
    assert get_file(d, new, "work/result.csv") == b"a,b\n1,2\n"
    # twice works too: the kept workspace stays until its retention ends
    again = d.create(from_snapshot=old)
    assert hashes_inside(d, again) == want
    # DELETE of the expired sandbox drops its kept workspace
    assert d.delete(f"/v1/sandboxes/{old}").status == 204
    assert not image_of(d, old).exists()
    assert state(d, old)["workspace_kept"] is False
    assert_error(d.post("/v1/sandboxes", json_body={"from_snapshot": old}), 409, "conflict")
    assert_error(d.delete(f"/v1/sandboxes/{old}"), 410, "sandbox_ended")
    for sid in (new, again):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert images(d) == []


def test_from_snapshot_right_as_a_sandbox_expires(sandlotd):
    """An agent that re-creates its sandbox the moment it sees it expired
    must not get 409 "in use" while the old one is still being torn down
    (its image stays mounted until then): the copy waits for the teardown.
    A command streaming at the expiry keeps the teardown busy a little."""
    d = sandlotd
    for _ in range(3):
        old = d.create(**SMALL, ttl_seconds=1)
        put(d, old, "keep.txt", b"kept")
        c, resp = d.stream("POST", f"/v1/sandboxes/{old}/exec",
                           json_body={"command": "sleep 30"},
                           headers={"Accept": "application/x-ndjson"})
        try:
            assert wait_until(lambda: state(d, old)["state"] == "expired", 10, interval=0.005)
            new = d.create(from_snapshot=old)
        finally:
            c.close()
        assert get_file(d, new, "keep.txt") == b"kept"
        for sid in (new, old):
            assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert images(d) == []


def test_snapshot_route_is_a_tar_of_the_workspace(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    put(d, sid, "a/b.txt", b"bee\n")
    put(d, sid, "c.bin", bytes(range(256)))
    r = d.get(f"/v1/sandboxes/{sid}/snapshot")
    assert r.status == 200 and r.headers["Content-Type"] == "application/x-tar", r
    with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
        got = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert got == {"a/b.txt": b"bee\n", "c.bin": bytes(range(256))}
    assert_error(d.get(f"/v1/sandboxes/{sid}/snapshot?path=a"), 400, "bad_request")
    # the two-step restore of an external archive: create, then extract
    other = d.create(**SMALL)
    r = d.post(f"/v1/sandboxes/{other}/files/archive", body=r.body,
               headers={"Content-Type": "application/x-tar"})
    assert r.status == 200, r
    assert get_file(d, other, "c.bin") == bytes(range(256))
    for s in (sid, other):
        assert d.delete(f"/v1/sandboxes/{s}").status == 204


# ---- retention and deletion ------------------------------------------------------------

def test_delete_of_a_paused_sandbox_removes_its_image(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    put(d, sid, "x", b"x")
    pause(d, sid)
    assert image_of(d, sid).exists()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert not image_of(d, sid).exists()
    sb = state(d, sid)
    assert sb["state"] == "deleted" and sb["end_reason"] == "deleted", sb
    assert sb["workspace_kept"] is False
    assert_error(d.post(f"/v1/sandboxes/{sid}/resume"), 410, "sandbox_ended")
    assert_error(d.delete(f"/v1/sandboxes/{sid}"), 410, "sandbox_ended")


def test_paused_retention(sandlotd):
    d = sandlotd
    r = d.post("/v1/sandboxes", json_body={**SMALL, "paused_retention_seconds": 1})
    assert r.status == 201 and r.json()["paused_retention_seconds"] == 1, r
    sid = r.json()["id"]
    pause(d, sid)
    assert wait_state(d, sid, "expired", 10)
    sb = state(d, sid)
    assert sb["end_reason"] == "paused_retention" and sb["workspace_kept"] is False, sb
    assert not image_of(d, sid).exists()
    assert_error(d.post("/v1/sandboxes", json_body={"paused_retention_seconds": -1}), 400)
    assert_error(d.post("/v1/sandboxes", json_body={"auto_resume": "yes"}), 400)


def test_expired_workspace_retention(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL, ttl_seconds=1, paused_retention_seconds=2)
    assert wait_state(d, sid, "expired", 10)
    assert state(d, sid)["workspace_kept"] is True
    assert wait_until(lambda: not image_of(d, sid).exists(), 10)
    assert state(d, sid)["workspace_kept"] is False
    assert state(d, sid)["workspace_expires_at"] is None


def test_default_retention_option(own_daemon):
    d = own_daemon(["--paused-retention", "3600"]).start()
    sid = d.create(**SMALL)
    assert state(d, sid)["paused_retention_seconds"] == 3600
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert d.stop() == 0
    bad = own_daemon(["--paused-retention", "soon"])
    with pytest.raises(RuntimeError, match="exited with 2"):
        bad.start()


def test_only_intended_images_are_left(own_daemon):
    """Every ending removes what it should; a restart removes images that
    nothing owns (a crash between creating and registering, a copy cut
    short)."""
    d = own_daemon().start()
    paused = d.create(**SMALL)
    pause(d, paused)
    deleted = d.create(**SMALL)
    assert d.delete(f"/v1/sandboxes/{deleted}").status == 204
    failed = d.create(**SMALL)
    [init] = inits_of(d.proc.pid)
    os.kill(init, 9)
    assert wait_state(d, failed, "failed", 10)
    assert wait_until(lambda: images(d) == [paused], 5), images(d)
    assert d.stop() == 0
    # What a daemon of the former layout could leave: an image nothing owns,
    # a half-made copy.  Both go at the next start.
    ws = Path(d.data_dir) / "workspaces"
    ws.mkdir()
    (ws / "sb-aaaaaaaaaaaaaaaaaaaaaaaaaa.img").write_bytes(b"orphan")
    (ws / f"{paused}.img.tmp-abc123").write_bytes(b"half a copy")
    d.start()
    assert images(d) == [paused]
    assert not ws.exists()
    assert "reason=\"not owned\"" in d.log_text()
    assert d.delete(f"/v1/sandboxes/{paused}").status == 204
    assert images(d) == []
    assert d.stop() == 0
