"""sandlotd --pool: ready sandboxes handed out by POST /v1/sandboxes.

Each test starts its own sandlotd with a pool (on a temporary socket and
data dir) and checks what a client and the host see: hits answered at once
with `Sandlot-Pool: hit`, refills, clean hand-outs (never a reused sandbox:
no file of a previous user, a uid range and an id of its own), misses for
options the pool cannot serve, pooled sandboxes invisible to the API, and
nothing left behind after SIGTERM or kill -9 with a full pool.
"""
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

import hostscan
from conftest import wait_until
from daemon import SANDLOTD, Daemon

ID_RE = re.compile(r"^sb-[a-z2-7]{26}$")
UID_BASE = 0x10000000  # src/linux/userns.h: slot N maps to UID_BASE + N * 65536


@pytest.fixture
def pool_daemon(session_dirs, tmp_path_factory):
    """Factory: a sandlotd with the given --pool arguments, started, and
    stopped with SIGTERM (exit 0 checked) at the end of the test."""
    made = []

    def make(*pool_args, start=True, wait_full=True):
        base = tmp_path_factory.mktemp("sandlotd-pool", numbered=True)
        d = Daemon(base, extra_args=list(pool_args),
                   data_dir=session_dirs["data_dir"] / "daemon" / Path(base).name)
        made.append(d)
        if start:
            d.start()
            if wait_full:
                assert wait_until(lambda: pool_full(d), 30), (health(d), d.logs())
        return d

    yield make
    for d in made:
        if d.proc is not None:
            rc = d.stop()
            assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"


# ---- helpers -----------------------------------------------------------------

def health(d):
    r = d.get("/v1/health")
    assert r.status == 200, r
    return r.json()


def pool_state(d, image="host"):
    return health(d)["pool"][image]


def pool_full(d, image="host"):
    p = pool_state(d, image)
    return p["ready"] == p["size"]


def metrics(d):
    """{"name{labels}": value} of GET /metrics."""
    r = d.get("/metrics")
    assert r.status == 200, r
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def create(d, **opts):
    """POST /v1/sandboxes; returns (sandbox JSON, Sandlot-Pool header, seconds)."""
    t0 = time.monotonic()
    r = d.post("/v1/sandboxes", json_body=opts)
    dt = time.monotonic() - t0
    assert r.status == 201, r
    return r.json(), r.headers.get("Sandlot-Pool"), dt


def sh(d, sid, script):
    r = d.exec(sid, argv=["sh", "-c", script])
    return r


def init_pid_of(d, sid):
    """Host pid of the sandbox's init, from the daemon's "created" log line."""
    m = re.search(rf"event=created sandbox={sid} .*?init_pid=(\d+)", d.log_path.read_text())
    assert m, d.logs()
    return int(m.group(1))


def uid_map(pid):
    text = hostscan.read(f"/proc/{pid}/uid_map")
    assert text, f"no uid_map for pid {pid}"
    return [tuple(int(x) for x in ln.split()) for ln in text.strip().splitlines()]


def pool_markers(d):
    p = Path(d.data_dir) / "pool"
    return {x.name for x in p.iterdir()} if p.is_dir() else set()


def pooled_inits(d):
    """sandlot-init children of the daemon that belong to no listed sandbox."""
    listed = d.get("/v1/sandboxes").json()["sandboxes"]
    used = {init_pid_of(d, s["id"]) for s in listed}
    return {p for p in hostscan.init_pids() if hostscan.ppid(p) == d.proc.pid} - used


def leftovers_of(ids, data_dir):
    """What sandboxes `ids` left: cgroups, mounts, loop devices, pool
    markers, workspaces; and anything stray in data_dir's storage pool."""
    problems = []
    for sid in ids:
        for cg in hostscan.sandbox_cgroups():
            if cg.endswith("/" + sid):
                problems.append(f"cgroup left: {cg}")
    dd = str(data_dir)
    for dev, bf in hostscan.loop_backing_files().items():
        if bf.startswith(dd) and not hostscan.is_pool_image(bf):
            problems.append(f"loop device {dev} backed by {bf}")
    for ln in hostscan.sandlot_mounts():
        if (dd in ln or any(sid in ln for sid in ids)) and not hostscan.is_pool_mount(ln):
            problems.append(f"mount left: {ln}")
    # The storage pool itself may stay (mounted after a kill -9); no
    # workspace of these sandboxes may.
    problems += hostscan.pool_problems(data_dir)
    kept = Path(data_dir) / "storage" / "mnt" / "kept"
    if kept.is_dir():
        problems += [f"workspace left: {x}" for x in kept.iterdir() if x.name in ids]
    for sub in ("pool", "workspaces"):
        p = Path(data_dir) / sub
        if p.is_dir():
            problems += [f"{sub} file left: {x}" for x in p.iterdir()
                         if any(x.name.startswith(sid) for sid in ids)]
    return problems


