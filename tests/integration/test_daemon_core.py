"""sandlotd core: the HTTP layer, the sandbox lifecycle routes, expiry,
the TCP listener with its token, malformed requests, scale, and restart
safety (kill -9 and SIGTERM).

Each test drives a real sandlotd on a temporary socket and data dir (the
`sandlotd` fixture, or a Daemon of its own when it kills and restarts it).
"""
import http.client
import json
import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

import hostscan
from conftest import PLAIN_BIN_DIR, wait_until
from daemon import SANDLOTD, Daemon

ID_RE = re.compile(r"^sb-[a-z2-7]{26}$")
SMALL = {"memory": "32M", "disk": "16M", "pids": 16}


# ---- helpers -----------------------------------------------------------------

def assert_error(r, status, code=None):
    """An error answer: the status, JSON {"error": {"code", "message"}}."""
    assert r.status == status, r
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    err = r.json()["error"]
    assert isinstance(err["code"], str) and err["code"], r
    assert isinstance(err["message"], str) and err["message"], r
    if code:
        assert err["code"] == code, r
    return err


def sandbox_cgroups(sid):
    return {p for p in hostscan.sandbox_cgroups() if p.endswith("/" + sid)}


def inits_of(daemon_pid):
    """sandlot-init processes that are children of the daemon (one per sandbox)."""
    return {p for p in hostscan.init_pids() if hostscan.ppid(p) == daemon_pid}


