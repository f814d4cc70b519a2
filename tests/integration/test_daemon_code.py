"""sandlotd code contexts: POST /v1/sandboxes/{id}/code, /contexts,
/code/interrupt (spec/openapi.yaml "Code contexts", spec/interpreter.md).

Drives a real sandlotd (the `sandlotd` fixture) over its unix socket.
"""
import base64
import json
import statistics
import struct
import threading
import time

import pytest
from conftest import wait_until

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends

NDJSON = {"Accept": "application/x-ndjson"}


def context(d, sid, cid):
    r = d.get(f"/v1/sandboxes/{sid}/contexts")
    assert r.status == 200, r
    return next(c for c in r.json()["contexts"] if c["id"] == cid)


def code(d, sid, src, lang="python", timeout=60, **kw):
    body = {"language": lang, "code": src, **kw}
    r = d.post(f"/v1/sandboxes/{sid}/code", json_body=body, timeout=timeout)
    assert r.status == 200, r
    return r.json()


@pytest.mark.backends(check=True)
def test_python_state_value_and_latency(sandlotd):
    sid = sandlotd.create()
    r = code(sandlotd, sid, "x = 0")
    assert r["status"] == "ok" and r["value"] is None and r["state_lost"] is False
    assert r["context"] == "default-python"
    times = []
    for i in range(100):
        t = time.perf_counter()
        r = code(sandlotd, sid, "x += 1")
        times.append((time.perf_counter() - t) * 1000)
        assert r["status"] == "ok", r
    r = code(sandlotd, sid, "print('hi'); x")
    assert r["value"] == "100" and r["stdout"] == "hi\n"
    print(f"\npython `x += 1` cell over the unix socket: p50 {statistics.median(times):.2f} ms, "
          f"max {max(times):.2f} ms")


@pytest.mark.backends(check=True)
def test_timeout_interrupts_and_keeps_state(sandlotd):
    sid = sandlotd.create()
    code(sandlotd, sid, "keep = 41")
    t = time.monotonic()
    r = code(sandlotd, sid, "while True: pass", timeout_ms=500)
    assert time.monotonic() - t < 5
    assert r["status"] == "timeout" and r["error"]["name"] == "TimeoutError", r
    assert r["state_lost"] is False
    assert code(sandlotd, sid, "keep + 1")["value"] == "42"


def test_interrupt_route(sandlotd):
    sid = sandlotd.create()
    code(sandlotd, sid, "keep = 7")
    # The cell says it runs (a stdout event on its NDJSON stream) before
    # the interrupt is sent.
    c, r = sandlotd.stream("POST", f"/v1/sandboxes/{sid}/code",
                           json_body={"language": "python",
                                      "code": "import time\nprint('running', flush=True)\n"
                                              "while True: time.sleep(0.01)"},
                           headers=NDJSON)
    assert r.status == 200
    assert json.loads(r.readline()) == {"type": "stdout", "data": "running\n"}
    out = {}
    th = threading.Thread(target=lambda: out.update(r=[json.loads(l) for l in r if l.strip()]))
    th.start()
    busy = sandlotd.post(f"/v1/sandboxes/{sid}/code",
                         json_body={"language": "python", "code": "1"})
    assert busy.status == 409 and busy.error_code() == "context_busy"
    r = sandlotd.post(f"/v1/sandboxes/{sid}/code/interrupt", json_body={"context": "default-python"})
    assert r.status == 200 and r.json()["interrupted"] is True
    th.join(10)
    c.close()
    result = out["r"][-1]
    assert result["type"] == "result", out
    assert result["status"] == "interrupted"
    assert result["error"]["name"] == "KeyboardInterrupt"
    assert code(sandlotd, sid, "keep")["value"] == "7"