# ---- hand-outs -----------------------------------------------------------------

def test_hits_are_fast_and_the_pool_refills(pool_daemon):
    d = pool_daemon("--pool", "3")
    assert pool_state(d) == {"size": 3, "ready": 3}
    m = metrics(d)
    assert m['sandlot_pool_size{image="host"}'] == 3
    assert m['sandlot_pool_ready{image="host"}'] == 3
    assert m['sandlot_pool_hits_total{image="host"}'] == 0

    times = []
    for _ in range(3):
        sbx, hdr, dt = create(d)
        assert hdr == "hit", (hdr, d.logs())
        assert ID_RE.match(sbx["id"]) and sbx["state"] == "running"
        times.append(dt)
        assert d.exec(sbx["id"], argv=["echo", "hi"])["stdout"] == "hi\n"
    assert "pool=hit" in d.log_text()

    # The refill makes the 3 taken back, one at a time, in the background.
    assert wait_until(lambda: pool_full(d), 30), health(d)
    m = metrics(d)
    assert m['sandlot_pool_ready{image="host"}'] == 3
    assert m['sandlot_pool_hits_total{image="host"}'] == 3
    assert m['sandlot_pool_misses_total{image="host",reason="empty"}'] == 0
    assert m['sandlot_pool_misses_total{image="host",reason="options"}'] == 0
    assert m['sandlot_pool_refill_failures_total{image="host"}'] == 0, \
        [ln for ln in d.log_text().splitlines() if "pool_refill_failed" in ln]
    assert health(d)["sandboxes"] == 3  # the 3 handed out; pooled ones are not counted

    # A hit is a pop and a registry row: milliseconds, where a cold create
    # (options the pool cannot serve) takes tens of them.  Compared with
    # cold creates of the same daemon, in the same run, so that the check
    # holds under a sanitizer and on a loaded machine alike; cold creates
    # that wait for the set-up ("wait_ready"), as a pooled sandbox has
    # done it (a cold create otherwise answers before its set-up).
    cold = []
    for _ in range(3):
        sbx, hdr, dt = create(d, memory="128M", wait_ready=True)
        assert hdr == "miss", hdr
        cold.append(dt)
    assert statistics.median(times) < statistics.median(cold) / 2, (times, cold)


def test_handouts_are_clean_and_never_reused(pool_daemon):
    """A file written by a previous user never appears: create A from the
    pool, write files in A, delete it; B (from the pool) has none of them,
    another uid range on the host, another id, a fresh changes log."""
    d = pool_daemon("--pool", "3")
    a, hdr, _ = create(d)
    assert hdr == "hit"
    aid = a["id"]
    r = sh(d, aid, "echo secret > /home/user/secret; echo x > /tmp/x; mkdir -p /home/user/d; "
                   "echo y > /home/user/d/f; echo started")
    assert r["exit_code"] == 0 and r["stdout"] == "started\n", r
    assert {c["path"] for c in r["changes"] if c["kind"] == "created"} == \
        {"/home/user/d", "/home/user/d/f", "/home/user/secret"}, r["changes"]
    r = d.post(f"/v1/sandboxes/{aid}/exec", json_body={"argv": ["sleep", "300"],
                                                         "background": True})
    assert r.status == 202, r
    a_init = init_pid_of(d, aid)
    a_map = uid_map(a_init)
    a_host_uid = hostscan.uids(a_init)
    assert d.delete(f"/v1/sandboxes/{aid}").status == 204

    seen_ids, seen_maps = {aid}, {tuple(a_map)}
    for _ in range(4):  # more hand-outs than the pool holds: refilled ones too
        assert wait_until(lambda: pool_full(d), 30), health(d)
        b, hdr, _ = create(d)
        assert hdr == "hit"
        bid = b["id"]
        assert bid not in seen_ids, "a sandbox id was handed out twice"
        seen_ids.add(bid)
        r = sh(d, bid, "ls -A /home/user /tmp; cat /home/user/secret /tmp/x 2>&1; "
                       "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done "
                       "2>/dev/null | grep -c '^sleep 300'; true")
        assert r["exit_code"] == 0, r
        out = r["stdout"].splitlines()
        # ls: "/home/user:" (empty), "", "/tmp:" (empty); then cat's two errors
        assert out[:3] == ["/home/user:", "", "/tmp:"], out
        assert len([ln for ln in out if "No such file" in ln]) == 2, out
        assert out[-1] == "0", out  # A's sleep is not there
        assert r["changes"] == [], r
        assert d.get(f"/v1/sandboxes/{bid}/changes").json()["changes"] == []
        b_init = init_pid_of(d, bid)
        assert b_init != a_init
        b_map = uid_map(b_init)
        assert b_map[0][1] >= UID_BASE, b_map  # an unprivileged host range...
        assert tuple(b_map) not in seen_maps, (b_map, seen_maps)  # ...of its own
        seen_maps.add(tuple(b_map))
        assert d.delete(f"/v1/sandboxes/{bid}").status == 204
    assert a_map[0][1] >= UID_BASE and a_host_uid[0] == a_map[0][1], (a_map, a_host_uid)