def state(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200, r
    return r.json()


def wait_state(d, sid, want, timeout):
    return wait_until(lambda: state(d, sid)["state"] == want, timeout, interval=0.1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp_request(port, method, path, token=None, body=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        from daemon import Response
        return Response(r.status, dict(r.getheaders()), r.read())
    finally:
        c.close()


def raw_exchange(sock_path, data, timeout=10):
    """Send raw bytes on a fresh connection; return whatever comes back
    until the server closes or the timeout passes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(sock_path))
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and b"Connection: close" not in out and len(out) > 20:
                # keep-alive answer: read what is there and stop
                s.settimeout(0.5)
        return out
    finally:
        s.close()


@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    """Factory for daemons a test starts, kills and restarts itself; every
    one still running at the end is stopped with SIGTERM."""
    made = []

    def make(extra_args=(), base=None, data_dir=None, binary=None, env=None):
        base = base or tmp_path_factory.mktemp("sandlotd-own", numbered=True)
        data = data_dir or session_dirs["data_dir"] / "daemon" / Path(base).name
        d = Daemon(base, extra_args=extra_args, data_dir=data, env=env,
                   **({"binary": binary} if binary else {}))
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            d.stop()


# ---- health, metrics ---------------------------------------------------------

def test_health(sandlotd):
    r = sandlotd.get("/v1/health")
    assert r.status == 200, r
    h = r.json()
    assert h["status"] == "ok"
    assert h["sandboxes"] == 0
    assert isinstance(h["uptime_seconds"], int) and h["version"]


def test_metrics_count_sandboxes_and_requests(sandlotd):
    sid = sandlotd.create(**SMALL)
    text = sandlotd.get("/metrics").body.decode()
    assert 'sandlot_sandboxes{state="running"} 1' in text, text
    assert "sandlot_sandboxes_created_total 1" in text
    assert "# TYPE sandlot_exec_duration_seconds histogram" in text
    assert 'sandlot_exec_duration_seconds_bucket{le="+Inf"}' in text
    m = re.search(r"^sandlot_http_requests_total (\d+)$", text, re.M)
    assert m and int(m.group(1)) >= 1, text
    assert sandlotd.delete(f"/v1/sandboxes/{sid}").status == 204
    text = sandlotd.get("/metrics").body.decode()
    assert 'sandlot_sandboxes{state="running"} 0' in text
    assert 'sandlot_sandboxes{state="deleted"} 1' in text
    assert "sandlot_sandboxes_ended_total 1" in text


# ---- lifecycle -----------------------------------------------------------------

def test_create_get_list_delete(sandlotd):
    d = sandlotd
    r = d.post("/v1/sandboxes", json_body={
        "memory": "64M", "cpus": 0.5, "pids": 32, "disk": 32 << 20,
        "env": {"GREETING": "hello"}, "network": "none",
        "metadata": {"team": "a", "run": "1"}})
    assert r.status == 201, r
    sb = r.json()
    sid = sb["id"]
    assert ID_RE.match(sid), sb
    assert sb["state"] == "running"
    assert sb["created_at"].endswith("Z") and sb["expires_at"] is None
    assert sb["ended_at"] is None and sb["end_reason"] is None
    assert sb["isolation"] == "ns" and sb["accel"] is None
    assert sb["options"] == {"image": "host", "isolation": "ns", "memory": 64 << 20, "cpus": 0.5, "pids": 32,
                             "disk": 32 << 20, "env": {"GREETING": "hello"},
                             "network": {"mode": "none", "allow": [], "deny": []}, "ports": []}
    assert sb["metadata"] == {"team": "a", "run": "1"}
    assert sb["ttl_seconds"] == 0 and sb["idle_timeout_seconds"] == 0

    # its init is a child of the daemon, in its cgroup
    assert sandbox_cgroups(sid), "no cgroup for the new sandbox"
    assert len(inits_of(d.proc.pid)) == 1

    got = state(d, sid)
    assert got["id"] == sid and got["state"] == "running"
    listed = d.get("/v1/sandboxes").json()["sandboxes"]
    assert [s["id"] for s in listed] == [sid]
    assert d.get("/v1/health").json()["sandboxes"] == 1

    r = d.delete(f"/v1/sandboxes/{sid}")
    assert r.status == 204, r
    assert r.body == b""
    # processes and cgroup are gone at once (an idle daemon tears down
    # before it answers; a busy one in the background: lifecycle.c)
    assert not inits_of(d.proc.pid)
    assert not sandbox_cgroups(sid)
    assert "sandlot_teardowns_pending 0\n" in d.get("/metrics").body.decode()
    ended = state(d, sid)
    assert ended["state"] == "deleted" and ended["end_reason"] == "deleted"
    assert ended["ended_at"] is not None
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    all_ = d.get("/v1/sandboxes?state=all").json()["sandboxes"]
    assert [s["id"] for s in all_] == [sid]
    assert [s["id"] for s in d.get("/v1/sandboxes?state=deleted").json()["sandboxes"]] == [sid]
    # operations on an ended sandbox: 410 with state and reason
    err = assert_error(d.delete(f"/v1/sandboxes/{sid}"), 410, "sandbox_ended")
    assert err["state"] == "deleted" and err["end_reason"] == "deleted"
    assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive"), 410, "sandbox_ended")
    assert_error(d.get(f"/v1/sandboxes/{sid}/changes"), 410, "sandbox_ended")


def test_a_stop_finishes_the_teardowns_of_deleted_sandboxes(own_daemon):
    """DELETE answers before the sandbox's teardown is done (lifecycle.c):
    a stop right after a burst of deletes still frees everything of every
    sandbox — processes, cgroups, workspaces — before sandlotd exits."""
    import concurrent.futures as cf
    d = own_daemon().start()
    with cf.ThreadPoolExecutor(8) as ex:
        ids = list(ex.map(lambda _: d.create(**SMALL), range(24)))
    kept = Path(d.data_dir) / "storage" / "mnt" / "kept"
    assert all((kept / sid).is_dir() for sid in ids)
    assert "workspace_removed" not in d.log_text()
    with cf.ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(lambda i: d.delete(f"/v1/sandboxes/{i}").status, ids))
    assert codes == [204] * len(ids)
    # Every one ended for the API at once...
    listed = d.get("/v1/sandboxes?state=deleted").json()["sandboxes"]
    assert {s["id"] for s in listed} == set(ids)
    pid = d.proc.pid
    assert d.stop() == 0
    # ...and nothing of any is left once the stop has returned (the pool
    # is unmounted by then: the log says which workspaces were removed).
    assert not inits_of(pid)
    assert not [c for c in hostscan.sandbox_cgroups() if c.rsplit("/", 1)[-1] in ids]
    log = d.log_text()
    removed = set(re.findall(r"event=workspace_removed sandbox=(\S+)", log))
    assert removed == set(ids), set(ids) - removed
    assert "destroy_deferred" not in log


def test_create_defaults_and_empty_body(sandlotd):
    r = sandlotd.request("POST", "/v1/sandboxes")   # no body at all
    assert r.status == 201, r
    sb = r.json()
    assert sb["options"]["memory"] == 512 << 20 and sb["options"]["pids"] == 256
    assert sb["options"]["disk"] == 1 << 30 and sb["options"]["cpus"] is None
    assert sb["metadata"] == {}
    r = sandlotd.post("/v1/sandboxes", json_body={"memory": 33554432, "disk": "16MiB"})
    assert r.status == 201, r
    assert r.json()["options"]["memory"] == 32 << 20
    assert r.json()["options"]["disk"] == 16 << 20


def test_sizes_as_numbers_and_strings_and_cpus(sandlotd):
    r = sandlotd.post("/v1/sandboxes", json_body={"memory": "48M", "disk": 20 << 20,
                                                  "cpus": 2, "pids": 2})
    assert r.status == 201, r
    o = r.json()["options"]
    assert o["memory"] == 48 << 20 and o["disk"] == 20 << 20
    assert o["cpus"] == 2.0 and o["pids"] == 2


def test_metadata_filter(sandlotd):
    d = sandlotd
    a1 = d.create(**SMALL, metadata={"team": "a", "env": "dev"})
    a2 = d.create(**SMALL, metadata={"team": "a", "env": "prod"})
    b1 = d.create(**SMALL, metadata={"team": "b"})
    none = d.create(**SMALL)

    def ids(q):
        r = d.get("/v1/sandboxes" + q)
        assert r.status == 200, r
        return [s["id"] for s in r.json()["sandboxes"]]

    assert ids("") == [a1, a2, b1, none]              # oldest first
    assert ids("?label=team=a") == [a1, a2]
    assert ids("?label=team=a&label=env=prod") == [a2]
    assert ids("?label=team=b") == [b1]
    assert ids("?label=team=c") == []
    assert ids("?label=env%3Ddev") == [a1]            # encoded '='
    assert ids("?label=team=") == []                   # empty value matches only ""
    assert d.delete(f"/v1/sandboxes/{a1}").status == 204
    assert ids("?label=team=a") == [a2]
    assert ids("?label=team=a&state=all") == [a1, a2]
    assert ids("?label=team=a&state=deleted") == [a1]
    assert_error(d.get("/v1/sandboxes?label=team"), 400, "bad_request")
    assert_error(d.get("/v1/sandboxes?label==x"), 400, "bad_request")
    assert_error(d.get("/v1/sandboxes?state=sleeping"), 400, "bad_request")


def test_metadata_validation(sandlotd):
    d = sandlotd
    for md, words in [
        ({"k": 1}, "must be a string"),
        ({"bad key": "v"}, "invalid key"),
        ({"k=v": "v"}, "invalid key"),
        ({"": "v"}, "invalid key"),
        ({"k": "x" * 1025}, "longer than"),
        ({f"k{i}": "v" for i in range(65)}, "more than"),
        (["a"], "must be an object"),
    ]:
        err = assert_error(d.post("/v1/sandboxes", json_body={"metadata": md}), 400,
                           "bad_request")
        assert "metadata" in err["message"] and words in err["message"], err


# ---- expiry ------------------------------------------------------------------------

def test_ttl_expiry(sandlotd):
    d = sandlotd
    t0 = time.monotonic()
    sb = d.post("/v1/sandboxes", json_body={**SMALL, "ttl_seconds": 2}).json()
    sid = sb["id"]
    assert sb["ttl_seconds"] == 2 and sb["expires_at"] is not None
    assert wait_state(d, sid, "expired", 6), state(d, sid)
    took = time.monotonic() - t0
    assert 1.5 <= took <= 4.5, took
    s = state(d, sid)
    assert s["end_reason"] == "ttl" and s["ended_at"]
    # The state is "expired" before the teardown that follows it is over
    # (init reaped, cgroups removed): up to 50 ms after it here, under the
    # sanitized daemon on a loaded machine.
    assert wait_until(lambda: not inits_of(d.proc.pid), 5), inits_of(d.proc.pid)
    assert wait_until(lambda: not sandbox_cgroups(sid), 5), sandbox_cgroups(sid)
    err = assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive"), 410, "sandbox_ended")
    assert err["state"] == "expired" and err["end_reason"] == "ttl"
    assert "expired" in err["message"]
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    assert [x["id"] for x in d.get("/v1/sandboxes?state=expired").json()["sandboxes"]] == [sid]


def test_idle_expiry_and_keepalive(sandlotd):
    d = sandlotd
    idle = d.create(**SMALL, idle_timeout_seconds=2)
    kept = d.create(**SMALL, idle_timeout_seconds=2)

    def keep_alive_until(cond, timeout):
        """Keepalives on `kept` every 0.5 s until cond() holds."""
        end = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < end, "timed out"
            r = d.post(f"/v1/sandboxes/{kept}/keepalive")
            assert r.status == 200, r
            time.sleep(0.5)  # the keepalives' pace, while polling cond

    # The other one goes after about 2 s.
    keep_alive_until(lambda: state(d, idle)["state"] == "expired", 20)
    s = state(d, idle)
    assert s["end_reason"] == "idle", s
    assert wait_until(lambda: not sandbox_cgroups(idle), 10)
    # A sandbox made now with the same idle timeout expires well after
    # `kept` would have without its keepalives.
    control = d.create(**SMALL, idle_timeout_seconds=2)
    keep_alive_until(lambda: state(d, control)["state"] == "expired", 20)
    assert state(d, kept)["state"] == "running"
    # GET is not activity: watching it does not keep it alive
    assert wait_state(d, kept, "expired", 5)
    assert state(d, kept)["end_reason"] == "idle"


def test_keepalive_sets_ttl(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL, ttl_seconds=2)
    r = d.post(f"/v1/sandboxes/{sid}/keepalive", json_body={"ttl_seconds": 30})
    assert r.status == 200, r
    assert r.json()["ttl_seconds"] == 30
    # Past the first TTL: a sandbox made now with it has expired.
    control = d.create(**SMALL, ttl_seconds=2)
    assert wait_state(d, control, "expired", 10)
    assert wait_until(lambda: not sandbox_cgroups(control), 10)
    assert state(d, sid)["state"] == "running"
    r = d.post(f"/v1/sandboxes/{sid}/keepalive", json_body={"ttl_seconds": 0})
    assert r.status == 200 and r.json()["expires_at"] is None, r
    assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive", json_body={"ttl": 5}), 400,
                 "bad_request")
    assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive", json_body={"ttl_seconds": "5"}),
                 400, "bad_request")
    assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive", json_body={"ttl_seconds": -1}),
                 400, "bad_request")
    assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive", json_body=[1]), 400, "bad_request")


def test_default_ttl_and_idle_from_options(own_daemon):
    d = own_daemon(extra_args=["--default-ttl", "60", "--default-idle-timeout", "30"]).start()
    sb = d.post("/v1/sandboxes", json_body=SMALL).json()
    assert sb["ttl_seconds"] == 60 and sb["idle_timeout_seconds"] == 30
    sb = d.post("/v1/sandboxes", json_body={**SMALL, "ttl_seconds": 0,
                                            "idle_timeout_seconds": 0}).json()
    assert sb["ttl_seconds"] == 0 and sb["expires_at"] is None
    assert d.stop() == 0


def test_running_exec_is_not_idle(sandlotd):
    """A command running longer than the idle timeout keeps the sandbox."""
    d = sandlotd
    sid = d.create(**SMALL, idle_timeout_seconds=2)
    probe = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["true"]})
    assert probe.status == 200, probe
    result = {}

    def run():
        result["r"] = d.post(f"/v1/sandboxes/{sid}/exec",
                             json_body={"argv": ["sleep", "6"]}, timeout=30)

    t = threading.Thread(target=run)
    t.start()
    assert wait_until(lambda: any(e["state"] == "running" for e in
                                  d.get(f"/v1/sandboxes/{sid}/execs").json()["execs"]), 10)
    # A sandbox made now with the same idle timeout expires later than this
    # one would have: once the reaper has ended it, it has passed this
    # one's deadline too.
    control = d.create(**SMALL, idle_timeout_seconds=2)
    assert wait_state(d, control, "expired", 10)
    assert wait_until(lambda: not sandbox_cgroups(control), 10)
    assert state(d, sid)["state"] == "running", "expired while a command ran"
    t.join(20)
    assert result["r"].status == 200 and result["r"].json()["exit_code"] == 0, result
    # idle again once it ended
    assert wait_state(d, sid, "expired", 5)
    assert state(d, sid)["end_reason"] == "idle"


# ---- limits --------------------------------------------------------------------------

def test_max_sandboxes(own_daemon):
    d = own_daemon(extra_args=["--max-sandboxes", "2"]).start()
    a = d.create(**SMALL)
    d.create(**SMALL)
    assert_error(d.post("/v1/sandboxes", json_body=SMALL), 429, "too_many_sandboxes")
    assert d.delete(f"/v1/sandboxes/{a}").status == 204
    d.create(**SMALL)
    assert d.stop() == 0


# ---- TCP and the token -----------------------------------------------------------------

def test_tcp_requires_token_file(own_daemon, tmp_path):
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/s.sock",
                        "--data-dir", str(tmp_path / "data"),
                        "--listen", f"tcp:127.0.0.1:{free_port()}"],
                       capture_output=True, timeout=10)
    assert p.returncode == 2, p
    assert b"--token-file" in p.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{tmp_path}/s.sock",
                        "--data-dir", str(tmp_path / "data"),
                        "--listen", f"tcp:127.0.0.1:{free_port()}", "--token-file", str(short)],
                       capture_output=True, timeout=10)
    assert p.returncode == 1 and b"at least 16" in p.stderr, p


def test_tcp_token(own_daemon, tmp_path):
    token = "s3cr3t-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(tf, 0o600)
    port = free_port()
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(tf)])
    d.start()
    sid = d.create(**SMALL)   # over the unix socket: no token needed
    routes = [("GET", "/v1/health"), ("GET", "/metrics"), ("GET", "/v1/sandboxes"),
              ("POST", "/v1/sandboxes"), ("GET", f"/v1/sandboxes/{sid}"),
              ("DELETE", f"/v1/sandboxes/{sid}"), ("POST", f"/v1/sandboxes/{sid}/keepalive"),
              ("POST", f"/v1/sandboxes/{sid}/exec"), ("GET", "/v1/nope"),
              ("PUT", f"/v1/sandboxes/{sid}/files?path=x")]
    for method, path in routes:
        for bad in (None, "wrong", token[:-1], token + "x", ""):
            r = tcp_request(port, method, path, token=bad)
            err = assert_error(r, 401, "unauthorized")
            assert token not in err["message"]
        assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), r.headers
    # lower-case scheme or a Basic header do not pass either
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/health", headers={"Authorization": f"bearer {token}x"})
    assert c.getresponse().status == 401
    c.close()
    # the right token works everywhere
    r = tcp_request(port, "GET", "/v1/health", token=token)
    assert r.status == 200, r
    r = tcp_request(port, "GET", f"/v1/sandboxes/{sid}", token=token)
    assert r.status == 200 and r.json()["state"] == "running", r
    r = tcp_request(port, "POST", "/v1/sandboxes", token=token, body=SMALL)
    assert r.status == 201, r
    sid2 = r.json()["id"]
    assert tcp_request(port, "DELETE", f"/v1/sandboxes/{sid2}", token=token).status == 204
    assert_error(tcp_request(port, "GET", "/v1/nope", token=token), 404, "unknown_route")
    assert d.stop() == 0
    log = d.log_path.read_text(errors="replace")
    assert "auth=bearer" in log and token not in log


# ---- malformed requests ------------------------------------------------------------------

def test_malformed_json(sandlotd):
    d = sandlotd
    for body in (b"{", b"nope", b'{"memory": "64M",}', b"\xff\xfe", b'{"a":1}{"b":2}',
                 b'{"memory": "64M", "memory": "32M"}', b"[" * 5000):
        r = d.request("POST", "/v1/sandboxes", body=body,
                      headers={"Content-Type": "application/json"})
        assert_error(r, 400, "invalid_json")
    for body in (b"[]", b'"x"', b"42", b"null"):
        r = d.request("POST", "/v1/sandboxes", body=body)
        assert r.status == 400, (body, r)


def test_wrong_types_and_unknown_fields(sandlotd):
    d = sandlotd
    cases = [
        ({"memory": True}, "memory", "integer"),
        ({"memory": [1]}, "memory", "size string"),
        ({"memory": "lots"}, "memory", None),
        ({"memory": -5}, "memory", "positive"),
        ({"memory": "1M"}, "memory", "minimum"),
        ({"disk": {}}, "disk", "integer"),
        ({"cpus": "2"}, "cpus", "number"),
        ({"cpus": 0}, "cpus", "between"),
        ({"pids": 1.5}, "pids", "integer"),
        ({"pids": 1}, "pids", "between"),
        ({"env": ["A=1"]}, "env", "object"),
        ({"env": {"A": 1}}, "env", "string"),
        ({"env": {"A=B": "1"}}, "env", "invalid variable name"),
        ({"image": 5}, "image", "string"),
        ({"image": "nosuch"}, "nosuch", None),
        ({"network": "host"}, "network", "none"),
        ({"ttl_seconds": "10"}, "ttl_seconds", "integer"),
        ({"ttl_seconds": -1}, "ttl_seconds", "between"),
        ({"idle_timeout_seconds": 1.5}, "idle_timeout_seconds", "integer"),
        ({"memroy": "64M"}, "memroy", "unknown field"),
        ({"hostname": "x"}, "hostname", "unknown field"),
    ]
    for body, field, words in cases:
        r = d.post("/v1/sandboxes", json_body=body)
        err = assert_error(r, 400, "bad_request")
        assert field in err["message"], (body, err)
        if words:
            assert words in err["message"], (body, err)
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []


def test_body_too_large(sandlotd):
    d = sandlotd
    big = b'{"metadata": {"k": "' + b"x" * (2 << 20) + b'"}}'
    r = d.request("POST", "/v1/sandboxes", body=big, headers={"Content-Type": "application/json"})
    assert_error(r, 413, "payload_too_large")
    # the same without Content-Length (chunked)
    c = d.conn()
    c.putrequest("POST", "/v1/sandboxes")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for i in range(0, len(big), 65536):
        piece = big[i:i + 65536]
        c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    from daemon import Response
    assert_error(Response(resp.status, dict(resp.getheaders()), resp.read()), 413,
                 "payload_too_large")
    c.close()
    # a body just under the limit is parsed (and rejected for its content)
    ok = b'{"metadata": {"k": "' + b"x" * ((1 << 20) - 100) + b'"}}'
    err = assert_error(d.request("POST", "/v1/sandboxes", body=ok), 400, "bad_request")
    assert "longer than" in err["message"]
    assert d.get("/v1/health").status == 200


def test_long_uri_and_headers(sandlotd):
    d = sandlotd
    assert_error(d.get("/v1/sandboxes?label=a=" + "x" * 20000), 414, "uri_too_long")
    assert_error(d.get("/v1/" + "y" * 9000), 414, "uri_too_long")
    # a header section past the connection's memory: answered (not JSON,
    # libmicrohttpd's own answer) or closed, but never a hang or a crash
    try:
        r = d.get("/v1/health", headers={"X-Big": "z" * 300000}, timeout=10)
        assert 400 <= r.status < 500, r
    except (ConnectionError, http.client.HTTPException):
        pass
    assert d.get("/v1/health").status == 200


def test_bad_ids_and_paths(sandlotd):
    d = sandlotd
    for sid in ("sb-nope", "sb-" + "a" * 25, "sb-" + "A" * 26, "sb-" + "1" * 26,
                "xx-" + "a" * 26, "%2e%2e", "sb-aaaaaaaaaaaaaaaaaaaaaaaaaa%2Fx"):
        for method in ("GET", "DELETE"):
            err = assert_error(d.request(method, f"/v1/sandboxes/{sid}"), 404, "not_found")
            assert "invalid sandbox id" in err["message"], err
        assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive"), 404, "not_found")
    unknown = "sb-" + "a" * 26
    err = assert_error(d.get(f"/v1/sandboxes/{unknown}"), 404, "not_found")
    assert "no sandbox" in err["message"]
    assert_error(d.get("/v1/sandboxes/%zz"), 400, "bad_request")
    assert_error(d.get("/v1/sandboxes/%00"), 400, "bad_request")


def test_unknown_routes_and_methods(sandlotd):
    d = sandlotd
    for method, path in [("GET", "/"), ("GET", "/v1"), ("GET", "/v1/sandboxes/"),
                         ("GET", "/v2/health"), ("POST", "/v1/nope"),
                         ("GET", "/v1/sandboxes/sb-x/unknown"), ("GET", "//v1/health")]:
        assert_error(d.request(method, path), 404, "unknown_route")
    for method, path, allowed in [("POST", "/v1/health", "GET"),
                                  ("PUT", "/v1/sandboxes", "POST"),
                                  ("PATCH", "/v1/sandboxes/sb-x", "DELETE"),
                                  ("GET", "/v1/sandboxes/sb-x/keepalive", "POST")]:
        r = d.request(method, path)
        assert_error(r, 405, "method_not_allowed")
        assert allowed in r.headers.get("Allow", ""), r.headers


def test_garbage_and_half_requests_do_not_hurt(sandlotd):
    d = sandlotd
    out = raw_exchange(d.sock, b"GARBAGE\r\n\r\n", timeout=5)
    assert out == b"" or out.startswith(b"HTTP/1.1 4"), out[:200]
    out = raw_exchange(d.sock, b"\x00\x01\x02\xff" * 100 + b"\r\n\r\n", timeout=5)
    assert out == b"" or out.startswith(b"HTTP/1.1 4"), out[:200]
    # a client that sends half a request and stalls holds only its own
    # connection
    stalled = []
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(d.sock))
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        stalled.append(s)
    t0 = time.monotonic()
    assert d.get("/v1/health").status == 200
    assert time.monotonic() - t0 < 1
    for s in stalled:
        s.close()
    # and a client that goes away mid-body
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(d.sock))
    s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
              + b"x" * 5000)
    s.close()
    assert d.get("/v1/health").status == 200
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []


def test_many_concurrent_clients(sandlotd):
    d = sandlotd
    errors = []

    def worker():
        try:
            for _ in range(20):
                r = d.get("/v1/sandboxes")
                assert r.status == 200
        except Exception as e:  # noqa: BLE001 - collected and reported
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]


# ---- the socket ----------------------------------------------------------------------------

def test_socket_mode_stale_and_live(own_daemon, tmp_path):
    base = tmp_path / "sock-test"
    sock = base / "run" / "nested" / "sandlot.sock"      # parents created
    d = own_daemon(base=base)
    d.sock = sock
    d.extra_args = []
    # a stale socket file from a dead daemon is replaced
    sock.parent.mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()
    d.start()
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o660
    # a second daemon on the same socket refuses to start
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{sock}",
                        "--data-dir", str(tmp_path / "data2")],
                       capture_output=True, timeout=10)
    assert p.returncode == 1 and b"already listening" in p.stderr, p
    assert d.get("/v1/health").status == 200
    # a non-socket file is not replaced
    plain = tmp_path / "plain"
    plain.write_text("x")
    p = subprocess.run([str(SANDLOTD), "--listen", f"unix:{plain}",
                        "--data-dir", str(tmp_path / "data3")],
                       capture_output=True, timeout=10)
    assert p.returncode == 1 and plain.read_text() == "x", p
    assert d.stop() == 0
    assert not sock.exists(), "socket file left after a clean stop"


def test_bad_arguments():
    for args in (["--listen", "http://x"], ["--listen", "unix:relative.sock"],
                 ["--max-sandboxes", "0"], ["--default-ttl", "-1"], ["--data-dir", "rel"],
                 ["--max-download", "lots"], ["--max-download", "-1"],
                 ["--nope"], ["extra"]):
        p = subprocess.run([str(SANDLOTD), *args], capture_output=True, timeout=10)
        assert p.returncode == 2, (args, p)
        assert p.stderr.startswith(b"sandlotd: "), p.stderr
    p = subprocess.run([str(SANDLOTD), "--help"], capture_output=True, timeout=10)
    assert p.returncode == 0 and b"--listen" in p.stdout


# ---- restart safety ----------------------------------------------------------------------------

def no_leftovers_of(ids, data_dir):
    problems = []
    for sid in ids:
        for cg in sandbox_cgroups(sid):
            problems.append(f"cgroup left: {cg}")
    dd = str(data_dir)
    for dev, bf in hostscan.loop_backing_files().items():
        if bf.startswith(dd) and not hostscan.is_pool_image(bf):
            problems.append(f"loop device {dev} backed by {bf}")
    # The storage pool itself may stay (mounted after a kill -9); no
    # workspace of a running sandbox may.
    problems += hostscan.pool_problems(data_dir)
    kept = Path(data_dir) / "storage" / "mnt" / "kept"
    if kept.is_dir():
        problems += [f"workspace left: {p}" for p in kept.iterdir() if p.name in ids]
    return problems


def test_kill9_then_restart_reports_lost(own_daemon):
    d = own_daemon().start()
    ids = [d.create(**SMALL, metadata={"n": str(i)}) for i in range(3)]
    inits = inits_of(d.proc.pid)
    assert len(inits) == 3
    d.kill9()
    # the inits die by themselves once their connection to sandlotd closed
    assert wait_until(lambda: not (inits & hostscan.init_pids()), 10), \
        "sandbox inits survived the daemon"
    d.start()
    for sid in ids:
        s = state(d, sid)
        assert s["state"] == "lost", s
        assert s["end_reason"] == "lost: sandlotd restarted" and s["ended_at"], s
        assert s["metadata"]["n"]
        assert_error(d.post(f"/v1/sandboxes/{sid}/keepalive"), 410, "sandbox_ended")
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    assert len(d.get("/v1/sandboxes?state=lost").json()["sandboxes"]) == 3
    assert "event=lost" in d.log_text()
    problems = wait_until(lambda: not no_leftovers_of(ids, d.data_dir), 5) or \
        no_leftovers_of(ids, d.data_dir)
    assert problems is True, problems
    # the restarted daemon works
    sid = d.create(**SMALL)
    assert state(d, sid)["state"] == "running"
    assert d.stop() == 0


def test_init_killed_from_outside_fails_only_its_sandbox(own_daemon):
    """The reaper notices a sandbox whose init died by itself (here killed
    from the host; an OOM kill or a crash look the same), marks it failed
    and tears it down completely; the other sandboxes are untouched."""
    d = own_daemon().start()
    sid = d.create(**SMALL)
    inits = inits_of(d.proc.pid)
    assert len(inits) == 1
    victim = inits.pop()
    other = d.create(**SMALL)
    os.kill(victim, signal.SIGKILL)
    assert wait_state(d, sid, "failed", 10), state(d, sid)
    s = state(d, sid)
    assert s["end_reason"] == "failed: the sandbox's init exited unexpectedly", s
    assert s["ended_at"], s
    assert_error(d.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}), 410, "sandbox_ended")
    assert wait_until(lambda: victim not in hostscan.init_pids(), 10)
    problems = wait_until(lambda: not no_leftovers_of([sid], d.data_dir), 5) or \
        no_leftovers_of([sid], d.data_dir)
    assert problems is True, problems
    assert state(d, other)["state"] == "running"
    r = d.exec(other, argv=["sh", "-c", "echo still here"])
    assert r["exit_code"] == 0 and r["stdout"] == "still here\n", r
    assert d.stop() == 0


@pytest.fixture
def failing_init():
    """A stand-in for sandlot-init that is exec'd like it (so the create
    gets as far as a real one would) but exits 0.3 s later without ever
    saying hello: a set-up that fails after sandlotd has answered the
    create.  In a directory of its own that the sandbox's uids can read."""
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="sandlot-test-init-", dir="/tmp"))
    try:
        d.chmod(0o755)
        init = d / "sandlot-init"
        init.write_text("#!/bin/sh\nsleep 0.3\nexit 3\n")
        init.chmod(0o755)
        yield str(init)
    finally:
        shutil.rmtree(d, ignore_errors=True)


