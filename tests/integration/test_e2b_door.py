"""The front door's part of the E2B-compatible API, on raw sockets: under
/e2b the daemon's token is taken in E2B's headers (X-API-KEY,
X-Access-Token) as well as a bearer token, checked before any route work,
on the first request of a connection (the door, gate.c) and on every later
one of a kept-alive connection (the HTTP layer, http.c); refusals and
errors on /e2b paths have E2B's shape {"code": <status>, "message"}.

The SDK flows are in tests/e2b (E2B's own SDKs)."""
import base64
import json
import os
import socket

import pytest

from test_daemon_core import free_port, own_daemon  # noqa: F401


@pytest.fixture
def door(own_daemon, tmp_path):  # noqa: F811
    token = "e2b-d00r-t0ken-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(tf, 0o600)
    port = free_port()
    d = own_daemon(extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(tf)])
    d.start()
    return d, port, token


def read_answer(s):
    """One HTTP answer from s: (status, headers dict (lower-case names), body bytes)."""
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
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n]


def send(s, method, path, headers=(), body=b""):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Content-Type: application/json")
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def ask(port, method, path, headers=(), body=b""):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        send(s, method, path, headers, body)
        return read_answer(s)


def assert_e2b_error(status, body, want_status, pattern):
    assert status == want_status, body
    o = json.loads(body)
    assert sorted(o) == ["code", "message"], o
    assert o["code"] == want_status
    assert pattern in o["message"], o


def test_key_headers_open_e2b_paths_only(door):
    d, port, token = door
    for h in [("X-API-KEY", token), ("X-Access-Token", token), ("Authorization", f"Bearer {token}")]:
        status, _, body = ask(port, "GET", "/e2b/v2/sandboxes", [h])
        assert status == 200, (h[0], body)
        assert json.loads(body) == []
    # The envd calls also carry "Authorization: Basic user:"; a key header wins.
    basic = ("Authorization", "Basic " + base64.b64encode(b"user:").decode())
    status, _, body = ask(port, "GET", "/e2b/v2/sandboxes", [basic, ("X-Access-Token", token)])
    assert status == 200, body
    # /v1 is unchanged: E2B's headers do not open it.
    for h in [("X-API-KEY", token), ("X-Access-Token", token)]:
        status, _, body = ask(port, "GET", "/v1/sandboxes", [h])
        assert status == 401, body
        assert json.loads(body)["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("headers", [
    [],
    [("X-API-KEY", "wrong")],
    [("X-Access-Token", "wrong")],
    [("Authorization", "Basic dXNlcjo=")],
    [("X-API-KEY", "")],
    [("X-API-KEY", "PREFIX")],  # the token's prefix: replaced below
], ids=["none", "wrong-api-key", "wrong-access-token", "basic-only", "empty", "prefix"])
def test_wrong_or_missing_key_is_refused_before_the_route(door, headers):
    d, port, token = door
    headers = [(k, token[:-1] if v == "PREFIX" else v) for k, v in headers]
    # A malformed body: a route would answer 400; the door answers 401 first.
    status, h, body = ask(port, "POST", "/e2b/v2/sandboxes", headers, b'{"templateID": ')
    assert_e2b_error(status, body, 401, "missing or wrong API key")
    assert h.get("connection") == "close"
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []


def test_key_checked_on_every_request_of_a_kept_alive_connection(door):
    d, port, token = door
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        send(s, "GET", "/e2b/v2/sandboxes", [("X-API-KEY", token)])
        status, h, body = read_answer(s)
        assert status == 200, body
        assert h.get("connection") != "close"
        # The second request is read by libmicrohttpd, not the door: the
        # HTTP layer refuses it the same way, before the route.
        send(s, "POST", "/e2b/v2/sandboxes", [("X-API-KEY", token + "x")],
             b'{"templateID": "base"}')
        status, h, body = read_answer(s)
        assert_e2b_error(status, body, 401, "missing or wrong API key")
    assert d.get("/v1/sandboxes?state=all").json()["sandboxes"] == []


def test_duplicated_key_headers_are_refused(door):
    d, port, token = door
    for name in ["X-API-KEY", "X-Access-Token", "E2b-Sandbox-Id", "E2B-Traffic-Access-Token"]:
        status, _, body = ask(port, "GET", "/e2b/v2/sandboxes",
                              [(name, token), (name.lower(), token)])
        assert status == 400, body
        assert f"duplicated header {name}" in body.decode()


def test_errors_under_e2b_have_e2bs_shape(door):
    d, port, token = door
    key = [("X-API-KEY", token)]
    status, _, body = ask(port, "POST", "/e2b/v2/sandboxes", key, b"{nope")
    assert_e2b_error(status, body, 400, "invalid JSON")
    status, _, body = ask(port, "GET", "/e2b/sandboxes/sb-nothere", key)
    assert_e2b_error(status, body, 404, 'sandbox "sb-nothere" not found')
    status, _, body = ask(port, "PATCH", "/e2b/v2/templates/x", key)
    assert_e2b_error(status, body, 501, "PATCH /e2b/v2/templates/x is not supported")
    status, _, body = ask(port, "GET", "/e2b", key)
    assert_e2b_error(status, body, 501, "GET /e2b is not supported")
    # A path that only begins like the prefix is not under it.
    status, _, body = ask(port, "GET", "/e2bx/sandboxes", [("Authorization", f"Bearer {token}")])
    assert status == 404
    assert json.loads(body)["error"]["code"] == "unknown_route"
    status, _, body = ask(port, "GET", "/e2bx/sandboxes", key)
    assert status == 401
    assert json.loads(body)["error"]["code"] == "unauthorized"