def test_all_live_sandboxes_have_distinct_uid_ranges(pool_daemon):
    d = pool_daemon("--pool", "3")
    handed = [create(d)[0]["id"] for _ in range(2)]
    assert wait_until(lambda: pool_full(d), 30)
    inits = {p for p in hostscan.init_pids() if hostscan.ppid(p) == d.proc.pid}
    assert len(inits) == 5, inits  # 2 handed out + 3 pooled
    maps = [uid_map(p)[0][1] for p in inits]
    assert len(set(maps)) == 5 and min(maps) >= UID_BASE, maps
    for sid in handed:
        d.delete(f"/v1/sandboxes/{sid}")


def test_clocks_env_and_metadata_start_at_handout(pool_daemon):
    d = pool_daemon("--pool", "2")  # returns with the pool full
    full_at = time.time()
    # Not synchronization: the clocks can only tell a hand-out from the pool
    # fill if time passed between them.
    time.sleep(1.5)
    before = time.time()
    sbx, hdr, _ = create(d, ttl_seconds=60, idle_timeout_seconds=30, env={"FOO": "bar baz",
                         "HOME": "/tmp"}, metadata={"team": "a"})
    assert hdr == "hit"
    created = _ts(sbx["created_at"])
    assert before - 0.5 <= created <= time.time() + 0.5, (before, sbx)
    assert created > full_at + 1, (full_at, sbx)  # not the pool fill's time
    assert abs(_ts(sbx["expires_at"]) - created - 60) < 0.01, sbx
    assert abs(_ts(sbx["last_active_at"]) - created) < 0.01, sbx
    assert sbx["metadata"] == {"team": "a"}
    assert sbx["options"]["env"] == {"FOO": "bar baz", "HOME": "/tmp"}
    r = sh(d, sbx["id"], 'echo "$FOO|$HOME|$USER|$PATH"')
    assert r["stdout"] == "bar baz|/tmp|user|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:" \
        "/sbin:/bin\n", r
    # the exec's own env still overrides the sandbox's
    r = d.exec(sbx["id"], argv=["sh", "-c", "echo $FOO"], env={"FOO": "exec"})
    assert r["stdout"] == "exec\n", r
    # a label filter finds it; the pooled ones are nowhere
    lst = d.get("/v1/sandboxes?label=team=a").json()["sandboxes"]
    assert [s["id"] for s in lst] == [sbx["id"]]
    # an env-less hand-out does not see the previous request's env
    other, hdr, _ = create(d)
    assert hdr == "hit"
    assert sh(d, other["id"], 'echo "[$FOO]"')["stdout"] == "[]\n"


def _ts(s):
    from datetime import datetime
    return datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


# ---- misses ----------------------------------------------------------------------

def test_options_the_pool_cannot_serve_are_cold_created(pool_daemon):
    d = pool_daemon("--pool", "2")
    cases = [{"memory": "128M"}, {"cpus": 0.5}, {"pids": 64}, {"disk": "64M"}]
    for opts in cases:
        sbx, hdr, _ = create(d, **opts)
        assert hdr == "miss", (opts, hdr)
        r = d.exec(sbx["id"], argv=["echo", "ok"])
        assert r["stdout"] == "ok\n", r
        if "memory" in opts:
            assert sbx["options"]["memory"] == 128 << 20
    m = metrics(d)
    assert m['sandlot_pool_misses_total{image="host",reason="options"}'] == len(cases)
    assert m['sandlot_pool_hits_total{image="host"}'] == 0
    assert pool_state(d) == {"size": 2, "ready": 2}, "a miss must not consume the pool"
    # the same values as the defaults are a hit
    sbx, hdr, _ = create(d, memory="512M", pids=256, disk="1G", network="none", image="host")
    assert hdr == "hit"
    assert "pool=options" in d.log_text()