SETUP_FAILED = "failed: create sandbox: sandlot-init exited before it was ready"


def test_a_setup_that_fails_after_the_create_answered(own_daemon, failing_init):
    """sandlotd answers a create while the sandbox's init still sets itself
    up: when that set-up fails, the first request on the sandbox says so
    (410 sandbox_ended, state failed, the set-up's error as its reason), so
    does every later one and GET, and nothing of it is left."""
    d = own_daemon(env={"SANDLOT_INIT": failing_init}).start()
    r = d.post("/v1/sandboxes", SMALL)
    assert r.status == 201, r
    sid = r.json()["id"]
    for _ in range(2):
        r = d.post(f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        assert_error(r, 410, "sandbox_ended")
        e = r.json()["error"]
        assert e["state"] == "failed" and e["end_reason"] == SETUP_FAILED, e
        assert "sandlot-init exited before it was ready" in e["message"], e
    s = state(d, sid)
    assert s["state"] == "failed" and s["end_reason"] == SETUP_FAILED, s
    problems = wait_until(lambda: not no_leftovers_of([sid], d.data_dir), 5) or \
        no_leftovers_of([sid], d.data_dir)
    assert problems is True, problems
    assert f"event=failed sandbox={sid}" in d.log_text()
    assert d.stop() == 0


def test_a_setup_that_fails_unasked_is_recorded_with_its_error(own_daemon, failing_init):
    """Nobody uses the sandbox: the set-up sweep (20 ms after the create)
    or the reaper records the set-up's error, not just "init exited"."""
    d = own_daemon(env={"SANDLOT_INIT": failing_init}).start()
    sid = d.create(**SMALL)
    assert wait_state(d, sid, "failed", 10), state(d, sid)
    assert state(d, sid)["end_reason"] == SETUP_FAILED
    problems = wait_until(lambda: not no_leftovers_of([sid], d.data_dir), 5) or \
        no_leftovers_of([sid], d.data_dir)
    assert problems is True, problems
    assert d.stop() == 0


def test_wait_ready_makes_the_create_wait_for_the_setup(own_daemon, failing_init):
    """"wait_ready": true: the create answers only once the sandbox has set
    itself up, so a failed set-up fails the create itself; nothing is left
    and no sandbox is recorded."""
    d = own_daemon(env={"SANDLOT_INIT": failing_init}).start()
    r = d.post("/v1/sandboxes", dict(SMALL, wait_ready=True))
    assert r.status >= 400, r
    assert "sandlot-init exited before it was ready" in r.json()["error"]["message"], r.json()
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    kept = Path(d.data_dir) / "storage" / "mnt" / "kept"
    assert wait_until(lambda: not kept.is_dir() or not list(kept.iterdir()), 5), \
        list(kept.iterdir())
    assert d.stop() == 0


def test_wait_ready_on_a_sound_sandbox(sandlotd):
    sid = sandlotd.create(**SMALL, wait_ready=True)
    r = sandlotd.exec(sid, argv=["echo", "ready"])
    assert r["exit_code"] == 0 and r["stdout"] == "ready\n", r
    assert_error(sandlotd.post("/v1/sandboxes", {"wait_ready": "yes"}), 400, "bad_request")


def test_sigterm_destroys_and_records(own_daemon):
    d = own_daemon().start()
    ids = [d.create(**SMALL) for _ in range(3)]
    inits = inits_of(d.proc.pid)
    assert len(inits) == 3
    t0 = time.monotonic()
    assert d.stop() == 0
    assert time.monotonic() - t0 < 10
    assert not (inits & hostscan.init_pids()), "sandbox inits survived SIGTERM"
    assert not d.sock.exists()
    assert not no_leftovers_of(ids, d.data_dir)
    d.start()
    for sid in ids:
        s = state(d, sid)
        assert s["state"] == "deleted" and s["end_reason"] == "sandlotd stopped", s
    assert "event=lost" not in d.log_text().split("event=started")[-1]
    assert d.stop() == 0


def test_sigterm_with_a_request_in_flight(own_daemon):
    """A request blocked in a command when SIGTERM comes still gets an
    answer (the command is killed) and the daemon exits 0."""
    d = own_daemon().start()
    sid = d.create(**SMALL)
    probe = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["true"]})
    assert probe.status == 200, probe
    out = {}

    def run():
        try:
            out["r"] = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["sleep", "60"]},
                              timeout=30)
        except Exception as e:  # noqa: BLE001 - a closed connection is acceptable
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    assert wait_until(lambda: any(e["state"] == "running" for e in
                                  d.get(f"/v1/sandboxes/{sid}/execs").json()["execs"]), 10)
    t0 = time.monotonic()
    assert d.stop() == 0
    assert time.monotonic() - t0 < 10
    t.join(10)
    assert not t.is_alive()
    if "r" in out:
        assert out["r"].status in (200, 410, 503), out["r"]


