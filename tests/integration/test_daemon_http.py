"""sandlotd's HTTP front: hostile and slow clients on TCP (connection
limits, absolute header deadlines, no thread per connection), request
framing (Content-Length, Transfer-Encoding, duplicated headers) and NUL
bytes in paths, query values and JSON.

Raw sockets throughout where the point is what goes over the wire.
"""
import json
import os
import re
import resource
import select
import socket
import threading
import time

import pytest

from conftest import wait_until
from daemon import Response
from test_daemon_core import SMALL, assert_error, free_port, own_daemon, tcp_request  # noqa: F401

HOSTILE = 10000


# ---- helpers -------------------------------------------------------------------------------

def tcp_daemon(own_daemon, tmp_path, extra=()):
    token = "slow-l0ris-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(tf, 0o600)
    port = free_port()
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(tf),
                               *extra])
    d.start()
    return d, port, token


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


def metric(d, name, labels=""):
    """The value of one line of /metrics (over the unix socket)."""
    text = d.get("/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + (labels and "{" + labels + "}") + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}{{{labels}}} in:\n{text}")


def exchange(sock, data, timeout=10):
    """Send data, read until the server closes the connection."""
    sock.settimeout(timeout)
    sock.sendall(data)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        out += chunk
    return out


def tcp_raw(port, data, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return exchange(s, data, timeout)
    finally:
        s.close()


def unix_raw(d, data, timeout=10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(d.sock))
    try:
        return exchange(s, data, timeout)
    finally:
        s.close()


def parse_answers(raw):
    """Split what came back into (status, headers, body) answers: a second
    status line where a body or the next answer should be shows up as a
    second answer."""
    answers = []
    rest = raw
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        assert sep, f"incomplete answer: {raw[:300]!r}"
        lines = head.split(b"\r\n")
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", lines[0] + b" ")
        assert m, f"not a status line: {lines[0]!r} in {raw[:300]!r}"
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            headers[k.decode().strip().lower()] = v.decode().strip()
        n = int(headers.get("content-length", "0"))
        body, rest = rest[:n], rest[n:]
        answers.append((int(m.group(1)), headers, body))
    return answers


def one_error(raw, status, words=()):
    """Exactly one answer, a JSON error with that status naming `words`."""
    answers = parse_answers(raw)
    assert len(answers) == 1, f"{len(answers)} answers: {raw[:600]!r}"
    st, headers, body = answers[0]
    assert st == status, raw[:600]
    assert headers.get("content-type", "").startswith("application/json"), raw[:600]
    err = json.loads(body)["error"]
    for w in words:
        assert w.lower() in err["message"].lower(), err
    return err


def cycle(port, token, timeout=20):
    """create + exec + delete over TCP; returns the slowest step's seconds."""
    slowest = 0.0
    t = time.monotonic()
    r = tcp_request(port, "POST", "/v1/sandboxes", token=token, body=SMALL, timeout=timeout)
    assert r.status == 201, r
    slowest = max(slowest, time.monotonic() - t)
    sid = r.json()["id"]
    t = time.monotonic()
    r = tcp_request(port, "POST", f"/v1/sandboxes/{sid}/exec", token=token,
                    body={"command": "echo served"}, timeout=timeout)
    assert r.status == 200 and r.json()["stdout"] == "served\n", r
    slowest = max(slowest, time.monotonic() - t)
    t = time.monotonic()
    r = tcp_request(port, "DELETE", f"/v1/sandboxes/{sid}", token=token, timeout=timeout)
    assert r.status == 204, r
    return max(slowest, time.monotonic() - t)


class Hostile:
    """n connections to a TCP port from `source`, each holding half a
    request: every other one stops inside the request line, the rest
    inside the headers.  A thread trickles one more byte into each about
    once a second until stop()."""

    def __init__(self, port, n, source="127.0.0.1"):
        self.socks = []
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((source, 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            self.socks.append(s)
        self.heads = [b"GET /v1/health HTT" if i % 2 else
                      b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-Slow: " for i in range(n)]
        self.sent = [0] * n
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self):
        while not self.stopping.is_set():
            for i, s in enumerate(self.socks):
                if s.fileno() < 0:
                    continue
                head = self.heads[i]
                # the first round sends the half request, then a byte a round
                data = head if self.sent[i] == 0 else b"a"
                try:
                    self.sent[i] += s.send(data)
                except OSError:
                    pass
            self.stopping.wait(1.0)

    def closed_by_peer(self, timeout):
        """Wait up to timeout for the daemon to close every connection;
        returns how many it left open."""
        end = time.monotonic() + timeout
        open_ = {s.fileno(): s for s in self.socks}
        p = select.poll()
        for fd in open_:
            p.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        while open_ and time.monotonic() < end:
            for fd, _ in p.poll(500):
                s = open_.get(fd)
                if s is None:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    p.unregister(fd)
                    del open_[fd]
        return len(open_)

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


# ---- slow and hostile clients --------------------------------------------------------------

def test_slowloris_does_not_starve_authenticated_clients(own_daemon, tmp_path):
    """10,000 unauthenticated connections trickling half requests: the
    daemon's threads stay bounded, authenticated clients keep being served
    promptly, and every hostile connection is closed by the header
    deadline (10 s by default) without waiting for the clients."""
    raise_nofile(HOSTILE + 1000)
    d, port, token = tcp_daemon(own_daemon, tmp_path)
    pid = d.proc.pid
    t0 = time.monotonic()
    hostile = Hostile(port, HOSTILE)
    try:
        peak = threads_of(pid)
        worst = 0.0
        for _ in range(3):
            worst = max(worst, cycle(port, token))
            peak = max(peak, threads_of(pid))
        assert worst < 10, f"a request took {worst:.1f} s while the connections trickled"
        assert peak < 64, f"sandlotd ran {peak} threads with {HOSTILE} connections open"
        left = hostile.closed_by_peer(timeout=10 + 20 - (time.monotonic() - t0))
        assert left == 0, f"{left} trickling connections still open after the header deadline"
        # and the daemon still serves
        assert cycle(port, token) < 10
    finally:
        hostile.stop()
    print(f"load {os.getloadavg()[0]:.2f}: slowest step {worst:.2f} s, peak {peak} threads")


def test_pending_connections_cost_no_thread(own_daemon, tmp_path):
    """With the per-peer limit out of the way the daemon holds all 10,000
    half requests at once, on a handful of threads, and still serves."""
    raise_nofile(HOSTILE + 1000)
    # Few sandboxes: sandlotd sizes its descriptor limit for both (5 per
    # sandbox, one per connection), and a host's hard limit of 20,000 (the
    # test host's, which root may not raise there) holds 10,500
    # connections but not 2,000 sandboxes besides; sandlotd would shrink
    # the connection limit to fit (with a warning).  And a header deadline
    # past the wait below: 10,000 connects overflow the listen backlog
    # (1,024), so the last ones are accepted only after the kernel's
    # SYN-ACK retries (1, 2, 4, 8 s...), by which time, under a sanitizer's
    # slower accept loop, the default 10 s deadline had closed the first
    # ones (the fresh-clone CI under TSan: never all held at once).
    d, port, token = tcp_daemon(own_daemon, tmp_path,
                                ["--max-connections-per-peer", str(HOSTILE + 100),
                                 "--max-connections", str(HOSTILE + 500),
                                 "--max-sandboxes", "100", "--header-timeout", "120"])
    hostile = Hostile(port, HOSTILE)
    try:
        held = wait_until(lambda: metric(d, "sandlot_http_connections", 'state="pending"')
                          >= HOSTILE - 10, 30, interval=0.2)
        assert held, metric(d, "sandlot_http_connections", 'state="pending"')
        assert threads_of(d.proc.pid) < 64
        assert cycle(port, token) < 10
        assert threads_of(d.proc.pid) < 64
    finally:
        hostile.stop()


def test_egress_is_set_up_while_thousands_of_connections_are_held(own_daemon, tmp_path):
    """libnftables select()s on its socket and so cannot take a descriptor
    above 1023: with 1,300 connections held, every low number is taken.
    Sandboxes with egress are still made (their rules through sandlotd's
    nftables helper process), and their rules are really in: a connection
    out reaches the egress proxy, which logs it.  Before, such a create
    failed (EMFILE) or, racing with the accepts, aborted the daemon."""
    n = 1300
    raise_nofile(n + 1000)
    d, port, token = tcp_daemon(own_daemon, tmp_path,
                                ["--max-connections-per-peer", str(n + 100),
                                 "--max-connections", str(n + 500), "--resolver", "127.0.0.53"])
    hostile = Hostile(port, n)
    try:
        assert wait_until(lambda: metric(d, "sandlot_http_connections", 'state="pending"')
                          >= n - 10, 60, interval=0.2)
        fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        assert fds > 1100, fds  # no number below 1024 is free
        # more than sandlotd keeps made ahead: later ones are made now
        sids = []
        for _ in range(6):
            r = d.post("/v1/sandboxes", json_body={
                "network": {"mode": "allowlist", "allow": ["allowed.test"]}})
            assert r.status == 201, r
            sids.append(r.json()["id"])
        for sid in sids:
            r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={
                "argv": ["python3", "-c",
                         "import socket\n"
                         "try:\n"
                         "  s = socket.create_connection(('198.51.100.7', 80), 5)\n"
                         "  s.sendall(b'GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n')\n"
                         "  s.recv(1)\n"
                         "except OSError as e: print(e)"]})
            assert r.status == 200 and r.json()["exit_code"] == 0, r
            ev = d.get(f"/v1/sandboxes/{sid}/network/log").json()["events"]
            assert any("blocked.test" in json.dumps(e) for e in ev), ev
        assert d.proc.poll() is None
    finally:
        hostile.stop()


def test_per_peer_limit_evicts_the_oldest_unauthenticated(own_daemon, tmp_path):
    d, port, token = tcp_daemon(own_daemon, tmp_path, ["--max-connections-per-peer", "50"])
    hostile = Hostile(port, 200)
    try:
        # the oldest 150 go at once, not at the deadline (10 s)
        left = hostile.closed_by_peer(timeout=5)
        assert left <= 50, f"{left} of 200 connections of one peer held with a limit of 50"
        assert wait_until(lambda: metric(d, "sandlot_http_connections", 'state="pending"') <= 50,
                          5, interval=0.1)
        assert metric(d, "sandlot_http_connections_dropped_total", 'reason="peer_limit"') >= 150
        # an authenticated client of the same address still gets in
        assert cycle(port, token) < 10
    finally:
        hostile.stop()


def test_global_limit_evicts_other_peers_unauthenticated(own_daemon, tmp_path):
    d, port, token = tcp_daemon(own_daemon, tmp_path, ["--max-connections", "100"])
    hostile = Hostile(port, 150, source="127.0.0.2")
    try:
        assert wait_until(lambda: metric(d, "sandlot_http_connections", 'state="pending"') <= 100
                          and metric(d, "sandlot_http_connections_dropped_total",
                                     'reason="limit"') >= 50, 5, interval=0.1)
        assert cycle(port, token) < 10
    finally:
        hostile.stop()


def test_header_deadline_is_absolute(own_daemon, tmp_path):
    """A client that keeps sending header bytes does not extend its time."""
    d, port, token = tcp_daemon(own_daemon, tmp_path, ["--header-timeout", "2"])
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
    closed_at = None
    while time.monotonic() - t0 < 15:
        try:
            s.sendall(b"X-Trickle: y\r\n")
        except OSError:
            closed_at = time.monotonic() - t0
            break
        r, _, _ = select.select([s], [], [], 0.2)
        if r:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed_at = time.monotonic() - t0
                break
    s.close()
    assert closed_at is not None and 1.5 < closed_at < 6, closed_at
    assert metric(d, "sandlot_http_connections_dropped_total", 'reason="header_timeout"') >= 1
    # a prompt client is not affected
    assert tcp_request(port, "GET", "/v1/health", token=token).status == 200


def test_wrong_token_is_answered_before_any_route_work(own_daemon, tmp_path):
    """401 for a wrong token, even with a body declared, and the connection
    is closed (no keep-alive for unauthenticated clients)."""
    d, port, token = tcp_daemon(own_daemon, tmp_path)
    raw = tcp_raw(port, b"PUT /v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaaaaaaaa/files?path=x HTTP/1.1\r\n"
                        b"Host: x\r\nAuthorization: Bearer nope\r\nContent-Length: 5\r\n\r\nhello")
    err = one_error(raw, 401)
    assert err["code"] == "unauthorized"
    assert b"WWW-Authenticate: Bearer" in raw


# ---- framing -----------------------------------------------------------------------------

def framing_cases(token):
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    return [
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: -1\r\n\r\n{}",
         ["Content-Length"]),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
         b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
         ["Content-Length", "Transfer-Encoding"]),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
         b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", ["Content-Length"]),
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nHost: y\r\n" + auth + b"\r\n", ["Host"]),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
         b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         ["Transfer-Encoding"]),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
         b"Transfer-Encoding: gzip\r\n\r\n", ["Transfer-Encoding"]),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 1x\r\n\r\n{}",
         ["Content-Length"]),
    ]