def test_a_network_policy_is_applied_on_hand_out(pool_daemon):
    """A pooled sandbox has no network; one with a policy is handed out with
    it applied (the policy is not an option a pooled sandbox must share)."""
    d = pool_daemon("--pool", "1")
    sbx, hdr, _ = create(d, network={"allow": ["pypi.org"]})
    assert hdr == "hit", hdr
    assert sbx["options"]["network"] == {"mode": "allowlist", "allow": ["pypi.org"], "deny": []}
    r = d.exec(sbx["id"], command="getent hosts blocked.example; echo rc=$?")
    assert "rc=2" in r["stdout"], r
    log = d.get(f"/v1/sandboxes/{sbx['id']}/network/log").json()["events"]
    assert any(e["name"] == "blocked.example" and e["reason"] == "not_allowed" for e in log), log


def test_an_empty_pool_misses_and_still_creates(pool_daemon):
    d = pool_daemon("--pool", "1")
    hdrs = []
    for _ in range(4):  # back to back: faster than a refill
        sbx, hdr, _ = create(d)
        hdrs.append(hdr)
        assert d.exec(sbx["id"], argv=["true"])["exit_code"] == 0
    assert hdrs[0] == "hit" and "miss" in hdrs, hdrs
    m = metrics(d)
    assert m['sandlot_pool_misses_total{image="host",reason="empty"}'] == hdrs.count("miss")
    assert m['sandlot_pool_hits_total{image="host"}'] == hdrs.count("hit")
    assert wait_until(lambda: pool_full(d), 30)


def test_no_pool_no_header(sandlotd):
    r = sandlotd.post("/v1/sandboxes", json_body={})
    assert r.status == 201
    assert "Sandlot-Pool" not in r.headers
    assert "pool" not in sandlotd.get("/v1/health").json()
    assert "sandlot_pool_" not in sandlotd.get("/metrics").body.decode()


# ---- visibility, accounting --------------------------------------------------------

def test_pooled_sandboxes_are_not_listed_or_counted(pool_daemon):
    d = pool_daemon("--pool", "3", "--max-sandboxes", "2")
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []
    h = health(d)
    assert h["sandboxes"] == 0 and h["pool"] == {"host": {"size": 3, "ready": 3}}
    assert metrics(d)['sandlot_sandboxes{state="running"}'] == 0
    # their ids are unknown to every route
    assert len(pool_markers(d)) == 3
    for sid in pool_markers(d):
        assert ID_RE.match(sid)
        assert d.get(f"/v1/sandboxes/{sid}").status == 404
        assert d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["true"]}).status == 404
        assert d.delete(f"/v1/sandboxes/{sid}").status == 404
    # --max-sandboxes counts users' sandboxes only: 2 hand-outs, then 429
    ids = [create(d)[0]["id"] for _ in range(2)]
    r = d.post("/v1/sandboxes", json_body={})
    assert r.status == 429 and r.json()["error"]["code"] == "too_many_sandboxes", r
    lst = d.get("/v1/sandboxes").json()["sandboxes"]
    assert sorted(s["id"] for s in lst) == sorted(ids)
    assert wait_until(lambda: not (set(ids) & pool_markers(d)), 5), \
        "handed-out ids still marked as pooled"


def test_a_pooled_sandbox_that_died_is_never_handed_out(pool_daemon):
    d = pool_daemon("--pool", "2")
    victims = pooled_inits(d)
    assert len(victims) == 2, victims
    for p in victims:
        os.kill(p, signal.SIGKILL)  # the sandboxes' inits, children of our daemon
    # Dead (zombies: the daemon reaps them when it destroys the sandbox),
    # and the next hand-out comes before the pool's once-a-second check
    # could notice: a hand-out itself checks that the sandbox is alive (and
    # misses otherwise).
    assert wait_until(lambda: all(hostscan.state(p) in ("Z", "") for p in victims), 5)
    sbx, hdr, _ = create(d)
    assert hdr in ("hit", "miss")
    assert d.exec(sbx["id"], argv=["echo", "alive"])["stdout"] == "alive\n"
    assert init_pid_of(d, sbx["id"]) not in victims
    assert wait_until(lambda: pool_full(d) and not (pooled_inits(d) & victims), 30), health(d)
    assert "event=pool_drop" in d.log_text()
    sbx, hdr, _ = create(d)
    assert hdr == "hit"
    assert d.exec(sbx["id"], argv=["true"])["exit_code"] == 0