# ---- descriptors ------------------------------------------------------------------------------

def fd_objects(pid):
    """{fd number: (st_dev, st_ino, link)} of a process's descriptors that
    name an object of their own (sockets, pipes, files, namespaces), not
    anon inodes (pidfds, eventfds... share one inode) or devices."""
    out = {}
    for f in os.listdir(f"/proc/{pid}/fd"):
        p = f"/proc/{pid}/fd/{f}"
        try:
            st, link = os.stat(p), os.readlink(p)
        except OSError:
            continue  # closed meanwhile
        if link.startswith("anon_inode:") or stat.S_ISCHR(st.st_mode):
            continue
        out[int(f)] = (st.st_dev, st.st_ino, link)
    return out


def test_new_init_holds_nothing_of_the_daemon_and_low_descriptors_stay_few(own_daemon):
    """The clone child keeps only the low part of the daemon's descriptor
    table (CLONE_FILES + close_range(CLOSE_RANGE_UNSHARE)): a new sandbox's
    init must still get none of the daemon's descriptors (other sandboxes'
    sockets, locks, namespaces; the listening socket) but its own workspace
    lock, and the daemon must keep working.  What live sandboxes hold is
    parked at 1024 and up, so the descriptors below 1024 do not grow with
    their number (each create's child copies those)."""
    d = own_daemon().start()
    pid = d.proc.pid
    # Warm up what the daemon makes once or keeps in stock.
    first = d.create(**SMALL)
    assert d.delete(f"/v1/sandboxes/{first}").status == 204
    low_before = sum(1 for f in fd_objects(pid) if f < 1024)
    ids = [d.create(**SMALL) for _ in range(20)]
    # A new sandbox holds a pipe and storage handles of its set-up until the
    # set-up is over, which its first request or, 20 ms after the create,
    # the daemon's set-up sweep waits for: then those are closed.
    def low():
        return sum(1 for f in fd_objects(pid) if f < 1024)
    assert wait_until(lambda: low() - low_before < 10, 5), (low_before, low())
    sid = d.create(**SMALL)
    # (From the log, not from a scan of /proc against one made before: the
    # create answers while the init sets itself up, and a scan made just
    # then once missed an init.)
    m = re.search(rf"event=created sandbox={sid} .*?init_pid=(\d+)", d.log_text())
    assert m, d.logs()
    init = int(m.group(1))
    assert wait_until(lambda: init in inits_of(pid), 5), init
    daemon = {(dev, ino): link for dev, ino, link in fd_objects(pid).values()}
    shared = [(fd, link) for fd, (dev, ino, link) in fd_objects(init).items()
              if (dev, ino) in daemon and not link.endswith(f"/{sid}/.lock")]
    assert not shared, f"init {init} holds descriptors of the daemon: {shared}"
    # Everything still works, for the new sandbox and the older ones.
    for i in (sid, ids[0], ids[-1]):
        r = d.post(f"/v1/sandboxes/{i}/exec", json_body={"argv": ["echo", "ok"]})
        assert r.status == 200 and r.json()["stdout"] == "ok\n", r
    for i in ids + [sid]:
        assert d.delete(f"/v1/sandboxes/{i}").status == 204
    assert d.stop() == 0


