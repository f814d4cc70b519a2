"""sandlotd as one node of a fleet (src/daemon/node.c, docs/fleet.md):
--node-id in every new sandbox id (and MCP session id) with single-node ids
still working on every route, the capacity in /v1/health and on the HAProxy
agent-check port, 503 node_full before anything is allocated, the node id
file, and on cgroup v2 the sandboxes' cgroups nested below sandlotd's own.

The fleet itself (several nodes, HAProxy, the gateway) is tested in
tests/fleet."""
import concurrent.futures
import os
import re
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import wait_until
from daemon import SANDLOTD
from test_daemon_core import assert_error, free_port, own_daemon  # noqa: F401
from test_e2b_hosts import ask, host_of, serve_index

SMALL = {"memory": "32M", "disk": "16M", "pids": 16}
LEGACY_RE = re.compile(r"^sb-[a-z2-7]{26}$")


def node_re(node):
    return re.compile(rf"^sb-{node}-[a-z2-7]{{{25 - len(node)}}}$")


def agent_says(port):
    """What the agent-check port answers: one line, then the connection closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        data = b""
        while True:
            chunk = s.recv(100)
            if not chunk:
                return data.decode()
            data += chunk


def health(d):
    r = d.get("/v1/health")
    assert r.status == 200, r
    return r.json()


def write_file(d, sid, path, data):
    r = d.put(f"/v1/sandboxes/{sid}/files?path={path}", data)
    assert r.status in (200, 201, 204), r


def read_file(d, sid, path):
    r = d.get(f"/v1/sandboxes/{sid}/files?path={path}")
    assert r.status == 200, r
    return r.body


# ---- ids -------------------------------------------------------------------------------

def test_node_id_in_ids_on_every_api(own_daemon, tmp_path):  # noqa: F811
    token = "fleetnode-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(tf, 0o600)
    port = free_port()
    d = own_daemon(extra_args=["--node-id", "n1", "--listen", f"tcp:127.0.0.1:{port}",
                               "--token-file", str(tf)]).start()
    d.tcp_port, d.token = port, token
    assert health(d)["node_id"] == "n1"

    # /v1: the id carries the node, is 29 characters, and every route takes it
    sid = d.create(**SMALL)
    assert node_re("n1").match(sid) and len(sid) == 29, sid
    assert d.exec(sid, "echo hi")["stdout"] == "hi\n"
    write_file(d, sid, "a.txt", b"node one")
    assert read_file(d, sid, "a.txt") == b"node one"
    assert d.get(f"/v1/sandboxes/{sid}").json()["id"] == sid
    assert sid in [s["id"] for s in d.get("/v1/sandboxes").json()["sandboxes"]]

    # E2B: the same ids, its routes and its hosts (PORT-sb-n1-....DOMAIN)
    r = d.post("/e2b/v2/sandboxes", json_body={"templateID": "base", "timeout": 300})
    assert r.status == 201, r
    eid = r.json()["sandboxID"]
    assert node_re("n1").match(eid), eid
    r = d.get(f"/e2b/sandboxes/{eid}")
    assert r.status == 200 and r.json()["sandboxID"] == eid, r
    serve_index(d, eid, 8000, "served by n1")
    st, _, body = ask(d, host_of(d, eid, 8000), "/index.html", [("X-API-KEY", token)])
    assert st == 200 and body == b"served by n1", (st, body)

    # MCP: session ids carry the node too (a proxy routes by the header)
    r = d.request("POST", "/mcp", body=(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        b'"2025-06-18","capabilities":{},"clientInfo":{"name":"pytest","version":"1"}}}'),
        headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert r.status == 200, r
    msid = r.headers.get("Mcp-Session-Id", "")
    assert re.match(r"^mcp-n1-[a-z2-7]{26}$", msid), r.headers  # all 130 bits: a credential

    # an id of another node is unknown here (404), a malformed one says the shapes
    other = "sb-n2-" + "a" * 23
    assert_error(d.get(f"/v1/sandboxes/{other}"), 404, "not_found")
    err = assert_error(d.get("/v1/sandboxes/sb-N1-" + "a" * 23), 404, "not_found")
    assert "sb-NODE-" in err["message"] and "[a-z0-9]" in err["message"], err
    for bad in ("sb-n1-" + "a" * 24, "sb-toolongnode-" + "a" * 14, "sb--" + "a" * 25):
        assert_error(d.get(f"/v1/sandboxes/{bad}"), 404, "not_found")
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_single_node_ids_keep_working(own_daemon, tmp_path):  # noqa: F811
    """A daemon that joins a fleet keeps serving the sandboxes it made
    before it had a node id: a paused one resumes with its files."""
    d = own_daemon().start()
    assert health(d)["node_id"] is None
    old = d.create(**SMALL)
    assert LEGACY_RE.match(old), old
    write_file(d, old, "keep.txt", b"from before")
    r = d.post(f"/v1/sandboxes/{old}/pause")
    assert r.status == 200 and r.json()["state"] == "paused", r
    assert d.stop() == 0

    d.extra_args = ["--node-id", "edge7"]
    d.start()
    r = d.post(f"/v1/sandboxes/{old}/resume")
    assert r.status == 200 and r.json()["state"] == "running", r
    assert read_file(d, old, "keep.txt") == b"from before"
    assert d.exec(old, "echo old")["stdout"] == "old\n"
    new = d.create(**SMALL)
    assert node_re("edge7").match(new), new
    ids = {s["id"] for s in d.get("/v1/sandboxes").json()["sandboxes"]}
    assert {old, new} <= ids
    for sid in (old, new):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_node_id_flags(own_daemon, tmp_path):  # noqa: F811
    def refused(*args):
        p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/x.sock",
                            "--data-dir", str(tmp_path / "x"), *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, p
        return p.stderr

    for bad in ("N1", "n-1", "", "ninechars", "n_1"):
        assert "invalid --node-id" in refused("--node-id", bad)
    assert "one or the other" in refused("--node-id", "n1", "--node-id-file", str(tmp_path / "f"))
    assert "absolute" in refused("--node-id-file", "relative/id")
    assert "invalid --agent-port" in subprocess.run(
        [str(SANDLOTD), "--listen", f"unix:{tmp_path}/y.sock", "--data-dir", str(tmp_path / "y"),
         "--agent-port", "nohost:x"], capture_output=True, text=True, timeout=30).stderr

    # --node-id-file: made once (5 characters), then the same id on every start
    idf = tmp_path / "node-id"
    d = own_daemon(extra_args=["--node-id-file", str(idf)]).start()
    made = idf.read_text().strip()
    assert re.fullmatch(r"[a-z2-7]{5}", made), made
    assert health(d)["node_id"] == made
    sid = d.create(**SMALL)
    assert node_re(made).match(sid), sid
    assert d.stop() == 0
    d.start()
    assert health(d)["node_id"] == made and idf.read_text().strip() == made
    # the registry kept the node's ids (ended by the stop)
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200 and r.json()["state"] == "deleted", r
    assert node_re(made).match(d.create(**SMALL))
    assert d.stop() == 0
    idf.write_text("Bad-Id\n")
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/z.sock", "--data-dir",
                        str(tmp_path / "z"), "--node-id-file", str(idf)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "is not a node id" in p.stderr, p


# ---- capacity ----------------------------------------------------------------------------

def create_failures(d):
    m = re.search(r"^sandlot_sandbox_create_failures_total (\d+)$", d.get("/metrics").body.decode(),
                  re.M)
    return int(m.group(1))


def test_capacity_health_agent_and_node_full(own_daemon):  # noqa: F811
    d = own_daemon(extra_args=["--node-id", "n1", "--max-sandboxes", "2", "--node-memory", "1G",
                               "--agent-port", "127.0.0.1:0"]).start()
    h = health(d)
    assert h["state"] == "ready" and h["status"] == "ok", h
    cap = h["capacity"]
    assert cap["score"] == 100 and cap["sandboxes"] == 0 and cap["max_sandboxes"] == 2, cap
    assert cap["memory_total"] == 1 << 30 and cap["memory_allocated"] == 0, cap
    assert cap["memory_enforced"] is True and cap["cpus_enforced"] is False, cap
    assert cap["cpus_milli"] >= 1000 and cap["disk_total"] >= cap["disk_free"] > 0, cap
    assert isinstance(cap["load1"], float), cap
    agent = h["agent_port"]
    assert agent_says(agent) == "100% ready\n"

    a = d.create(memory="256M", disk="16M", pids=16)
    cap = health(d)["capacity"]
    # sandboxes: 1 of 2 free (50%), memory: 768M of 1G (75%): the lesser
    assert cap["sandboxes"] == 1 and cap["memory_allocated"] == 256 << 20, cap
    assert cap["score"] == 50, cap
    assert agent_says(agent) == "50% ready\n"

    # too much memory: 503 node_full, Retry-After, nothing made, no failure counted
    # (a failed creation would count one and log create_failed)
    failures = create_failures(d)
    r = d.post("/v1/sandboxes", json_body={"memory": "1G", "disk": "16M"})
    err = assert_error(r, 503, "node_full")
    assert r.headers.get("Retry-After") == "1", r.headers
    assert "n1 is full" in err["message"] and "--node-memory" in err["message"], err
    assert create_failures(d) == failures
    assert len(d.get("/v1/sandboxes").json()["sandboxes"]) == 1
    assert "create_failed" not in d.log_text()

    b = d.create(memory="256M", disk="16M", pids=16)
    h = health(d)
    assert h["state"] == "full" and h["capacity"]["score"] == 0, h
    assert agent_says(agent) == "drain\n"
    err = assert_error(d.post("/v1/sandboxes", json_body=SMALL), 503, "node_full")
    assert "--max-sandboxes" in err["message"], err
    # E2B's create refuses the same way (its error shape, the same status)
    r = d.post("/e2b/v2/sandboxes", json_body={"templateID": "base"})
    assert r.status == 503 and r.headers.get("Retry-After") == "1", r
    assert "n1 is full" in r.json()["message"], r

    # paused sandboxes do not count; resuming one on a full node is refused the same way
    r = d.post(f"/v1/sandboxes/{a}/pause")
    assert r.status == 200, r
    assert health(d)["state"] == "ready"
    c = d.create(**SMALL)
    err = assert_error(d.post(f"/v1/sandboxes/{a}/resume"), 503, "node_full")
    assert f"sandbox {a} stays paused" in err["message"], err
    assert d.get(f"/v1/sandboxes/{a}").json()["state"] == "paused"

    for sid in (b, c):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert health(d)["capacity"]["score"] == 100
    assert agent_says(agent) == "100% ready\n"
    r = d.post(f"/v1/sandboxes/{a}/resume")
    assert r.status == 200, r
    assert d.delete(f"/v1/sandboxes/{a}").status == 204
    assert d.stop() == 0
    # the agent port closes with the daemon
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", agent), timeout=5).close()


def test_concurrent_creates_never_pass_the_limits(own_daemon):  # noqa: F811
    """12 creates at once on a node with room for 4 (by memory: 4 x 64M of
    256M): exactly 4 are made, the other 8 get 503 node_full, and the agent
    port answers all along (the admission is one check under the daemon's
    lock, the memory of creations in progress counted)."""
    d = own_daemon(extra_args=["--node-id", "n4", "--node-memory", "256M",
                               "--agent-port", "127.0.0.1:0"]).start()
    agent = health(d)["agent_port"]
    body = {"memory": "64M", "disk": "16M", "pids": 16}
    results, lines = [], []
    stop = threading.Event()

    def poll_agent():
        while not stop.is_set():
            lines.append(agent_says(agent))

    poller = threading.Thread(target=poll_agent)
    poller.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            results = list(ex.map(lambda _: d.post("/v1/sandboxes", json_body=body), range(12)))
    finally:
        stop.set()
        poller.join(30)
    made = [r.json()["id"] for r in results if r.status == 201]
    refused = [r for r in results if r.status != 201]
    assert len(made) == 4, results
    for r in refused:
        assert_error(r, 503, "node_full")
    assert lines and all(re.fullmatch(r"\d+% ready\n|drain\n", x) for x in lines), lines
    h = health(d)
    assert h["state"] == "full" and h["capacity"]["memory_allocated"] == 256 << 20, h
    assert agent_says(agent) == "drain\n"
    for sid in made:
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert health(d)["capacity"]["memory_allocated"] == 0


def test_node_cpus(own_daemon):  # noqa: F811
    d = own_daemon(extra_args=["--node-cpus", "1"]).start()
    assert health(d)["capacity"]["cpus_milli"] == 1000
    a = d.create(cpus=0.75, **SMALL)
    assert health(d)["capacity"]["cpus_allocated_milli"] == 750
    err = assert_error(d.post("/v1/sandboxes", json_body=dict(SMALL, cpus=0.5)), 503, "node_full")
    assert "--node-cpus" in err["message"], err
    # a sandbox without a CPU quota takes none of the node's
    b = d.create(**SMALL)
    assert d.delete(f"/v1/sandboxes/{a}").status == 204
    assert d.delete(f"/v1/sandboxes/{b}").status == 204


def test_drain(own_daemon):  # noqa: F811
    d = own_daemon(extra_args=["--node-id", "n3", "--agent-port", "127.0.0.1:0"]).start()
    agent = health(d)["agent_port"]
    a = d.create(**SMALL)
    p = d.create(**SMALL)
    assert d.post(f"/v1/sandboxes/{p}/pause").status == 200
    for bad in ({}, {"draining": "yes"}, {"draining": True, "other": 1}):
        assert_error(d.post("/v1/node/drain", json_body=bad), 400, "bad_request")
    r = d.post("/v1/node/drain", json_body={"draining": True})
    assert r.status == 200 and r.json()["state"] == "draining", r
    assert r.json()["capacity"]["score"] == 0 and r.json()["node_id"] == "n3", r
    assert agent_says(agent) == "drain\n"
    assert "event=node_drain draining=yes" in d.log_text()
    # no new or resumed sandbox; the running one goes on
    err = assert_error(d.post("/v1/sandboxes", json_body=SMALL), 503, "node_full")
    assert "n3 is draining" in err["message"], err
    err = assert_error(d.post(f"/v1/sandboxes/{p}/resume"), 503, "node_full")
    assert f"sandbox {p} stays paused" in err["message"], err
    assert d.exec(a, "echo still")["stdout"] == "still\n"
    r = d.post("/v1/node/drain", json_body={"draining": False})
    assert r.status == 200 and r.json()["state"] == "ready", r
    assert agent_says(agent) == "99% ready\n"  # 1 of --max-sandboxes 2000 running
    assert d.post(f"/v1/sandboxes/{p}/resume").status == 200
    for sid in (a, p):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_single_node_max_sandboxes_stays_429(own_daemon):  # noqa: F811
    d = own_daemon(extra_args=["--max-sandboxes", "1"]).start()
    a = d.create(**SMALL)
    r = d.post("/v1/sandboxes", json_body=SMALL)
    assert_error(r, 429, "too_many_sandboxes")
    assert health(d)["state"] == "full"
    assert d.delete(f"/v1/sandboxes/{a}").status == 204


def test_agent_port_in_use(own_daemon):  # noqa: F811
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        d = own_daemon(extra_args=["--agent-port", f"127.0.0.1:{s.getsockname()[1]}"])
        with pytest.raises(RuntimeError) as e:
            d.start()
        assert "--agent-port" in str(e.value) and "in use" in str(e.value), e.value
        d.proc = None
    finally:
        s.close()


# ---- cgroup v2: nested below sandlotd's own cgroup ---------------------------------------

def v2_mount():
    for m in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if Path(m, "cgroup.controllers").exists():
            return m
    return None


@pytest.fixture
def own_cgroup():
    """A cgroup of this test's own in the v2 hierarchy (the hybrid's unified
    one here), as a pod's would be; removed at the end with whatever
    sandlotd made in it."""
    mount = v2_mount()
    if not mount:
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
    cg = Path(mount) / f"sl-fleetnode-{os.getpid()}"
    cg.mkdir()
    yield mount, cg
    for sub in sorted(cg.rglob("*"), key=lambda p: -len(p.parts)):
        if sub.is_dir():
            sub.rmdir()
    cg.rmdir()


def started_in(cg):
    """A prefix that puts the process in cgroup cg, then execs the rest."""
    return ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]


def test_cgroup_v2_nests_below_own_cgroup(own_daemon, own_cgroup):  # noqa: F811
    mount, cg = own_cgroup
    d = own_daemon(extra_args=["--node-id", "n1", "--cgroup-nest"])
    d.prefix = started_in(cg)
    d.env = dict(d.env, SANDLOT_CGROUP="v2", SANDLOT_CGROUP_V2_ROOT=mount)
    d.start()
    h = health(d)
    assert h["cgroup"] == str(cg), h
    # sandlotd moved itself (and the helper it forks) into a leaf, out of
    # the cgroup whose subtree_control the sandboxes need
    leaf = [int(p) for p in (cg / "sandlotd" / "cgroup.procs").read_text().split()]
    assert d.pid in leaf, leaf
    assert (cg / "cgroup.procs").read_text() == ""
    assert f'cgroup_nest nested=yes cgroup="{cg}"' in d.log_text()
    r = d.post("/v1/sandboxes", json_body=SMALL)
    if r.status == 201:
        sid = r.json()["id"]
        procs = (cg / "sandlot" / sid / "cgroup.procs").read_text().split()
        assert procs, "the sandbox's processes are in its nested cgroup"
        assert not Path(mount, "sandlot", sid).exists()
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    else:
        # This hybrid host's v2 hierarchy has no memory controller (they
        # are all on v1): the limit cannot be set, and the error names the
        # nested cgroup it was tried in.
        assert "memory" not in Path(mount, "cgroup.controllers").read_text().split(), r
        assert r.status == 501 and str(cg) in r.json()["error"]["message"], r
    assert d.stop() == 0


def test_cgroup_v2_nest_refused_beside_other_processes(own_daemon, own_cgroup):  # noqa: F811
    mount, cg = own_cgroup
    other = subprocess.Popen(started_in(cg) + ["sleep", "600"])
    try:
        assert wait_until(lambda: str(other.pid) in (cg / "cgroup.procs").read_text().split(), 10)
        d = own_daemon(extra_args=["--cgroup-nest"])
        d.prefix = started_in(cg)
        d.env = dict(d.env, SANDLOT_CGROUP="v2", SANDLOT_CGROUP_V2_ROOT=mount)
        with pytest.raises(RuntimeError) as e:
            d.start()
        assert "other processes are in it" in str(e.value) and "--cgroup-nest" in str(e.value)
        d.proc = None
        # without --cgroup-nest it starts, and its sandboxes stay at the top
        d.extra_args = []
        d.start()
        assert "cgroup" not in health(d)
        assert d.stop() == 0
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