# ---- shutdown, restart ----------------------------------------------------------------

def test_sigterm_with_a_full_pool_leaves_nothing(pool_daemon):
    d = pool_daemon("--pool", "3")
    user = create(d)[0]["id"]
    assert wait_until(lambda: pool_full(d), 30)
    pooled_ids = pool_markers(d)
    assert len(pooled_ids) == 3, pooled_ids
    inits = {p for p in hostscan.init_pids() if hostscan.ppid(p) == d.proc.pid}
    assert len(inits) == 4, inits
    t0 = time.monotonic()
    assert d.stop() == 0
    assert time.monotonic() - t0 < 10
    assert not (inits & hostscan.init_pids()), "sandbox inits survived SIGTERM"
    problems = leftovers_of(pooled_ids | {user}, d.data_dir)

    # the daemon is gone: nothing at all may still use its data dir, not
    # even the storage pool it unmounted (whose loop device detaches itself
    # a moment later, or once another namespace that holds a copy of the
    # pool's mount drops it: see hostscan.loop_holders)
    def in_use():
        return [f"loop device {dev} backed by {bf}"
                for dev, bf in hostscan.loop_backing_files().items()
                if bf.startswith(str(d.data_dir)) and not hostscan.is_pool_image(bf)] + \
               hostscan.lingering_pool_loops(d.data_dir) + \
               [f"mount left: {ln}" for ln in hostscan.sandlot_mounts() if str(d.data_dir) in ln]
    wait_until(lambda: not in_use(), 5)
    problems += in_use()
    assert not problems, problems
    log = d.log_path.read_text()
    assert "event=pool_stopped destroyed=3" in log, log[-3000:]
    # Restarted: the pooled ones were never users' sandboxes, so nothing is
    # reported about them; the user's one is.
    d.start()
    assert wait_until(lambda: pool_full(d), 30)
    lst = d.get("/v1/sandboxes?state=all").json()["sandboxes"]
    assert [s["id"] for s in lst] == [user], lst
    assert not (pooled_ids & pool_markers(d))


def test_kill9_with_a_full_pool_then_restart_cleans_up(pool_daemon):
    d = pool_daemon("--pool", "2")
    pooled_ids = pool_markers(d)
    inits = {p for p in hostscan.init_pids() if hostscan.ppid(p) == d.proc.pid}
    assert len(pooled_ids) == 2 and len(inits) == 2
    d.kill9()
    assert wait_until(lambda: not (inits & hostscan.init_pids()), 10), \
        "pooled inits survived the daemon"
    d.start()
    assert wait_until(lambda: pool_full(d), 30)
    # the previous run's pooled sandboxes: markers, cgroups and images gone
    assert wait_until(lambda: not leftovers_of(pooled_ids, d.data_dir), 10), \
        leftovers_of(pooled_ids, d.data_dir)
    assert "event=pool_recover markers=2" in d.log_text()
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []
    sbx, hdr, _ = create(d)
    assert hdr == "hit"


# ---- options -------------------------------------------------------------------------

@pytest.mark.parametrize("arg, msg", [
    ("abc", "the size must be a whole number"),
    ("-1", "the size must be a whole number"),
    ("1001", "from 0 to 1000"),
    ("host=", "the size must be a whole number"),
    ("=3", "expected N, IMAGE=N, vm:IMAGE=N or ns:IMAGE=N"),
    ("vm:=3", "expected N, IMAGE=N, vm:IMAGE=N or ns:IMAGE=N"),
    ("no-such-image=2", "no-such-image"),
])
def test_bad_pool_arguments(tmp_path, arg, msg):
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/s.sock", "--data-dir",
                        str(tmp_path / "data"), "--pool", arg],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr, p.stderr


def test_per_image_setting_and_zero(pool_daemon):
    d = pool_daemon("--pool", "5", "--pool", "host=2")  # the last one for an image wins
    assert pool_state(d) == {"size": 2, "ready": 2}
    assert "pools=\"host=2\"" in d.log_text()
    d2 = pool_daemon("--pool", "host=0", wait_full=False)
    assert "pool" not in health(d2)
    r = d2.post("/v1/sandboxes", json_body={})
    assert r.status == 201 and "Sandlot-Pool" not in r.headers