# ---- scale ------------------------------------------------------------------------------------

def test_1000_sandboxes(own_daemon):
    """1000 live sandboxes: creation time, daemon memory, fds and threads
    stay sane (no thread per sandbox), list works, all are deleted.  The
    daemon as shipped (PLAIN_BIN_DIR): its resident memory is what is
    bounded, and ASan's quarantine alone moves it by tens of MiB."""
    import concurrent.futures as cf
    d = own_daemon(binary=PLAIN_BIN_DIR / "sandlotd").start(timeout=30)
    n = 1000
    t0 = time.monotonic()

    def mk(_):
        r = d.post("/v1/sandboxes", json_body={**SMALL, "memory": "24M"}, timeout=60)
        return r

    with cf.ThreadPoolExecutor(4) as ex:
        results = list(ex.map(mk, range(n)))
    created = time.monotonic() - t0
    bad = [r for r in results if r.status != 201]
    ids = [r.json()["id"] for r in results if r.status == 201]
    pid = d.proc.pid
    st = hostscan.status(pid)
    rss_mb = int(st["VmRSS"].split()[0]) / 1024
    threads = int(st["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    t1 = time.monotonic()
    listed = d.get("/v1/sandboxes", timeout=60)
    list_s = time.monotonic() - t1
    t2 = time.monotonic()
    with cf.ThreadPoolExecutor(4) as ex:
        codes = list(ex.map(lambda i: d.delete(f"/v1/sandboxes/{i}", timeout=60).status, ids))
    deleted = time.monotonic() - t2
    print(f"\n1000 sandboxes: create {created:.1f}s ({created / n * 1000:.1f} ms each, 4 "
          f"clients), daemon RSS {rss_mb:.1f} MiB, {threads} threads, {fds} fds, "
          f"list {list_s * 1000:.0f} ms, delete {deleted:.1f}s")
    assert not bad, f"{len(bad)} creations failed, first: {bad[0]!r}"
    assert listed.status == 200 and len(listed.json()["sandboxes"]) == n
    assert all(c == 204 for c in codes)
    assert rss_mb < 200, rss_mb
    assert threads < 50, threads          # no thread per sandbox
    assert fds < 6 * n, fds
    assert d.get("/v1/health").json()["sandboxes"] == 0
    assert d.stop() == 0
