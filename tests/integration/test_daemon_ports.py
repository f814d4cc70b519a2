"""Exposed ports (src/daemon/ports.c, src/daemon/proxy.c, sandlot_port_connect).

A real server runs inside each sandbox (tests/integration/port_server.py, or
python3 -m http.server) and is reached three ways: at the URL in the sandbox
record (a listener on the host's 127.0.0.1 that sandlotd relays into the
sandbox), through the API's proxy route on the unix socket, and through the
proxy on the TCP listener with a token.  Bodies are checked byte for byte
(SHA-256), WebSockets with a real upgrade and frames both ways.  Removing a
port, ending or pausing the sandbox close what must close; the daemon's
descriptors and threads come back to where they were after clients vanish
mid-stream; nothing on the host and no other sandbox can reach in.
"""
import base64
import hashlib
import http.client
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_until
from daemon import Daemon, UnixHTTPConnection

HERE = Path(__file__).resolve().parent
SERVER = (HERE / "port_server.py").read_bytes()
SMALL = {"memory": "128M", "disk": "64M", "pids": 64}
MiB = 1 << 20


# ---- helpers -----------------------------------------------------------------------

@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    """Daemons a test starts (and restarts) itself; stopped at the end."""
    made = []

    def make(extra_args=()):
        base = tmp_path_factory.mktemp("sandlotd-ports", numbered=True)
        d = Daemon(base, extra_args=extra_args,
                   data_dir=session_dirs["data_dir"] / "daemon" / Path(base).name)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            assert d.stop() == 0, d.logs()


def assert_error(r, status, code=None, needle=None):
    assert r.status == status, r
    err = r.json()["error"]
    assert err["code"] and err["message"], r
    if code:
        assert err["code"] == code, r
    if needle:
        assert needle in err["message"], r
    return err