def test_framing_errors_are_one_400_on_tcp(own_daemon, tmp_path):
    d, port, token = tcp_daemon(own_daemon, tmp_path)
    for req, words in framing_cases(token):
        one_error(tcp_raw(port, req), 400, words)
    # two Authorization headers, whatever they hold (the first is right)
    for second in (b"Bearer nope", f"Bearer {token}".encode()):
        raw = tcp_raw(port, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      token.encode() + b"\r\nAuthorization: " + second + b"\r\n\r\n")
        one_error(raw, 400, ["Authorization"])
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []
    assert tcp_request(port, "GET", "/v1/health", token=token).status == 200


def test_framing_errors_are_one_400_on_the_unix_socket(sandlotd):
    for req, words in framing_cases(None):
        one_error(unix_raw(sandlotd, req), 400, words)
    assert sandlotd.get("/v1/sandboxes?state=all").json()["sandboxes"] == []


def test_framing_errors_on_a_kept_alive_connection(own_daemon, tmp_path):
    """The second request of a connection is checked like the first."""
    d, port, token = tcp_daemon(own_daemon, tmp_path)
    auth = f"Authorization: Bearer {token}\r\n".encode()
    good = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
    for bad, words in [
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
         b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
         ["Content-Length", "Transfer-Encoding"]),
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth + auth + b"\r\n", ["Authorization"]),
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n\r\n", []),
    ]:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(good)
        first = b""
        while b"\r\n\r\n" not in first or not first.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            assert chunk, first
            first += chunk
        assert parse_answers(first)[0][0] == 200
        raw = exchange(s, bad)
        s.close()
        one_error(raw, 401 if not words else 400, words)


