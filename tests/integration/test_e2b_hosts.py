"""Sandboxes' hosts (E2B's getHost): a request whose Host is
PORT-SANDBOXID.DOMAIN goes to that port of that sandbox (src/daemon/proxy.c
in its host mode, routed by src/daemon/http.c and checked first by the front
door, gate.c), on raw sockets.

DOMAIN is --e2b-domain, by default localhost:PORT of the TCP listener, and
is what E2B's create answers as "domain".  A sandbox created through /e2b
has every port of its loopback reachable so; one created through /v1 only
its exposed ports.  The daemon's token (in any header the /e2b door takes)
or the sandbox's own access token opens a sandbox's host; a sandbox created
with network.allowPublicTraffic: true needs none.

The SDK flows (getHost with E2B's own SDKs) are in tests/e2b."""
import json
import os
import socket
import struct
import subprocess

import pytest

from conftest import wait_until
from daemon import SANDLOTD
from test_daemon_core import free_port, own_daemon  # noqa: F401
from test_daemon_ports import (daemon_fds, daemon_threads, http_workers, start_server,
                               ws_exercise, ws_handshake)


@pytest.fixture
def hosts(own_daemon, tmp_path):  # noqa: F811
    token = "e2b-h0st-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(tf, 0o600)
    port = free_port()
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(tf)])
    d.start()
    d.tcp_port, d.token = port, token
    return d


def read_answer(s):
    """One HTTP answer: (status, headers (lower-case names), body); a
    chunked body is decoded."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before an answer: {buf!r}")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()

    def more():
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError(f"cut short: {rest!r}")
        return chunk

    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                rest += more()
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            while len(rest) < n + 2:
                rest += more()
            body += rest[:n]
            rest = rest[n + 2:]
            if n == 0:
                return status, headers, body
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        rest += more()
    return status, headers, rest[:n]


def ask(d, host, path="/", headers=(), method="GET"):
    """A request over TCP with that Host: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30) as s:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in headers]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return read_answer(s)


def e2b_create(d, **extra):
    r = d.post("/e2b/v2/sandboxes", json_body={"templateID": "base", "timeout": 300, **extra})
    assert r.status == 201, r
    return r.json()


def host_of(d, sid, port):
    return f"{port}-{sid}.localhost:{d.tcp_port}"


def assert_host_error(answer, status, code, needle):
    st, _, body = answer
    assert st == status, (st, body)
    o = json.loads(body)
    assert o["code"] == status and o["error"] == code, o
    assert needle in o["message"], o


def serve_index(d, sid, port, text):
    """python3 -m http.server PORT in the background, serving text as /."""
    r = d.post(f"/v1/sandboxes/{sid}/exec",
               json_body={"command": f"mkdir -p site{port} && printf %s '{text}' > site{port}/index.html"})
    assert r.status == 200 and r.json()["exit_code"] == 0, r
    start_server(d, sid, port, script=f"exec python3 -u -m http.server {port} -d site{port}")