def pattern(n):
    block = bytes(range(256)) * 256
    return (block * (n // len(block) + 1))[:n]


def start_server(d, sid, port, bind="0.0.0.0", script=None):
    """Run port_server.py (or `script`, a shell command) in the background
    inside sid and wait until it says it listens."""
    if script is None:
        r = d.put(f"/v1/sandboxes/{sid}/files?path=port_server.py", SERVER)
        assert r.status in (200, 201, 204), r
        script = f"exec python3 port_server.py {port} {bind}"
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": script, "background": True})
    assert r.status in (200, 201, 202), r
    eid = r.json()["exec_id"]
    c, resp = d.stream("GET", f"/v1/sandboxes/{sid}/execs/{eid}?follow=1", timeout=30)
    try:
        seen = b""
        while b"ready" not in seen and b"Serving HTTP" not in seen:
            line = resp.readline()
            assert line, f"the server inside ended before it listened: {seen!r}"
            seen += line
    finally:
        c.close()
    return eid


def url_of(rec, port):
    for p in rec["ports"]:
        if p["port"] == port:
            return p["url"]
    raise AssertionError(f"port {port} not in {rec['ports']}")


def host_port(url):
    return int(url.rsplit(":", 1)[1])


def url_get(url, path, method="GET", body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", host_port(url), timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def daemon_fds(d):
    return len(os.listdir(f"/proc/{d.proc.pid}/fd"))


def http_workers(d):
    """(all, busy) request worker threads of the daemon, from /metrics:
    the pool keeps idle ones for a while, so they do not count as left
    behind by a request."""
    out = {}
    for line in d.get("/metrics").body.decode().splitlines():
        for state in ("all", "busy"):
            if line.startswith(f'sandlot_http_workers{{state="{state}"}} '):
                out[state] = int(float(line.split()[-1]))
    return out["all"], out["busy"]


def daemon_threads(d):
    return len(os.listdir(f"/proc/{d.proc.pid}/task"))


def daemon_tcp_listeners(d):
    """(address, port) of every TCP socket the daemon listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{d.proc.pid}/fd"):
        try:
            link = os.readlink(f"/proc/{d.proc.pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = set()
    for line in open(f"/proc/{d.proc.pid}/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:
            addr, port = f[1].split(":")
            ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
            out.add((ip, int(port, 16)))
    return out


def refused(port):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        return True
    finally:
        s.close()
    return False


def ws_handshake(sock, path, host="localhost", extra=b""):
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
           f"Sec-WebSocket-Version: 13\r\n").encode() + extra + b"\r\n"
    sock.sendall(req)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, f"connection closed during the handshake: {head!r}"
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    assert b" 101 " in status, head
    accept = base64.b64encode(hashlib.sha1(
        (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    fields = dict(ln.split(": ", 1) for ln in head.decode().split("\r\n")[1:] if ": " in ln)
    fields = {k.lower(): v for k, v in fields.items()}
    assert fields.get("sec-websocket-accept") == accept, head
    assert fields.get("upgrade", "").lower() == "websocket", head
    return head


def ws_send(sock, opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(head + mask + body)


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def ws_recv(sock):
    b0, b1 = recv_exact(sock, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(sock, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(sock, 8))[0]
    assert not b1 & 0x80, "a server's frames are not masked"
    return b0 & 0x0F, recv_exact(sock, n)


def ws_exercise(sock):
    """Greeting from the server, text and a 300 KiB binary both ways, ping,
    close."""
    assert ws_recv(sock) == (1, b"hello from inside")
    ws_send(sock, 1, "héllo ünïcode".encode())
    assert ws_recv(sock) == (1, "héllo ünïcode".encode())
    big = os.urandom(300 * 1024)
    ws_send(sock, 2, big)
    op, got = ws_recv(sock)
    assert op == 2 and hashlib.sha256(got).digest() == hashlib.sha256(big).digest()
    ws_send(sock, 9, b"ping")
    assert ws_recv(sock) == (10, b"ping")
    ws_send(sock, 8, struct.pack("!H", 1000))
    assert ws_recv(sock) == (8, struct.pack("!H", 1000))


def unix_sock(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(d.sock))
    return s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- the record, the URL and the proxy ----------------------------------------------

def test_ports_on_create_reach_http_server(sandlotd):
    d = sandlotd
    r = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000, 8888]))
    assert r.status == 201, r
    rec = r.json()
    sid = rec["id"]
    assert [p["port"] for p in rec["ports"]] == [8000, 8888]
    assert rec["options"]["ports"] == [8000, 8888]
    for p in rec["ports"]:
        assert p["url"].startswith("http://127.0.0.1:") and host_port(p["url"]) > 0
    assert host_port(rec["ports"][0]["url"]) != host_port(rec["ports"][1]["url"])
    # python3 -m http.server, bound to 127.0.0.1 inside
    d.put(f"/v1/sandboxes/{sid}/files?path=site/index.html", b"<h1>inside</h1>\n")
    start_server(d, sid, 8000,
                 script="cd site && exec python3 -m http.server 8000 --bind 127.0.0.1")
    status, _, body = url_get(url_of(rec, 8000), "/index.html")
    assert status == 200 and body == b"<h1>inside</h1>\n"
    r = d.get(f"/v1/sandboxes/{sid}/ports/8000/index.html")
    assert r.status == 200 and r.body == b"<h1>inside</h1>\n", r
    r = d.get(f"/v1/sandboxes/{sid}/ports/8000/nope")
    assert r.status == 404 and b"File not found" in r.body, r   # the server's own 404
    # GET of the record, the list and one port agree
    assert d.get(f"/v1/sandboxes/{sid}").json()["ports"] == rec["ports"]
    assert d.get(f"/v1/sandboxes/{sid}/ports").json() == {"ports": rec["ports"]}
    assert d.get(f"/v1/sandboxes/{sid}/ports/8888").json() == rec["ports"][1]
    # 8888 is exposed but nothing listens there: 502 saying so, and the
    # URL's connection is reset.
    assert_error(d.get(f"/v1/sandboxes/{sid}/ports/8888/"), 502, "bad_gateway",
                 "nothing is listening on port 8888")
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        url_get(url_of(rec, 8888), "/")
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_bad_inputs(sandlotd):
    d = sandlotd
    cases = [
        ([0], "invalid port 0"), ([65536], "invalid port 65536"), ([-1], "invalid port -1"),
        (["8000"], "integer"), ([8000, 8000], "port 8000 is listed twice"),
        (list(range(9000, 9033)), "at most 32"), (8000, "array"), ([1.5], "integer"),
    ]
    for ports, needle in cases:
        assert_error(d.post("/v1/sandboxes", json_body={"ports": ports}), 400, "bad_request",
                     needle)
    sid = d.create(**SMALL, ports=[8000])
    base = f"/v1/sandboxes/{sid}/ports"
    assert_error(d.post(base, json_body={"port": 0}), 400, "bad_request", "invalid port 0")
    assert_error(d.post(base, json_body={"port": 70000}), 400, "bad_request", "70000")
    assert_error(d.post(base, json_body={}), 400, "bad_request", "\"port\" is required")
    assert_error(d.post(base, json_body={"port": 1, "x": 2}), 400, "bad_request", "unknown")
    assert_error(d.post(base, json_body={"port": 8000}), 409, "conflict", "already exposed")
    assert_error(d.put(base, json.dumps({"ports": [1, 1]}).encode()), 400, "bad_request",
                 "listed twice")
    for bad in ("0", "65536", "x", "80a"):
        assert_error(d.delete(f"{base}/{bad}"), 400, "bad_request", "invalid port")
        assert_error(d.get(f"{base}/{bad}/"), 400, "bad_request", "invalid port")
    assert_error(d.delete(f"{base}/9000"), 404, "port_not_exposed", "exposed: 8000")
    assert_error(d.get(f"{base}/9000"), 404, "port_not_exposed")
    assert_error(d.get(f"{base}/9000/x"), 404, "port_not_exposed", "not exposed")
    # up to 32 ports, not one more
    r = d.put(base, json.dumps({"ports": list(range(9000, 9032))}).encode())
    assert r.status == 200 and len(r.json()["ports"]) == 32, r
    assert_error(d.post(base, json_body={"port": 8000}), 400, "bad_request", "32 ports")
    assert_error(d.get("/v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaaaaaaaa/ports/1/"), 404, "not_found")
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert_error(d.post(base, json_body={"port": 8000}), 410, "sandbox_ended")
    assert_error(d.get(f"{base}/9000/"), 410, "sandbox_ended")


def test_ports_add_set_remove(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    base = f"/v1/sandboxes/{sid}/ports"
    assert d.get(base).json() == {"ports": []}
    start_server(d, sid, 7000)
    assert_error(d.get(f"{base}/7000/headers"), 404, "port_not_exposed")
    r = d.post(base, json_body={"port": 7000})
    assert r.status == 201 and r.json()["port"] == 7000, r
    url = r.json()["url"]
    assert url_get(url, "/headers")[0] == 200
    assert d.get(f"{base}/7000/headers").status == 200
    # PUT keeps the listener of a port that stays (same URL), adds others
    r = d.put(base, json.dumps({"ports": [7001, 7000]}).encode())
    assert r.status == 200, r
    assert [p["port"] for p in r.json()["ports"]] == [7001, 7000]
    assert url_of(r.json(), 7000) == url
    assert d.get(f"/v1/sandboxes/{sid}").json()["options"]["ports"] == [7001, 7000]
    # a connection open through the URL, then the port is removed: the
    # listener and that connection close.
    conn = socket.create_connection(("127.0.0.1", host_port(url)), timeout=10)
    conn.sendall(b"GET /stream?n=400 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200 OK" in conn.recv(4096)
    assert d.delete(f"{base}/7000").status == 204
    assert refused(host_port(url))
    conn.settimeout(10)
    rest = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
    except ConnectionResetError:
        pass
    assert b"line 399" not in rest   # cut, not finished
    conn.close()
    assert_error(d.get(f"{base}/7000/headers"), 404, "port_not_exposed")
    assert [p["port"] for p in d.get(base).json()["ports"]] == [7001]
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_proxy_passes_request_and_drops_token(own_daemon, tmp_path):
    token = "ports-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    tcp = free_port()
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{tcp}", "--token-file", str(tf)])
    d.start()
    sid = d.create(**SMALL, ports=[8000])
    start_server(d, sid, 8000)
    path = f"/v1/sandboxes/{sid}/ports/8000/headers?a=1&b=%2F%20x"
    # over TCP with the token: it reaches the server, the token does not
    c = http.client.HTTPConnection("127.0.0.1", tcp, timeout=30)
    c.request("GET", path, headers={"Authorization": f"Bearer {token}", "X-App": "yes",
                                    "Host": "example.test:1234",
                                    "X-Forwarded-Prefix": "/spoofed"})
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200, body
    got = json.loads(body)
    headers = {k.lower(): v for k, v in got["headers"]}
    assert got["method"] == "GET" and got["path"] == "/headers?a=1&b=%2F%20x"
    assert token not in body.decode() and "authorization" not in headers
    assert headers["x-app"] == "yes"
    assert headers["host"] == "127.0.0.1:8000"
    assert headers["x-forwarded-host"] == "example.test:1234"
    assert headers["x-forwarded-prefix"] == f"/v1/sandboxes/{sid}/ports/8000"
    # without the token the proxy is closed like any route
    c = http.client.HTTPConnection("127.0.0.1", tcp, timeout=30)
    c.request("GET", path)
    assert c.getresponse().status == 401
    c.close()
    # on the unix socket (no token there) the application's own
    # Authorization passes; the daemon's token never does
    r = d.get(path, headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert ["Authorization", "Basic dXNlcjpwdw=="] in r.json()["headers"], r
    r = d.get(path, headers={"Authorization": f"Bearer {token}"})
    assert token not in r.body.decode(), r
    # WebSocket over TCP with the token
    s = socket.create_connection(("127.0.0.1", tcp), timeout=30)
    ws_handshake(s, f"/v1/sandboxes/{sid}/ports/8000/ws",
                 extra=f"Authorization: Bearer {token}\r\n".encode())
    ws_exercise(s)
    s.close()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    log = d.log_text()
    assert token not in log


def test_ports_large_bodies_both_ways(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid, url = rec["id"], url_of(rec, 8000)
    start_server(d, sid, 8000)
    n = 48 * MiB + 12345
    want = hashlib.sha256(pattern(n)).hexdigest()
    for route in ("big", "chunked"):
        r = d.get(f"/v1/sandboxes/{sid}/ports/8000/{route}?n={n}", timeout=120)
        assert r.status == 200 and len(r.body) == n, (route, r.status, len(r.body))
        assert hashlib.sha256(r.body).hexdigest() == want
        if route == "big":
            assert r.headers.get("Content-Length") == str(n)
        status, _, body = url_get(url, f"/{route}?n={n}", timeout=120)
        assert status == 200 and hashlib.sha256(body).hexdigest() == want
    up = os.urandom(24 * MiB + 7)
    want_up = {"length": len(up), "sha256": hashlib.sha256(up).hexdigest()}
    r = d.request("POST", f"/v1/sandboxes/{sid}/ports/8000/echo", body=up, timeout=120)
    assert r.status == 200 and r.json() == want_up, r
    # chunked upload (no Content-Length): re-chunked to the server
    c = d.conn(timeout=120)
    c.putrequest("POST", f"/v1/sandboxes/{sid}/ports/8000/echo")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for i in range(0, len(up), 1 << 20):
        piece = up[i:i + (1 << 20)]
        c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    assert resp.status == 200 and json.loads(resp.read()) == want_up
    c.close()
    status, _, body = url_get(url, "/echo", method="POST", body=up, timeout=120)
    assert status == 200 and json.loads(body) == want_up
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_websocket(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid = rec["id"]
    start_server(d, sid, 8000)
    # through the proxy, on the unix socket
    s = unix_sock(d)
    ws_handshake(s, f"/v1/sandboxes/{sid}/ports/8000/ws")
    ws_exercise(s)
    s.close()
    # at the record's URL (raw relay)
    s = socket.create_connection(("127.0.0.1", host_port(url_of(rec, 8000))), timeout=30)
    ws_handshake(s, "/ws")
    ws_exercise(s)
    s.close()
    # bytes the client sends right behind its handshake still arrive
    s = unix_sock(d)
    key = base64.b64encode(os.urandom(16)).decode()
    frame = bytearray(b"\x81\x84") + b"\0\0\0\0" + b"fast"
    s.sendall((f"GET /v1/sandboxes/{sid}/ports/8000/ws HTTP/1.1\r\nHost: x\r\n"
               f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode() + bytes(frame))
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 101 " in head
    assert ws_recv(s) == (1, b"hello from inside")
    assert ws_recv(s) == (1, b"fast")
    s.close()
    # an upgrade the server refuses is an ordinary answer
    s = unix_sock(d)
    s.sendall((f"GET /v1/sandboxes/{sid}/ports/8000/headers HTTP/1.1\r\nHost: x\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: eA==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    assert b"HTTP/1.1 200" in s.recv(4096)
    s.close()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_server_closes_early(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid = rec["id"]
    start_server(d, sid, 8000)
    for get in (lambda: d.get(f"/v1/sandboxes/{sid}/ports/8000/close-early"),
                lambda: url_get(url_of(rec, 8000), "/close-early")):
        with pytest.raises(http.client.IncompleteRead) as e:
            get()
        assert e.value.partial.startswith(b"0123456789")
    # the server and the daemon are fine afterwards
    assert d.get(f"/v1/sandboxes/{sid}/ports/8000/headers").status == 200
    assert d.get("/v1/health").status == 200
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_clients_vanish_nothing_leaks(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid = rec["id"]
    start_server(d, sid, 8000)
    url_port = host_port(url_of(rec, 8000))
    # warm up every path once (lazily made buffers, the first threads)
    assert d.get(f"/v1/sandboxes/{sid}/ports/8000/headers").status == 200
    assert url_get(url_of(rec, 8000), "/headers")[0] == 200
    fds0, threads0 = daemon_fds(d), daemon_threads(d)
    workers0 = http_workers(d)[0]
    socks = []
    for i in range(12):
        # proxied streams and URL streams, read a little, then dropped
        s = unix_sock(d)
        s.sendall(f"GET /v1/sandboxes/{sid}/ports/8000/stream?n=1000 HTTP/1.1\r\n"
                  f"Host: x\r\n\r\n".encode())
        assert b"200 OK" in s.recv(4096)
        socks.append(s)
        s = socket.create_connection(("127.0.0.1", url_port), timeout=30)
        s.sendall(b"GET /stream?n=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in s.recv(4096)
        socks.append(s)
        # WebSockets left open, and a big download abandoned half way
        s = unix_sock(d)
        ws_handshake(s, f"/v1/sandboxes/{sid}/ports/8000/ws")
        socks.append(s)
        s = unix_sock(d)
        s.sendall(f"GET /v1/sandboxes/{sid}/ports/8000/big?n={64 * MiB} HTTP/1.1\r\n"
                  f"Host: x\r\n\r\n".encode())
        s.recv(65536)
        socks.append(s)
    assert daemon_fds(d) > fds0 + 24
    for s in socks:
        # RST instead of FIN for half of them
        if socks.index(s) % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # No thread left behind: none beyond the idle ones of the worker pool.
    def settled():
        workers, busy = http_workers(d)  # (busy: the /metrics call itself)
        return (daemon_fds(d) <= fds0 and busy <= 1 and
                daemon_threads(d) - workers <= threads0 - workers0)
    assert wait_until(settled, 20), (daemon_fds(d), fds0, daemon_threads(d), threads0,
                                     http_workers(d), workers0)
    # still serving
    assert d.get(f"/v1/sandboxes/{sid}/ports/8000/headers").status == 200
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def http_active(d):
    """Client connections the daemon serves a request on (its door's count,
    /metrics; the /metrics call itself is one)."""
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith('sandlot_http_connections{state="active"} '):
            return int(float(line.split()[-1]))
    raise AssertionError("no sandlot_http_connections in /metrics")


def test_ports_ended_streams_free_their_connection_behind_idle_ones(sandlotd):
    """A proxied answer that ends early (the server cut it short, or the
    client left while it waited for the server) closes its connection, and
    the connection is freed at once even while older kept-alive connections
    sit idle on the same server threads (it stayed closed but held, socket
    and all, until those timed out)."""
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid = rec["id"]
    start_server(d, sid, 8000)
    assert d.get(f"/v1/sandboxes/{sid}/ports/8000/headers").status == 200
    # Kept-alive connections, idle from now on: older than the streams
    # below, on every server thread (they get descriptors of both parities).
    idle = []
    for _ in range(6):
        s = unix_sock(d)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200"), "health"
        idle.append(s)
    fds0, active0 = daemon_fds(d), http_active(d)
    # The server cuts its answer short: the client sees it end early.
    cut = unix_sock(d)
    cut.sendall(f"GET /v1/sandboxes/{sid}/ports/8000/close-early HTTP/1.1\r\n"
                f"Host: x\r\n\r\n".encode())
    got = b""
    while True:
        b = cut.recv(65536)
        if not b:
            break
        got += b
    assert got.startswith(b"HTTP/1.1 200") and b"Content-Length: 100000" in got, got
    # Clients that leave while their stream waits for the server.
    gone = []
    for _ in range(4):
        s = unix_sock(d)
        s.sendall(f"GET /v1/sandboxes/{sid}/ports/8000/stream?n=1000 HTTP/1.1\r\n"
                  f"Host: x\r\n\r\n".encode())
        assert b"200 OK" in s.recv(4096)
        gone.append(s)
    for s in gone:
        s.close()
    cut.close()
    assert wait_until(lambda: http_active(d) <= active0 and daemon_fds(d) <= fds0, 10), \
        (http_active(d), active0, daemon_fds(d), fds0)
    # the idle ones still work
    for s in idle:
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        s.close()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_sandbox_deletion_closes_everything(sandlotd):
    d = sandlotd
    # warm up: the first sandbox starts libsandlot's I/O thread (its fds stay)
    assert d.delete(f"/v1/sandboxes/{d.create(**SMALL)}").status == 204
    fds0 = daemon_fds(d)
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000, 8001])).json()
    sid = rec["id"]
    start_server(d, sid, 8000)
    urls = [host_port(p["url"]) for p in rec["ports"]]
    relayed = socket.create_connection(("127.0.0.1", urls[0]), timeout=30)
    ws_handshake(relayed, "/ws")
    proxied = unix_sock(d)
    ws_handshake(proxied, f"/v1/sandboxes/{sid}/ports/8000/ws")
    streaming = unix_sock(d)
    streaming.sendall(f"GET /v1/sandboxes/{sid}/ports/8000/stream?n=100000 HTTP/1.1\r\n"
                      f"Host: x\r\n\r\n".encode())
    assert b"200 OK" in streaming.recv(4096)
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    for port in urls:
        assert refused(port)
    for s in (relayed, proxied, streaming):
        s.settimeout(10)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        s.close()
    rec = d.get(f"/v1/sandboxes/{sid}").json()
    assert rec["state"] == "deleted" and all(p["url"] is None for p in rec["ports"]), rec
    assert wait_until(lambda: daemon_fds(d) <= fds0, 10), (daemon_fds(d), fds0)


def test_ports_pause_resume(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    sid = rec["id"]
    old = host_port(url_of(rec, 8000))
    start_server(d, sid, 8000)
    r = d.post(f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200 and r.json()["ports"] == [{"port": 8000, "url": None}], r
    assert refused(old)
    assert_error(d.get(f"/v1/sandboxes/{sid}/ports/8000/headers"), 409, "sandbox_paused")
    r = d.post(f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200, r
    url = url_of(r.json(), 8000)
    assert url is not None
    assert host_port(url) == old   # the same host port, when it is still free
    # processes do not survive a pause: the server is started again
    assert_error(d.get(f"/v1/sandboxes/{sid}/ports/8000/headers"), 502, "bad_gateway")
    start_server(d, sid, 8000)
    assert url_get(url, "/headers")[0] == 200
    assert d.get(f"/v1/sandboxes/{sid}/ports/8000/headers").status == 200
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_survive_restart_while_paused(own_daemon):
    d = own_daemon()
    d.start()
    sid = d.create(**SMALL, ports=[8000, 9000])
    assert d.post(f"/v1/sandboxes/{sid}/pause").status == 200
    assert d.stop() == 0
    d.start()
    rec = d.get(f"/v1/sandboxes/{sid}").json()
    assert rec["state"] == "paused" and rec["ports"] == [{"port": 8000, "url": None},
                                                         {"port": 9000, "url": None}], rec
    r = d.post(f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and all(p["url"] for p in r.json()["ports"]), r
    start_server(d, sid, 9000)
    assert url_get(url_of(r.json(), 9000), "/headers")[0] == 200
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_isolation(sandlotd):
    """The host's loopback services, other sandboxes' ports and URLs, and
    ports a sandbox did not expose are all out of reach."""
    d = sandlotd
    a = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    b = d.create(**SMALL)
    start_server(d, a["id"], 8000)
    start_server(d, a["id"], 8001)      # listening, not exposed
    a_url = host_port(url_of(a, 8000))
    # a service of the host on its loopback
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(4)
    host_svc = host.getsockname()[1]
    probe = ("import socket, sys\n"
             "for p in map(int, sys.argv[1:]):\n"
             "    s = socket.socket(); s.settimeout(3)\n"
             "    try:\n"
             "        s.connect(('127.0.0.1', p)); print(p, 'open')\n"
             "    except OSError as e:\n"
             "        print(p, type(e).__name__)\n")
    for sid in (b, a["id"]):
        out = d.exec(sid, argv=["python3", "-c", probe, str(host_svc), str(a_url), "8000"])
        lines = dict(ln.split() for ln in out["stdout"].splitlines())
        assert lines[str(host_svc)] == "ConnectionRefusedError", out
        assert lines[str(a_url)] == "ConnectionRefusedError", out
        # 8000: sandbox b has no such server; a reaches its own
        assert lines["8000"] == ("open" if sid == a["id"] else "ConnectionRefusedError"), out
    host.settimeout(0.5)
    with pytest.raises(socket.timeout):
        host.accept()                    # nobody came through
    host.close()
    # from the host: only exposed ports have a way in
    assert_error(d.get(f"/v1/sandboxes/{a['id']}/ports/8001/headers"), 404, "port_not_exposed")
    # the daemon listens on the host for exposed ports only (and its API)
    assert daemon_tcp_listeners(d) == {("127.0.0.1", a_url)}
    for sid in (a["id"], b):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204


def test_ports_metrics(sandlotd):
    d = sandlotd
    rec = d.post("/v1/sandboxes", json_body=dict(SMALL, ports=[8000])).json()
    start_server(d, rec["id"], 8000)
    assert url_get(url_of(rec, 8000), "/headers")[0] == 200
    text = d.get("/metrics").body.decode()
    vals = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
            if ln.startswith("sandlot_port_")}
    assert vals["sandlot_port_connections_total"] >= 1, text
    assert vals["sandlot_port_relayed_bytes_total"] > 0, text
    assert "sandlot_port_connections" in vals and "sandlot_port_refused_total" in vals
    assert d.delete(f"/v1/sandboxes/{rec['id']}").status == 204


# ---- the CLI -------------------------------------------------------------------------

def cli(d, *args):
    from conftest import SANDLOT
    import subprocess
    env = dict(os.environ, SANDLOT_HOST=f"unix:{d.sock}")
    return subprocess.run([str(SANDLOT), *args], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_ports_cli(sandlotd):
    d = sandlotd
    r = cli(d, "create", "--memory", "128M", "--port", "8000", "-p", "8001")
    assert r.returncode == 0, r
    sid = r.stdout.strip()
    r = cli(d, "port", sid)
    assert r.returncode == 0, r
    lines = [ln.split() for ln in r.stdout.splitlines()]
    assert [int(p) for p, _ in lines] == [8000, 8001]
    rec = d.get(f"/v1/sandboxes/{sid}").json()
    assert [u for _, u in lines] == [p["url"] for p in rec["ports"]]
    start_server(d, sid, 8000)
    assert url_get(lines[0][1], "/headers")[0] == 200
    r = cli(d, "port", sid, "add", "9000", "9001")
    assert r.returncode == 0, r
    assert [ln.split()[0] for ln in r.stdout.splitlines()] == ["9000", "9001"]
    assert all(ln.split()[1].startswith("http://127.0.0.1:") for ln in r.stdout.splitlines())
    r = cli(d, "port", sid, "add", "9000")
    assert r.returncode == 1 and "port 9000 is already exposed" in r.stderr, r
    r = cli(d, "port", sid, "rm", "8000", "7")
    assert r.returncode == 1 and "port 7 is not exposed" in r.stderr, r
    assert refused(host_port(lines[0][1]))
    r = cli(d, "port", "--json", sid)
    assert r.returncode == 0 and [p["port"] for p in json.loads(r.stdout)["ports"]] == \
        [8001, 9000, 9001], r
    for args, needle in ((["create", "--port", "0"], "invalid --port \"0\""),
                         (["create", "-p", "5", "-p", "5"], "--port 5 is given twice"),
                         (["port", sid, "bogus", "1"], "unknown subcommand"),
                         (["port", sid, "add"], "needs at least one PORT"),
                         (["port", sid, "add", "70000"], "invalid port \"70000\""),
                         (["port"], "missing the sandbox ID")):
        r = cli(d, *args)
        assert r.returncode == 2 and needle in r.stderr, (args, r)
    assert cli(d, "rm", sid).returncode == 0
    r = cli(d, "port", sid)
    assert r.returncode == 0 and all(ln.split()[1] == "-" for ln in r.stdout.splitlines()), r