def test_next_cell_right_after_a_streamed_result(sandlotd):
    # The context is free as soon as the result line is out: a client that
    # sends its next cell the moment it has read the result (its stream not
    # yet closed) is not told the context is busy.
    sid = sandlotd.create()
    code(sandlotd, sid, "n = 0")
    for i in range(40):
        c, r = sandlotd.stream("POST", f"/v1/sandboxes/{sid}/code",
                               json_body={"language": "python", "code": "n += 1\nprint(n)\nn"},
                               headers=NDJSON)
        assert r.status == 200
        while True:
            ev = json.loads(r.readline())
            if ev["type"] == "result":
                break
        assert ev["value"] == str(i + 1)
        nxt = sandlotd.post(f"/v1/sandboxes/{sid}/code", json_body={"language": "python", "code": "n"})
        assert nxt.status == 200, (i, nxt)
        assert nxt.json()["value"] == str(i + 1)
        c.close()


def test_exception_traceback_context_alive(sandlotd):
    sid = sandlotd.create()
    code(sandlotd, sid, "y = 5")
    r = code(sandlotd, sid, "def f():\n    raise ValueError('boom')\nf()")
    assert r["status"] == "error"
    assert r["error"]["name"] == "ValueError" and r["error"]["value"] == "boom"
    tb = "\n".join(r["error"]["traceback"])
    assert "boom" in tb and "<cell-" in tb
    assert code(sandlotd, sid, "y")["value"] == "5"


