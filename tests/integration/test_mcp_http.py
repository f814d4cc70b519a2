"""MCP over Streamable HTTP at sandlotd's /mcp (src/daemon/mcp_http.c, src/mcp):
sessions own their sandboxes and nothing outlives them.

Each session's sandbox must be gone (with its cgroups, mounts and init: the
per-test leftover scan) once the session ends, however it ends: DELETE,
DELETE while a call runs, the idle timeout, many sessions at once, sandlotd
stopping.  The MCP SDK client's view (session ids, SSE, progress, status
codes) is in tests/mcp/http.test.mjs.
"""
import json
import threading
import time

import pytest

from conftest import wait_until
from daemon import Daemon

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def mcp_daemon(session_dirs, tmp_path_factory):
    made = []

    def make(extra_args=()):
        base = tmp_path_factory.mktemp("sandlotd-mcp", numbered=True)
        d = Daemon(base, extra_args=extra_args,
                   data_dir=session_dirs["data_dir"] / "daemon" / base.name).start()
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            assert d.stop() == 0, d.logs()


def rpc(d, msg, sid=None, accept="application/json", timeout=60):
    headers = {"Content-Type": "application/json", "Accept": accept}
    if sid:
        headers["Mcp-Session-Id"] = sid
    return d.request("POST", "/mcp", body=json.dumps(msg).encode(), headers=headers, timeout=timeout)


def initialize(d):
    r = rpc(d, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "pytest", "version": "1"}}})
    assert r.status == 200, r
    sid = r.headers.get("Mcp-Session-Id")
    assert sid and sid.startswith("mcp-"), r.headers
    return sid


def call(d, sid, name, args, id=2, timeout=60):
    r = rpc(d, {"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": args}}, sid=sid, timeout=timeout)
    assert r.status == 200, r
    return r.json()["result"]


def mcp_sandboxes(d, state="running"):
    sbs = d.get("/v1/sandboxes?label=client=sandlot-mcp-http").json()["sandboxes"]
    return [s["id"] for s in sbs if s["state"] == state]


def text(result):
    return "\n".join(c["text"] for c in result["content"] if c["type"] == "text")


def test_delete_ends_the_session_and_its_sandbox(mcp_daemon):
    d = mcp_daemon()
    sid = initialize(d)
    assert mcp_sandboxes(d) == []          # none before the first tool call
    res = call(d, sid, "run_command", {"command": "echo made > out.txt && cat out.txt"})
    assert res["isError"] is False and "made" in text(res), res
    [sb] = mcp_sandboxes(d)
    r = d.delete("/mcp", headers={"Mcp-Session-Id": sid})
    assert r.status == 204, r
    # Answered once the sandbox is gone: no waiting.
    assert mcp_sandboxes(d) == []
    assert d.get(f"/v1/sandboxes/{sb}").json()["state"] == "deleted"
    assert d.delete("/mcp", headers={"Mcp-Session-Id": sid}).status == 404


def test_delete_while_a_call_runs_kills_it(mcp_daemon):
    d = mcp_daemon()
    sid = initialize(d)
    call(d, sid, "run_command", {"command": "true"})
    [sb] = mcp_sandboxes(d)
    conn, resp = d.stream("POST", "/mcp", json_body={
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command": "sleep 120"},
                   "_meta": {"progressToken": 1}}},
        headers={"Accept": "text/event-stream", "Mcp-Session-Id": sid})
    try:
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream"
        # The first progress event: the command runs.
        line = resp.readline()
        while line and not line.startswith(b"data: "):
            line = resp.readline()
        assert b"notifications/progress" in line, line
        t0 = time.monotonic()
        r = d.delete("/mcp", headers={"Mcp-Session-Id": sid})
        assert r.status == 204, r
        assert time.monotonic() - t0 < 30
        assert mcp_sandboxes(d) == []
        # The call's stream ends without an answer.
        rest = resp.read()
        assert b'"id":5' not in rest, rest
    finally:
        conn.close()
    assert d.get(f"/v1/sandboxes/{sb}").json()["state"] == "deleted"


def test_idle_sessions_end_and_take_their_sandboxes(mcp_daemon):
    d = mcp_daemon(["--mcp-idle-timeout", "2"])
    sids = [initialize(d) for _ in range(3)]
    for sid in sids[:2]:
        call(d, sid, "write_file", {"path": "a.txt", "content": "x"})
    assert len(mcp_sandboxes(d)) == 2
    assert wait_until(lambda: mcp_sandboxes(d) == [], 20), d.logs()
    for sid in sids:
        assert rpc(d, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid=sid).status == 404
    # Each is taken out of the table (404) before its end is logged.
    assert wait_until(lambda: d.log_text().count("ended=idle") == 3, 10), d.logs()


def test_many_sessions_at_once_leave_nothing(mcp_daemon):
    d = mcp_daemon(["--mcp-max-sessions", "8"])
    errors = []

    def session(i):
        try:
            sid = initialize(d)
            res = call(d, sid, "run_code", {"language": "python", "code": f"v = {i}\nv * 2"})
            assert f"{i * 2}" in text(res), res
            res = call(d, sid, "run_command", {"command": "cat /proc/self/cgroup >/dev/null; echo ok"}, id=3)
            assert "ok" in text(res), res
            assert d.delete("/mcp", headers={"Mcp-Session-Id": sid}).status == 204
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"session {i}: {e!r}")

    threads = [threading.Thread(target=session, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert mcp_sandboxes(d) == []


def test_stopping_sandlotd_ends_live_sessions(mcp_daemon):
    d = mcp_daemon()
    sids = [initialize(d) for _ in range(2)]
    for sid in sids:
        call(d, sid, "run_command", {"command": "true"})
    assert len(mcp_sandboxes(d)) == 2
    assert d.stop() == 0, d.logs()
    log = d.log_text()
    assert log.count("ended=stopping sandbox=sb-") == 2, log[-3000:]
    assert log.count('msg="removed sandbox sb-') == 2, log[-3000:]