def test_e2b_sandbox_every_port_by_its_host(hosts):
    d = hosts
    sb = e2b_create(d)
    sid = sb["sandboxID"]
    # the domain getHost builds hosts from: this daemon's TCP listener
    assert sb["domain"] == f"localhost:{d.tcp_port}"
    tok = sb["trafficAccessToken"]
    assert tok.startswith("sbat_") and tok == sb["envdAccessToken"]
    assert d.get(f"/v1/sandboxes/{sid}").json()["options"]["e2b"] == {"public_traffic": False}
    serve_index(d, sid, 8000, "eight thousand")
    serve_index(d, sid, 5173, "vite")
    for port, text in ((8000, b"eight thousand"), (5173, b"vite")):
        st, _, body = ask(d, host_of(d, sid, port), headers=[("E2B-Traffic-Access-Token", tok)])
        assert (st, body) == (200, text)
    # the path and query are the server's; names are not case-sensitive
    st, _, body = ask(d, f"8000-{sid.upper()}.LocalHost.:{d.tcp_port}", "/index.html?x=1",
                      headers=[("X-Access-Token", tok)])
    assert (st, body) == (200, b"eight thousand")
    # the daemon's token, in each header the /e2b door takes
    for h in [("Authorization", f"Bearer {d.token}"), ("X-API-KEY", d.token),
              ("X-Access-Token", d.token), ("E2B-Traffic-Access-Token", d.token)]:
        assert ask(d, host_of(d, sid, 8000), headers=[h])[0] == 200, h
    # no port of the sandbox is exposed on the host for this
    assert d.get(f"/v1/sandboxes/{sid}").json()["ports"] == []
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_credentials_stay_out_of_the_sandbox(hosts):
    d = hosts
    sb = e2b_create(d)
    sid, tok = sb["sandboxID"], sb["trafficAccessToken"]
    start_server(d, sid, 8000)
    st, _, body = ask(d, host_of(d, sid, 8000), "/headers",
                      headers=[("Authorization", f"Bearer {d.token}"),
                               ("E2B-Traffic-Access-Token", tok), ("X-API-KEY", d.token),
                               ("X-Access-Token", tok), ("X-App", "kept")])
    assert st == 200, body
    seen = json.loads(body)
    text = json.dumps(seen)
    assert d.token not in text and tok not in text, seen
    hdrs = {k.lower(): v for k, v in seen["headers"]}
    assert hdrs["x-app"] == "kept"
    assert hdrs["x-forwarded-host"] == host_of(d, sid, 8000)
    assert "x-forwarded-prefix" not in hdrs
    assert seen["path"] == "/headers"
    # an application's own Authorization passes when the sandbox's token opened the way
    st, _, body = ask(d, host_of(d, sid, 8000), "/headers",
                      headers=[("E2B-Traffic-Access-Token", tok), ("Authorization", "Basic YTpi")])
    hdrs = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert hdrs["authorization"] == "Basic YTpi"
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_host_auth_is_required_and_scoped(hosts):
    d = hosts
    a, b = e2b_create(d), e2b_create(d)
    serve_index(d, a["sandboxID"], 8000, "a")
    host = host_of(d, a["sandboxID"], 8000)
    # no token, a wrong one, another sandbox's: refused, E2B's shape
    for h in [[], [("E2B-Traffic-Access-Token", "sbat_" + "0" * 64)],
              [("E2B-Traffic-Access-Token", b["trafficAccessToken"])],
              [("Authorization", f"Bearer {a['trafficAccessToken']}")],
              [("X-API-KEY", a["trafficAccessToken"])]]:
        assert_host_error(ask(d, host, headers=h), 401, "unauthorized", "token"), h
    # the sandbox's token opens its host only: not the API
    st, _, _ = ask(d, f"127.0.0.1:{d.tcp_port}", "/v1/sandboxes",
                   headers=[("E2B-Traffic-Access-Token", a["trafficAccessToken"])])
    assert st == 401
    # a kept-alive connection is checked on every request (http.c after the door)
    with socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n"
                  f"X-Access-Token: {a['trafficAccessToken']}\r\n\r\n".encode())
        assert read_answer(s)[:1] == (200,)
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert_host_error(read_answer(s), 401, "unauthorized", "token")
    for sb in (a, b):
        assert d.delete(f"/v1/sandboxes/{sb['sandboxID']}").status == 204


def test_public_traffic(hosts):
    d = hosts
    pub = e2b_create(d, network={"allowPublicTraffic": True})
    closed = e2b_create(d, network={"allowPublicTraffic": False})
    for sb, text in ((pub, "open"), (closed, "closed")):
        serve_index(d, sb["sandboxID"], 8000, text)
    st, _, body = ask(d, host_of(d, pub["sandboxID"], 8000))
    assert (st, body) == (200, b"open")
    assert ask(d, host_of(d, closed["sandboxID"], 8000))[0] == 401
    info = d.get(f"/e2b/sandboxes/{pub['sandboxID']}").json()
    assert info["network"] == {"allowPublicTraffic": True}
    assert info["domain"] == f"localhost:{d.tcp_port}"
    # public opens the sandbox's host, nothing else
    assert ask(d, f"127.0.0.1:{d.tcp_port}", f"/v1/sandboxes/{pub['sandboxID']}")[0] == 401
    # other network settings are still sandlotd's own
    r = d.post("/e2b/v2/sandboxes", json_body={"templateID": "base",
                                                "network": {"allowOut": ["example.com"]}})
    assert r.status == 400 and "network.allowOut" in r.json()["message"], r
    r = d.post("/e2b/v2/sandboxes", json_body={"templateID": "base",
                                                "network": {"allowPublicTraffic": "yes"}})
    assert r.status == 400 and "allowPublicTraffic" in r.json()["message"], r
    for sb in (pub, closed):
        assert d.delete(f"/v1/sandboxes/{sb['sandboxID']}").status == 204


def test_host_errors_name_what_is_wrong(hosts):
    d = hosts
    auth = [("X-API-KEY", d.token)]
    sb = e2b_create(d)
    sid = sb["sandboxID"]
    dom = f"localhost:{d.tcp_port}"
    for label in (f"0-{sid}", f"65536-{sid}", f"abc-{sid}", f"99999999999999999999-{sid}"):
        assert_host_error(ask(d, f"{label}.{dom}", headers=auth), 400, "bad_request",
                          "port in the host must be a number from 1 to 65535")
    assert_host_error(ask(d, f"8000.{dom}", headers=auth), 400, "bad_request",
                      "PORT-SANDBOXID.DOMAIN")
    assert_host_error(ask(d, f"8000-sb-nosuchsandboxnosuchsandboxx.{dom}", headers=auth), 404,
                      "sandbox_not_found", "sb-nosuchsandboxnosuchsandboxx")
    assert_host_error(ask(d, f"8000-{sid}.{dom}", headers=auth), 502, "bad_gateway",
                      f"nothing is listening on port 8000 in sandbox {sid}")
    # a name that is not under the domain is the API's, as ever
    st, _, body = ask(d, f"8000-{sid}.example.com", "/v1/health",
                      headers=[("Authorization", f"Bearer {d.token}")])
    assert st == 200, body
    # paused: said so
    assert d.post(f"/e2b/sandboxes/{sid}/pause").status == 204
    assert_host_error(ask(d, f"8000-{sid}.{dom}", headers=auth), 409, "sandbox_paused", "paused")
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    # ended
    st, _, body = ask(d, f"8000-{sid}.{dom}", headers=auth)
    assert st in (404, 410), body
    assert json.loads(body)["code"] == st