def test_matplotlib_png(sandlotd):
    sid = sandlotd.create()
    probe = sandlotd.exec(sid, argv=["python3", "-c", "import matplotlib"])
    if probe["exit_code"] != 0:
        pytest.skip("matplotlib is not installed in the sandbox's python3")
    r = code(sandlotd, sid, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
             timeout=120)
    assert r["status"] == "ok", r
    pngs = [x for x in r["displays"] if "image/png" in x["data"]]
    assert len(pngs) == 1
    png = base64.b64decode(pngs[0]["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    w, h = struct.unpack(">II", png[16:24])
    assert w > 50 and h > 50


def test_interpreter_death_is_reported_and_recoverable(sandlotd):
    sid = sandlotd.create()
    code(sandlotd, sid, "z = 1")
    r = code(sandlotd, sid, "import os\nprint('bye', flush=True)\nos._exit(3)")
    assert r["status"] == "error" and r["state_lost"] is True
    assert r["error"]["name"] == "InterpreterDied" and "status 3" in r["error"]["value"]
    r = code(sandlotd, sid, "'z' in globals()")
    assert r["status"] == "ok" and r["value"] == "False" and r["state_lost"] is False
    r = code(sandlotd, sid, "import ctypes\nctypes.string_at(0)")
    assert r["error"]["name"] == "InterpreterDied" and "SIGSEGV" in r["error"]["value"]
    assert code(sandlotd, sid, "1 + 1")["value"] == "2"


def test_interpreter_killed_between_cells_is_reported_by_the_next_cell(sandlotd):
    sid = sandlotd.create()
    pid = code(sandlotd, sid, "import os\nw = 5\nos.getpid()")["value"]
    assert pid.isdigit()
    # The shell's kill: an image need not have procps's /bin/kill (the vm
    # guest's root has not).
    r = sandlotd.exec(sid, argv=["sh", "-c", f"kill -KILL {pid}"])
    assert r["exit_code"] == 0, r
    # The daemon has seen the interpreter die when its context says so.
    assert wait_until(lambda: not context(sandlotd, sid, "default-python")["alive"], 10)
    # The death happened while no cell ran: the next cell says the state
    # is gone (and runs in a fresh interpreter); the one after does not.
    r = code(sandlotd, sid, "'w' in globals()")
    assert r["status"] == "ok" and r["value"] == "False" and r["state_lost"] is True, r
    r = code(sandlotd, sid, "1 + 1")
    assert r["value"] == "2" and r["state_lost"] is False, r


def test_javascript_bindings_persist(sandlotd):
    sid = sandlotd.create()
    r = code(sandlotd, sid, "let a = 1; const b = 2; function f() { return a + b }", lang="javascript")
    assert r["status"] == "ok", r
    r = code(sandlotd, sid, "a += 10; f()", lang="javascript")
    assert r["value"] == "13", r
    r = code(sandlotd, sid, "console.log('out'); b", lang="javascript")
    assert r["value"] == "2" and r["stdout"] == "out\n"


def test_bash_variables_and_cwd_persist(sandlotd):
    sid = sandlotd.create()
    r = code(sandlotd, sid, "v=hello; mkdir -p /tmp/wd && cd /tmp/wd", lang="bash")
    assert r["status"] == "ok", r
    r = code(sandlotd, sid, "echo $v; pwd", lang="bash")
    assert r["stdout"] == "hello\n/tmp/wd\n" and r["cwd"] == "/tmp/wd"
    r = code(sandlotd, sid, "false", lang="bash")
    assert r["status"] == "error" and r["error"]["name"] == "ExitStatus"


def test_independent_contexts(sandlotd):
    sid = sandlotd.create()
    r = sandlotd.post(f"/v1/sandboxes/{sid}/contexts", json_body={"language": "python"})
    assert r.status == 201, r
    c1 = r.json()["id"]
    c2 = sandlotd.post(f"/v1/sandboxes/{sid}/contexts", json_body={"language": "python"}).json()["id"]
    code(sandlotd, sid, "s = 'one'", context=c1)
    code(sandlotd, sid, "s = 'two'", context=c2)
    assert code(sandlotd, sid, "s", context=c1)["value"] == "'one'"
    assert code(sandlotd, sid, "s", context=c2)["value"] == "'two'"
    assert code(sandlotd, sid, "'s' in globals()")["value"] == "False"
    ids = {c["id"] for c in sandlotd.get(f"/v1/sandboxes/{sid}/contexts").json()["contexts"]}
    assert {c1, c2, "default-python"} <= ids
    assert sandlotd.delete(f"/v1/sandboxes/{sid}/contexts/{c1}").status == 204
    r = sandlotd.post(f"/v1/sandboxes/{sid}/code", json_body={"code": "1", "context": c1})
    assert r.status == 404
    assert code(sandlotd, sid, "s", context=c2)["value"] == "'two'"


def test_ndjson_stream_output_before_result(sandlotd):
    sid = sandlotd.create()
    c, r = sandlotd.stream("POST", f"/v1/sandboxes/{sid}/code",
                           json_body={"language": "python",
                                      "code": "import time\nprint('first', flush=True)\n"
                                              "time.sleep(1)\nprint('second')\n42"},
                           headers=NDJSON)
    try:
        assert r.status == 200
        t0 = time.monotonic()
        first = json.loads(r.readline())
        assert first == {"type": "stdout", "data": "first\n"}
        assert time.monotonic() - t0 < 0.9  # arrived while the cell slept
        events = [json.loads(l) for l in r if l.strip()]
    finally:
        c.close()
    assert events[-1]["type"] == "result" and events[-1]["value"] == "42"
    assert events[-1]["stdout"] == "first\nsecond\n"
    assert [e["type"] for e in events[:-1]] == ["stdout"]


def test_a_cells_file_changes_are_in_its_result_and_the_change_log(sandlotd):
    sid = sandlotd.create()
    r = code(sandlotd, sid, "open('made.txt', 'w').write('x' * 5)")
    assert r["status"] == "ok", r
    assert [(c["path"], c["kind"], c["size"]) for c in r["changes"]] == \
        [("/home/user/made.txt", "created", 5)], r
    assert r["changes"][0]["source"] == "default-python"
    r = code(sandlotd, sid, "import os; os.remove('made.txt')")
    assert [(c["path"], c["kind"]) for c in r["changes"]] == [("/home/user/made.txt", "deleted")]
    log = sandlotd.get(f"/v1/sandboxes/{sid}/changes").json()["changes"]
    assert [(c["path"], c["kind"], c["source"]) for c in log] == [
        ("/home/user/made.txt", "created", "default-python"),
        ("/home/user/made.txt", "deleted", "default-python")], log
    assert code(sandlotd, sid, "1")["changes"] == []