def test_http_1_0_is_refused(sandlotd):
    """Streamed answers are chunked so that a cut is visible; HTTP/1.0 has
    no chunked encoding, so it is refused."""
    one_error(unix_raw(sandlotd, b"GET /v1/health HTTP/1.0\r\n\r\n"), 505, ["HTTP/1.1"])


def test_oversized_head_is_refused(sandlotd):
    raw = unix_raw(sandlotd, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"z" * 40000 +
                   b"\r\n\r\n")
    one_error(raw, 431)
    assert sandlotd.get("/v1/health").status == 200


# ---- NUL bytes -------------------------------------------------------------------------------

def test_nul_in_paths_and_query_values_is_400(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    assert d.put(f"/v1/sandboxes/{sid}/files?path=plain.txt", b"plain\n").status == 201
    for method, path in [
        ("GET", f"/v1/sandboxes/{sid}/files?path=plain.txt%00/etc/shadow"),
        ("GET", f"/v1/sandboxes/{sid}/files/stat?path=plain.txt%00x"),
        ("GET", f"/v1/sandboxes/{sid}/files/list?path=.%00"),
        ("DELETE", f"/v1/sandboxes/{sid}/files?path=plain.txt%00x"),
        ("POST", f"/v1/sandboxes/{sid}/files/mkdir?path=dir%00x"),
        ("GET", f"/v1/sandboxes/{sid}/files/archive?path=%00"),
        ("GET", "/v1/sandboxes?label=a%00b"),
        ("GET", f"/v1/sandboxes/{sid}/changes?since=1%00"),
    ]:
        err = assert_error(d.request(method, path), 400, "bad_request")
        assert "NUL" in err["message"] and "%00" in err["message"], (path, err)
    r = d.put(f"/v1/sandboxes/{sid}/files?path=new.txt%00evil", b"x")
    err = assert_error(r, 400, "bad_request")
    assert "NUL" in err["message"] and "path" in err["message"], err
    # in the path itself
    for path in ("/v1/sandboxes/%00", f"/v1/sandboxes/{sid}%00/files?path=plain.txt"):
        err = assert_error(d.get(path), 400, "bad_request")
        assert "NUL" in err["message"], err
    # nothing was read, written or removed
    assert d.get(f"/v1/sandboxes/{sid}/files?path=plain.txt").body == b"plain\n"
    assert d.get(f"/v1/sandboxes/{sid}/files/stat?path=new.txt").status == 404
    assert d.get(f"/v1/sandboxes/{sid}/files/stat?path=dir").status == 404


def test_nul_in_json_strings_is_400(sandlotd):
    d = sandlotd
    sid = d.create(**SMALL)
    for route, body in [
        (f"/v1/sandboxes/{sid}/exec", {"command": "pwd", "cwd": "/tmp\u0000/etc"}),
        (f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "plain.txt\u0000x"]}),
        (f"/v1/sandboxes/{sid}/code", {"language": "python", "code": "print(1)\u0000"}),
        ("/v1/sandboxes", {"env": {"A": "b\u0000c"}}),
    ]:
        r = d.request("POST", route, body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
        err = assert_error(r, 400)
        assert "NUL" in err["message"] and "\\u0000" in err["message"], (route, err)


def test_raw_nul_in_the_request_line_is_400(sandlotd):
    raw = unix_raw(sandlotd, b"GET /v1/health\x00/x HTTP/1.1\r\nHost: x\r\n\r\n")
    one_error(raw, 400, ["NUL"])


# ---- what the workers must not break -------------------------------------------------------

def test_expect_100_continue(own_daemon, tmp_path):
    """An upload with "Expect: 100-continue" gets the go-ahead only once the
    route accepted it; a refused one gets its answer instead, without the
    body ever being sent."""
    d, port, token = tcp_daemon(own_daemon, tmp_path)
    sid = d.create(**SMALL)
    auth = f"Authorization: Bearer {token}\r\n".encode()
    body = os.urandom(3 << 20)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"PUT /v1/sandboxes/{sid}/files?path=up.bin HTTP/1.1\r\nHost: x\r\n".encode() + auth +
              f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
    interim = s.recv(4096)
    assert interim.startswith(b"HTTP/1.1 100 "), interim
    s.sendall(body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += s.recv(4096)
    s.close()
    assert answer.startswith(b"HTTP/1.1 201 "), answer[:300]
    assert d.get(f"/v1/sandboxes/{sid}/files?path=up.bin").body == body
    # an unknown sandbox: the 404 comes instead of the 100
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PUT /v1/sandboxes/sb-" + b"a" * 26 + b"/files?path=x HTTP/1.1\r\nHost: x\r\n" + auth +
              f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
    first = s.recv(4096)
    s.close()
    assert first.startswith(b"HTTP/1.1 404 "), first[:200]