def test_v1_sandbox_only_exposed_ports(hosts):
    d = hosts
    r = d.post("/v1/sandboxes", json_body={"ports": [8000]})
    assert r.status == 201, r
    sid = r.json()["id"]
    serve_index(d, sid, 8000, "exposed")
    serve_index(d, sid, 8001, "hidden")
    auth = [("Authorization", f"Bearer {d.token}")]
    st, _, body = ask(d, host_of(d, sid, 8000), headers=auth)
    assert (st, body) == (200, b"exposed")
    assert_host_error(ask(d, host_of(d, sid, 8001), headers=auth), 404, "port_not_exposed",
                      "port 8001 is not exposed")
    # removing the exposure closes the way
    assert d.delete(f"/v1/sandboxes/{sid}/ports/8000").status == 204
    assert ask(d, host_of(d, sid, 8000), headers=auth)[0] == 404
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_websocket_by_host(hosts):
    d = hosts
    sb = e2b_create(d)
    sid = sb["sandboxID"]
    start_server(d, sid, 8000)
    s = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30)
    ws_handshake(s, "/ws", host=host_of(d, sid, 8000),
                 extra=f"E2B-Traffic-Access-Token: {sb['trafficAccessToken']}\r\n".encode())
    ws_exercise(s)
    s.close()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_clients_abort_nothing_leaks(hosts):
    d = hosts
    sb = e2b_create(d)
    sid, tok = sb["sandboxID"], sb["trafficAccessToken"]
    start_server(d, sid, 8000)
    # a server that takes connections and never answers
    start_server(d, sid, 8001, script=(
        "exec python3 -u -c 'import socket,time\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind((\"0.0.0.0\", 8001)); s.listen(64); print(\"ready\", flush=True)\n"
        "c=[]\n"
        "while True: c.append(s.accept())'"))
    host = host_of(d, sid, 8000)
    assert ask(d, host, "/headers", headers=[("X-Access-Token", tok)])[0] == 200
    fds0, threads0 = daemon_fds(d), daemon_threads(d)
    workers0 = http_workers(d)[0]
    socks = []
    for i in range(10):
        # a stream read a little, a WebSocket left open, an answer never come
        s = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30)
        s.sendall(f"GET /stream?n=1000 HTTP/1.1\r\nHost: {host}\r\nX-Access-Token: {tok}\r\n\r\n"
                  .encode())
        assert b"200 OK" in s.recv(4096)
        socks.append(s)
        s = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30)
        ws_handshake(s, "/ws", host=host, extra=f"X-Access-Token: {tok}\r\n".encode())
        socks.append(s)
        s = socket.create_connection(("127.0.0.1", d.tcp_port), timeout=30)
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host_of(d, sid, 8001)}\r\nX-Access-Token: {tok}\r\n\r\n"
                  .encode())
        socks.append(s)
    # every request in progress holds its upstream socket
    assert wait_until(lambda: daemon_fds(d) >= fds0 + 30, 20), (daemon_fds(d), fds0)
    for i, s in enumerate(socks):
        if i % 2:  # RST instead of FIN for half of them
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    def settled():
        workers, busy = http_workers(d)
        return (daemon_fds(d) <= fds0 and busy <= 1 and
                daemon_threads(d) - workers <= threads0 - workers0)
    assert wait_until(settled, 20), (daemon_fds(d), fds0, daemon_threads(d), threads0,
                                     http_workers(d), workers0)
    assert ask(d, host, "/headers", headers=[("X-Access-Token", tok)])[0] == 200
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_e2b_domain_option(own_daemon, tmp_path):  # noqa: F811
    token = "e2b-d0main-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    port = free_port()
    for arg in ("bad..name", "-x.example", "a.example:0", "a.example:http", "a b"):
        r = subprocess.run([str(SANDLOTD), "--e2b-domain", arg], capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        assert r.returncode == 2 and "invalid --e2b-domain" in r.stderr, (arg, r)
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(tf),
                               "--e2b-domain", "Boxes.Example.COM:8443"])
    d.start()
    d.tcp_port, d.token = port, token
    sb = e2b_create(d)
    sid = sb["sandboxID"]
    assert sb["domain"] == "boxes.example.com:8443"
    serve_index(d, sid, 8000, "custom")
    auth = [("X-API-KEY", token)]
    st, _, body = ask(d, f"8000-{sid}.boxes.example.com:8443", headers=auth)
    assert (st, body) == (200, b"custom")
    st, _, body = ask(d, f"8000-{sid}.boxes.example.com", headers=auth)
    assert (st, body) == (200, b"custom")
    # localhost is no longer a sandbox domain here
    st, _, _ = ask(d, host_of(d, sid, 8000), headers=[("Authorization", f"Bearer {token}")])
    assert st == 404
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
