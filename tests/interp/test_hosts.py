"""Interpreter hosts (src/interp) driven directly as subprocesses through their protocol.

    /usr/bin/python3 -m pytest -q tests/interp          (add -s to see the latency lines)

No sandbox is needed: the hosts are ordinary programs.  Each test starts a host the way the
daemon will -- `/usr/bin/python3 -c <python_host.py>` (argument `bash` for bash) or
`node -e <js_host.js>` -- writes requests to its stdin and reads its stdout on a thread that
checks every line (valid JSON, at most 1 MiB, an id on every message) and reassembles "part"
sequences.  The protocol is spec/interpreter.md.
"""

import base64
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTERP = os.path.join(ROOT, "src", "interp")
PYTHON = "/usr/bin/python3"          # Debian's: the python3 on PATH may be a pyenv shim
NODE = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin")
BASH = shutil.which("bash", path="/usr/bin:/bin")
MAX_LINE = 1 << 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _source(name):
    with open(os.path.join(INTERP, name), encoding="utf-8") as f:
        return f.read()


# The launch commands of spec/interpreter.md.  JavaScript: the shell passes the protocol pipes on
# fds 3/4 (node has no dup(); reopening /proc/self/fd/N fails for pipes another user owns, as
# sandlot-init's are).  "plain" is `node -e` alone, which reopens through /proc/self/fd.
JS_WRAPPER = 'exec "$1" -e "$0" sandlot-fds=3,4 3<&0 4>&1'


def host_argv(lang):
    if lang == "python":
        return [PYTHON, "-c", _source("python_host.py")]
    if lang == "bash":
        return [PYTHON, "-c", _source("python_host.py"), "bash"]
    if lang == "javascript":
        return ["/bin/sh", "-c", JS_WRAPPER, _source("js_host.js"), NODE]
    if lang == "javascript-plain":
        return [NODE, "-e", _source("js_host.js")]
    raise ValueError(lang)


def _can_import(module):
    r = subprocess.run([PYTHON, "-c", "import " + module], capture_output=True)
    return r.returncode == 0


class Cell:
    def __init__(self, messages, sent_at):
        self.messages = messages
        self.sent_at = sent_at
        self.result = messages[-1][1] if messages and messages[-1][1]["type"] == "result" else None

    def text(self, kind):
        return "".join(m["data"] for _, m in self.messages if m["type"] == kind)

    @property
    def stdout(self):
        return self.text("stdout")

    @property
    def stderr(self):
        return self.text("stderr")

    @property
    def displays(self):
        return [m for _, m in self.messages if m["type"] == "display"]

    @property
    def value(self):
        return self.result["value"]

    @property
    def status(self):
        return self.result["status"]

    @property
    def error(self):
        return self.result["error"]


class Host:
    """One host process; a thread reads and checks its stdout."""

    def __init__(self, lang, cwd=None, env=None):
        self.lang = lang.split("-")[0]
        self.proc = subprocess.Popen(host_argv(lang), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=cwd, env=env)
        self.q = queue.Queue()
        self.lines = []               # (length, raw type) of every line: for the framing checks
        self.protocol_errors = []
        self.n = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.ready = self.next(timeout=60)
        assert self.ready is not None, "host exited before ready: %r" % self._stderr()
        assert self.ready["type"] == "ready", self.ready
        if self.lang == "javascript":
            assert self.ready["capture"] == ("js" if env and "PATH" in env else "fd")
            assert self.ready["interrupts"] == "worker"
        assert self.ready["id"] is None
        assert isinstance(self.ready["pid"], int)

    def _read(self):
        part = None
        for raw in self.proc.stdout:
            try:
                self.lines.append(len(raw))
                if len(raw) > MAX_LINE:
                    self.protocol_errors.append("line of %d bytes" % len(raw))
                if not raw.endswith(b"\n"):
                    self.protocol_errors.append("line without newline: %r" % raw[:200])
                msg = json.loads(raw)
                if not isinstance(msg, dict) or "id" not in msg or "type" not in msg:
                    self.protocol_errors.append("bad message %r" % raw[:200])
                    continue
                if msg["type"] == "part":
                    part = (part or "") + msg["data"]
                    if msg["more"]:
                        continue
                    msg, part = json.loads(part), None
                elif part is not None:
                    self.protocol_errors.append("a part sequence was interrupted")
                self.q.put((time.monotonic(), msg))
            except ValueError:
                self.protocol_errors.append("not JSON: %r" % raw[:200])
        self.q.put((time.monotonic(), None))

    def _stderr(self):
        try:
            return self.proc.stderr.read().decode(errors="replace")[-2000:]
        except Exception:
            return ""

    def next(self, timeout=30):
        _, msg = self.next_timed(timeout)
        return msg

    def next_timed(self, timeout=30):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message from the %s host within %ss" % (self.lang, timeout))

    def send(self, code, rid=None, **extra):
        self.n += 1
        rid = rid or "cell-%d" % self.n
        req = dict(id=rid, kind="execute", code=code, **extra)
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        return rid

    def collect(self, rid, timeout=60, sent_at=None, on_message=None):
        msgs = []
        deadline = time.monotonic() + timeout
        while True:
            t, msg = self.next_timed(max(0.1, deadline - time.monotonic()))
            if msg is None:
                return Cell(msgs, sent_at)
            if on_message:
                on_message(msg)
            if msg["id"] != rid:
                continue              # late output of an earlier cell
            msgs.append((t, msg))
            if msg["type"] == "result":
                return Cell(msgs, sent_at)

    def run(self, code, timeout=60, **extra):
        t = time.monotonic()
        rid = self.send(code, **extra)
        cell = self.collect(rid, timeout, sent_at=t)
        assert cell.result is not None, "host died: rc=%r stderr=%r" % (self.proc.poll(), self._stderr())
        assert cell.result["id"] == rid
        return cell

    def interrupt(self):
        os.kill(self.proc.pid, signal.SIGINT)

    def sigint_delivered(self):
        """Whether no SIGINT is pending for the host process or any of its threads
        (/proc/PID/status ShdPnd, /proc/PID/task/*/status SigPnd): the kernel has handed every
        one sent to a signal handler."""
        paths = ["/proc/%d/status" % self.proc.pid]
        try:
            paths += ["/proc/%d/task/%s/status" % (self.proc.pid, t)
                      for t in os.listdir("/proc/%d/task" % self.proc.pid)]
        except OSError:
            return True                 # gone
        for path in paths:
            try:
                with open(path) as f:
                    for line in f:
                        k, _, v = line.partition(":")
                        if k in ("ShdPnd", "SigPnd") and int(v, 16) & (1 << (signal.SIGINT - 1)):
                            return False
            except OSError:
                continue
        return True

    def interrupt_idle(self, times=1):
        """SIGINT the idle host `times` times, each delivered before the next is sent (pending
        signals of one kind merge into one) and the last before this returns."""
        for _ in range(times):
            self.interrupt()
            deadline = time.monotonic() + 10
            while not self.sigint_delivered():
                assert time.monotonic() < deadline, "SIGINT still pending after 10 s"
                time.sleep(0.005)

    RUNNING = "cell-is-running"

    def send_running(self, code, timeout=30):
        """Send a cell that prints a line where it is stuck, and return its id once that line
        has arrived.  The line is printed where the code says RUNNING (JavaScript code that
        gets stuck later, in a callback or after an await: "await null; RUNNING while (true)
        {}"), else first."""
        say = {"python": "print(%r, flush=True)\n" % self.RUNNING,
               "javascript": "console.log(%r);\n" % self.RUNNING,
               "bash": "echo %s\n" % self.RUNNING}[self.lang]
        rid = self.send(code.replace("RUNNING ", say) if "RUNNING " in code else say + code)
        deadline = time.monotonic() + timeout
        while True:
            _, msg = self.next_timed(max(0.1, deadline - time.monotonic()))
            assert msg is not None, "host died: %r" % self._stderr()
            if msg["id"] != rid:
                continue
            if msg["type"] == "stdout" and self.RUNNING in msg["data"]:
                return rid
            assert msg["type"] != "result", "the cell ended before it said it runs: %r" % msg

    def run_interrupted(self, code, timeout=30):
        """Send a cell, SIGINT the host once it runs, again every 2 s until the cell answers."""
        rid = self.send_running(code)
        deadline = time.monotonic() + timeout
        cell = None
        while time.monotonic() < deadline:
            self.interrupt()
            try:
                cell = self.collect(rid, timeout=2)
                break
            except AssertionError:
                continue
        assert cell is not None and cell.result is not None, "the cell was not interrupted"
        return cell

    def close(self):
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        assert not self.protocol_errors, self.protocol_errors


LANGS = ["python", "javascript", "bash"]


def _skip_missing(lang):
    if lang == "javascript" and NODE is None:
        pytest.skip("node is not installed")
    if lang == "bash" and BASH is None:
        pytest.skip("bash is not installed")


@pytest.fixture(params=LANGS)
def host(request):
    _skip_missing(request.param)
    h = Host(request.param)
    yield h
    h.close()


@pytest.fixture
def py():
    h = Host("python")
    yield h
    h.close()


@pytest.fixture
def js():
    _skip_missing("javascript")
    h = Host("javascript")
    yield h
    h.close()


@pytest.fixture
def sh():
    _skip_missing("bash")
    h = Host("bash")
    yield h
    h.close()


def report(capsys, text):
    with capsys.disabled():
        sys.stdout.write("\n    " + text)
        sys.stdout.flush()


# Per language: (set up, step, read back, expected) for a counter kept across cells.
COUNTER = {
    "python": ("x = 0", "x += 1", "x", "100"),
    "javascript": ("let x = 0", "x += 1", "x", "100"),
    "bash": ("x=0", "x=$((x+1))", "echo $x", "100\n"),
}


# ---------------------------------------------------------------------------------------------
# State, values, streaming

def test_ready_message(host):
    r = host.ready
    assert r["pid"] == host.proc.pid
    assert r["language"] == host.lang
    assert r["protocol"] == 1
    assert isinstance(r["version"], str) and r["version"]


def test_host_sources_fit_one_argument():
    # Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); the hosts travel as one.
    for name in ("python_host.py", "js_host.js"):
        assert len(_source(name).encode()) < 100 * 1024, name


def test_state_persists_across_100_cells(host, capsys):
    setup, step, read, expected = COUNTER[host.lang]
    assert host.run(setup).status == "ok"
    times = []
    for _ in range(100):
        t = time.perf_counter()
        c = host.run(step)
        times.append((time.perf_counter() - t) * 1000)
        assert c.status == "ok", c.result
    c = host.run(read)
    assert (c.stdout if host.lang == "bash" else c.value) == expected
    report(capsys, "%-10s 100 cells: round trip p50 %.3f ms, max %.3f ms" %
           (host.lang, statistics.median(times), max(times)))


def test_definitions_and_imports_persist(host):
    if host.lang == "python":
        host.run("import json\ndef f(v):\n    return json.dumps(v)\nclass K:\n    k = 7")
        assert host.run("f([K.k])").value == "'[7]'"
    elif host.lang == "javascript":
        host.run("const path = require('path'); function f(v) { return path.join('a', v) }\nclass K { static k = 7 }")
        assert host.run("f(String(K.k))").value == "'a/7'"
    else:
        host.run("f() { echo \"f:$1\"; }\ndeclare -A m=([k]=7)\ncd /tmp")
        c = host.run("f ${m[k]}; pwd")
        assert c.stdout == "f:7\n/tmp\n"
        assert c.result["cwd"] == "/tmp"


def test_round_trip_latency(host, capsys):
    """A trivial cell in a live context: measured, not asserted (the daemon bench owns targets)."""
    setup, step, _, _ = COUNTER[host.lang]
    host.run(setup)
    for _ in range(50):
        host.run(step)
    times, inside = [], []
    for _ in range(1000):
        t = time.perf_counter()
        c = host.run(step)
        times.append((time.perf_counter() - t) * 1000)
        inside.append(c.result["duration_ms"])
    times.sort()
    report(capsys, "%-10s %-12s round trip p50 %.3f ms  p99 %.3f ms  (execution p50 %.3f ms)"
           % (host.lang, repr(step), times[len(times) // 2], times[int(len(times) * 0.99)],
              statistics.median(inside)))


def test_last_expression_value(host):
    if host.lang == "python":
        assert host.run("1 + 1").value == "2"
        assert host.run("y = 5").value is None
        assert host.run("'a' * 2").value == "'aa'"
        assert host.run("None").value is None
        assert host.run("y * 2;").value is None          # a trailing ';' hides it (IPython)
        assert host.run("y\nprint('p')").value is None   # only a final expression counts
        assert host.run("[y, _]").value == "[5, 'aa']"   # _ is the previous value
    elif host.lang == "javascript":
        assert host.run("1 + 1").value == "2"
        assert host.run("const y = 5").value is None
        assert host.run("'a'.repeat(2)").value == "'aa'"
        assert host.run("undefined").value is None
        assert host.run("null").value == "null"
        assert host.run("({a: [y]})").value == "{ a: [ 5 ] }"
        assert host.run("await Promise.resolve(y * 2)").value == "10"
    else:
        c = host.run("echo hi")
        assert c.value is None and c.result["exit_code"] == 0 and c.stdout == "hi\n"


def test_output_streams_before_the_cell_ends(host):
    code = {
        "python": "print('early')\nimport time\ntime.sleep(1)",
        "javascript": "console.log('early'); await new Promise(r => setTimeout(r, 1000))",
        "bash": "echo early; sleep 1",
    }[host.lang]
    c = host.run(code)
    (t_out, out), = [(t, m) for t, m in c.messages if m["type"] == "stdout"]
    t_end = c.messages[-1][0]
    assert out["data"] == "early\n"
    assert t_end - t_out > 0.7, "stdout arrived %.3f s before the result" % (t_end - t_out)


def test_js_output_streams_during_a_busy_loop(js):
    # The worker thread frames fd 1 while the main thread is stuck in synchronous code.
    c = js.run("console.log('early'); const t0 = Date.now(); while (Date.now() - t0 < 1000) {}")
    (t_out, _), = [(t, m) for t, m in c.messages if m["type"] == "stdout"]
    assert c.messages[-1][0] - t_out > 0.7


def test_python_partial_line_and_stderr_stream(py):
    c = py.run("import sys, time\nsys.stdout.write('no newline')\nsys.stdout.flush()\n"
               "print('err', file=sys.stderr)\ntime.sleep(0.8)")
    kinds = [(t, m["type"]) for t, m in c.messages]
    assert c.stdout == "no newline" and c.stderr == "err\n"
    assert all(c.messages[-1][0] - t > 0.5 for t, k in kinds if k in ("stdout", "stderr"))


# ---------------------------------------------------------------------------------------------
# Errors

def test_exception_gives_traceback_and_the_context_lives(host):
    if host.lang == "python":
        host.run("v = 'kept'")
        c = host.run("def f():\n    raise ValueError('bad value')\n\nf()")
        assert c.status == "error"
        e = c.error
        assert e["name"] == "ValueError" and e["value"] == "bad value"
        tb = "\n".join(e["traceback"])
        assert 'File "<cell-2>", line 4, in <module>' in tb
        assert 'File "<cell-2>", line 2, in f' in tb and "raise ValueError('bad value')" in tb
        assert "run_python" not in tb and "_execute" not in tb and "<string>" not in tb
        assert e["traceback"][-1] == "ValueError: bad value"
        assert host.run("v").value == "'kept'"
        s = host.run("x = (1,\n")
        assert s.status == "error" and s.error["name"] == "SyntaxError"
        assert "ast.py" not in "\n".join(s.error["traceback"])
        assert 'File "<cell-4>"' in "\n".join(s.error["traceback"])
        assert host.run("v").value == "'kept'"
        assert host.run("import sys; sys.exit(3)").error["name"] == "SystemExit"
        assert host.run("v").value == "'kept'"
    elif host.lang == "javascript":
        host.run("let v = 'kept'")
        c = host.run("function f() {\n  throw new TypeError('bad value')\n}\nf()")
        assert c.status == "error"
        e = c.error
        assert e["name"] == "TypeError" and e["value"] == "bad value"
        tb = "\n".join(e["traceback"])
        assert "at f (<cell-2>:2:9)" in tb and "at <cell-2>:4:1" in tb
        assert "runCell" not in tb and "[eval]" not in tb and "node:vm" not in tb
        assert host.run("v").value == "'kept'"
        s = host.run("let w = (1,")
        assert s.status == "error" and s.error["name"] == "SyntaxError"
        # an error after the async rewrite keeps its line numbers
        c = host.run("await null\nlet z = 1\nnull.boom")
        assert c.error["name"] == "TypeError"
        assert any("<cell-5>:3" in line for line in c.error["traceback"]), c.error
        assert "node:internal" not in "\n".join(c.error["traceback"])
        assert host.run("throw 42").error == {"name": "Error", "value": "42", "traceback": ["Uncaught 42"]}
        assert host.run("v").value == "'kept'"
    else:
        host.run("v=kept")
        c = host.run("ls /nonexistent-dir")
        assert c.status == "error" and c.error["name"] == "ExitStatus" and c.error["value"] == "2"
        assert c.result["exit_code"] == 2 and "nonexistent-dir" in c.stderr
        c = host.run("if then fi")
        assert c.status == "error" and "syntax error" in c.stderr
        assert host.run("echo $v").stdout == "kept\n"


# ---------------------------------------------------------------------------------------------
# Interrupts and timeouts

LOOPS = {
    "python": ("x = 42", "while True:\n    pass", "x", "42"),
    "javascript": ("let x = 42", "while (true) {}", "x", "42"),
    "bash": ("x=42", "while :; do :; done", "echo $x", "42\n"),
}


def _readback(host, read):
    c = host.run(read)
    return c.stdout if host.lang == "bash" else c.value


def test_interrupt_an_infinite_loop_keeps_state(host):
    setup, loop, read, expected = LOOPS[host.lang]
    host.run(setup)
    c = host.run_interrupted(loop)
    assert c.status == "interrupted", c.result
    assert c.error["name"] == {"python": "KeyboardInterrupt"}.get(host.lang, "Interrupted")
    assert _readback(host, read) == expected


def test_interrupt_a_blocking_wait(host):
    setup, _, read, expected = LOOPS[host.lang]
    host.run(setup)
    code = {"python": "import time\ntime.sleep(100)",
            "javascript": "await new Promise(() => {})",   # never settles: the cell is abandoned
            "bash": "sleep 100"}[host.lang]
    t = time.monotonic()
    c = host.run_interrupted(code)
    assert c.status == "interrupted", c.result
    assert time.monotonic() - t < 10
    assert _readback(host, read) == expected


def test_interrupt_while_idle_is_harmless(host):
    setup, _, read, expected = LOOPS[host.lang]
    host.run(setup)
    host.interrupt_idle(3)
    assert host.proc.poll() is None
    assert _readback(host, read) == expected


def test_timeout_interrupts_and_keeps_state(host):
    setup, loop, read, expected = LOOPS[host.lang]
    host.run(setup)
    t = time.monotonic()
    c = host.run(loop, timeout_ms=300)
    assert c.status == "timeout" and c.error["name"] == "TimeoutError", c.result
    assert time.monotonic() - t < 5
    assert _readback(host, read) == expected
    assert host.run(read, timeout_ms=5000).status == "ok"


def test_js_timeout_of_a_pending_promise(js):
    c = js.run("await new Promise(() => {})", timeout_ms=200)
    assert c.status == "timeout"
    assert js.run("1").value == "1"


def test_python_interrupt_not_swallowed_by_except_exception(py):
    c = py.run_interrupted("import time\nwhile True:\n    try:\n        time.sleep(0.01)\n"
                           "    except Exception:\n        pass")
    assert c.status == "interrupted"


# ---------------------------------------------------------------------------------------------
# Rich output

def _png_dims(b64):
    raw = base64.b64decode(b64)
    assert raw[:8] == PNG_SIGNATURE
    assert raw[12:16] == b"IHDR"
    w, h = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    # walk the chunks: a complete PNG ends with IEND and every CRC matches
    pos = 8
    while pos < len(raw):
        n = int.from_bytes(raw[pos:pos + 4], "big")
        kind = raw[pos + 4:pos + 8]
        crc = int.from_bytes(raw[pos + 8 + n:pos + 12 + n], "big")
        assert zlib.crc32(raw[pos + 4:pos + 8 + n]) == crc, kind
        pos += 12 + n
        if kind == b"IEND":
            break
    assert kind == b"IEND" and pos == len(raw)
    return w, h


def test_matplotlib_figure_comes_back_as_png(py):
    if not _can_import("matplotlib"):
        pytest.skip("matplotlib is not importable by %s (Debian: python3-matplotlib)" % PYTHON)
    c = py.run("import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\n"
               "plt.plot([1, 3, 2])\nprint('drawn')", timeout=120)
    assert c.status == "ok", c.result
    (d,) = c.displays
    w, h = _png_dims(d["data"]["image/png"])
    assert 200 < w <= 400 and 150 < h <= 300, (w, h)       # 4x3 in at 100 dpi, tight bbox
    assert d["metadata"]["image/png"] == {"width": w, "height": h}
    assert d["data"]["text/plain"].startswith("<Figure")
    assert c.stdout == "drawn\n"
    # figures are closed after the cell: nothing is shown twice
    assert py.run("plt.get_fignums()").value == "[]"
    # plt.show() shows at that point, in order with the cell's prints
    c = py.run("print('a')\nplt.plot([1, 2]); plt.show()\nprint('b')\nplt.figure(); plt.bar([1], [2]);")
    kinds = [m["type"] for _, m in c.messages]
    assert kinds == ["stdout", "display", "stdout", "display", "result"], kinds
    for d in c.displays:
        _png_dims(d["data"]["image/png"])
    # a figure as the last expression is shown once, at the end of the cell
    c = py.run("fig2, ax = plt.subplots()\nfig2")
    assert len(c.displays) == 1 and c.result["data"] is None


def test_pandas_dataframe_gives_html(py):
    if not _can_import("pandas"):
        pytest.skip("pandas is not importable by %s" % PYTHON)
    c = py.run("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf", timeout=120)
    assert c.status == "ok"
    assert "a  b" in c.value
    assert "<table" in c.result["data"]["text/html"]
    assert c.result["data"]["text/plain"] == c.value


def test_python_display_and_repr_methods(py):
    c = py.run(
        "class Rich:\n"
        "    def _repr_html_(self): return '<b>rich</b>'\n"
        "    def _repr_json_(self): return {'k': [1, 2]}\n"
        "    def _repr_png_(self): return b'\\x89PNG-not-really'\n"
        "    def __repr__(self): return 'Rich()'\n"
        "print('before')\n"
        "display(Rich())\n"
        "display({'text/markdown': '# hi'}, raw=True)\n"
        "Rich()")
    kinds = [m["type"] for _, m in c.messages]
    assert kinds == ["stdout", "display", "display", "result"]
    d1, d2 = c.displays
    assert d1["data"]["text/html"] == "<b>rich</b>"
    assert d1["data"]["application/json"] == {"k": [1, 2]}
    assert base64.b64decode(d1["data"]["image/png"]) == b"\x89PNG-not-really"
    assert d1["data"]["text/plain"] == "Rich()"
    assert d2["data"] == {"text/markdown": "# hi"}
    assert c.result["data"]["text/html"] == "<b>rich</b>"
    # a class (not an instance) has no rich repr; a failing _repr_html_ is skipped
    assert py.run("Rich").result["data"] is None
    c = py.run("class Bad:\n    def _repr_html_(self): raise RuntimeError('x')\nBad()")
    assert c.status == "ok" and c.result["data"] is None


def test_js_display(js):
    c = js.run("console.log('before'); display.html('<i>x</i>');\n"
               "display({'image/png': Buffer.from('png-bytes')}, {raw: true});\n"
               "({ [Symbol.for('Jupyter.display')]() { return {'text/html': '<b>sym</b>'} } })")
    kinds = [m["type"] for _, m in c.messages]
    assert kinds == ["stdout", "display", "display", "result"]
    d1, d2 = c.displays
    assert d1["data"] == {"text/html": "<i>x</i>"}
    assert base64.b64decode(d2["data"]["image/png"]) == b"png-bytes"
    assert c.result["data"]["text/html"] == "<b>sym</b>"


# ---------------------------------------------------------------------------------------------
# The host process dies

def _wait_exit(host, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t, msg = host.next_timed(max(0.1, deadline - time.monotonic()))
        if msg is None:
            return host.proc.wait(timeout=10)
        assert msg["type"] != "result", "a dead host answered: %r" % msg
    raise AssertionError("the host did not exit")


def test_python_os_exit_ends_the_host(py):
    py.run("x = 1")
    py.send("import os\nprint('bye', flush=True)\nos._exit(3)")
    assert _wait_exit(py) == 3


def test_python_segfault_ends_the_host(py):
    py.send("import ctypes\nctypes.string_at(0)")
    assert _wait_exit(py) == -signal.SIGSEGV


def test_js_process_exit_ends_the_host(js):
    js.send("process.exit(3)")
    assert _wait_exit(js) == 3


def test_bash_exit_restarts_the_shell(sh):
    sh.run("x=1; cd /tmp")
    c = sh.run("echo going; exit 3")
    assert c.status == "error" and c.error["name"] == "ShellExited"
    assert c.result["restarted"] is True and c.result["exit_code"] == 3
    assert "going" in c.stdout and "no job control" not in c.stderr
    c = sh.run("echo \"[$x]\"; pwd")
    assert c.stdout == "[]\n%s\n" % os.getcwd()            # a fresh shell: the state is gone
    assert sh.run("x=2; echo $x").stdout == "2\n"


def test_python_fork_child_never_speaks_the_protocol(py):
    c = py.run("import os\npid = os.fork()\npid")
    assert int(c.value) > 0
    c = py.run("os.waitpid(pid, 0)[1]")
    assert c.value == "0"
    # The child has exited: whatever it wrote to the protocol pipe is there before the answer
    # to the next cell, and every message until that answer must be the next cell's own.
    seen = []
    rid = py.send("'after'")
    c = py.collect(rid, on_message=seen.append)
    assert c.value == "'after'"
    assert all(m["id"] == rid for m in seen), seen
    assert py.q.empty()


# ---------------------------------------------------------------------------------------------
# The protocol channel cannot be corrupted by user output

FAKE = '{"id": "cell-1", "type": "result", "status": "ok"}'


def test_user_output_cannot_corrupt_the_protocol(host):
    code = {
        "python": ("import os, subprocess, sys\n"
                   "print(%r)\n"
                   "os.write(1, b'%s\\n')\n"
                   "subprocess.run(['echo', 'hi'])\n"
                   "subprocess.run('echo err >&2', shell=True)\n"
                   "os.system('echo sys')\n"
                   "sys.__stdout__.write('dunder\\n')\n" % (FAKE, FAKE)),
        "javascript": ("const fs = require('fs'), cp = require('child_process');\n"
                       "console.log(%r);\n"
                       "fs.writeSync(1, %r + '\\n');\n"
                       "cp.execSync('echo hi', {stdio: 'inherit'});\n"
                       "cp.execSync('echo err >&2');\n"
                       "cp.spawnSync('sh', ['-c', 'echo sys'], {stdio: 'inherit'});\n"
                       "process.stdout.write('dunder\\n');\n" % (FAKE, FAKE)),
        "bash": ("echo '%s'\nprintf '%%s\\n' '%s'\necho hi\necho err >&2\nsh -c 'echo sys'\n"
                 "bash -c 'echo dunder >/proc/self/fd/1'" % (FAKE, FAKE)),
    }[host.lang]
    c = host.run(code)
    assert c.status == "ok", c.result
    expected = "%s\n%s\nhi\nsys\ndunder\n" % (FAKE, FAKE)
    assert c.stdout == expected
    assert c.stderr == "err\n"
    assert [m["type"] for _, m in c.messages].count("result") == 1
    assert host.run("1" if host.lang != "bash" else "true").status == "ok"


def test_undecodable_bytes_become_replacement_characters(host):
    code = {
        "python": "import os\nos.write(1, b'a\\xff\\xfeb\\x00c\\n')",
        "javascript": "require('fs').writeSync(1, Buffer.from([0x61, 0xff, 0xfe, 0x62, 0, 0x63, 10]))",
        "bash": "printf 'a\\xff\\xfeb\\0c\\n'",
    }[host.lang]
    c = host.run(code)
    assert c.stdout == "a\ufffd\ufffdb\x00c\n"
    # a multi-byte character split across two writes still decodes
    code = {
        "python": "import os, time\nos.write(1, b'\\xc3'); time.sleep(0.2); os.write(1, b'\\xa9!\\n')",
        "javascript": "const fs = require('fs'); fs.writeSync(1, Buffer.from([0xc3])); "
                      "await new Promise(r => setTimeout(r, 200)); fs.writeSync(1, Buffer.from([0xa9, 0x21, 10]))",
        "bash": "printf '\\xc3'; sleep 0.2; printf '\\xa9!\\n'",
    }[host.lang]
    assert host.run(code).stdout == "\u00e9!\n"


def test_huge_output_arrives_complete_and_chunked(host, capsys):
    n = 20_000_000
    code = {
        "python": "import sys\nsys.stdout.write('0123456789' * %d)\nsys.stdout.flush()" % (n // 10),
        "javascript": "process.stdout.write('0123456789'.repeat(%d))" % (n // 10),
        "bash": "yes 0123456789 | tr -d '\\n' | head -c %d" % n,
    }[host.lang]
    t = time.monotonic()
    c = host.run(code, timeout=120)
    elapsed = time.monotonic() - t
    chunks = [m["data"] for _, m in c.messages if m["type"] == "stdout"]
    data = "".join(chunks)
    assert len(data) == n
    assert data == "0123456789" * (n // 10)
    assert len(chunks) > 20
    assert max(host.lines) <= MAX_LINE
    report(capsys, "%-10s 20 MB of output: %d chunks in %.2f s" % (host.lang, len(chunks), elapsed))


@pytest.mark.parametrize("lang", ["python", "javascript"])  # bash cells have no values or displays
def test_large_messages_are_split_into_parts(lang):
    _skip_missing(lang)
    host = Host(lang)
    try:
        big = 3_000_000
        code = {"python": "display({'text/html': 'h' * %d}, raw=True)\n'v' * %d" % (big, big),
                "javascript": "display.html('h'.repeat(%d)); 'v'.repeat(%d)" % (big, big)}[lang]
        c = host.run(code)
        (d,) = c.displays
        assert d["data"]["text/html"] == "h" * big
        assert max(host.lines) <= MAX_LINE
        if lang == "python":
            assert c.result["value_truncated"] is True and len(c.value) == 1 << 20
        else:
            assert c.value.startswith("'vvv")    # util.inspect abbreviates long strings itself
    finally:
        host.close()


def test_user_code_cannot_read_the_requests(host):
    code = {
        "python": "import os, sys\n[sys.stdin.read(), os.read(0, 100)]",
        "javascript": "require('fs').readFileSync(0).length",
        "bash": "cat; read -r line; echo \"[$line]\"",
    }[host.lang]
    rid = host.send(code)
    host.send(COUNTER[host.lang][0])           # queued while the first cell runs
    c = host.collect(rid)
    assert c.status in ("ok", "error"), c.result
    second = host.collect("cell-2")
    assert second.status == "ok"
    if host.lang == "python":
        assert c.value == "['', b'']"
        assert host.run("input()").error["name"] == "EOFError"
    elif host.lang == "javascript":
        assert c.value == "0"
    else:
        assert c.stdout == "[]\n"


def test_protocol_errors_are_answered(host):
    host.proc.stdin.write(b"this is not json\n")
    host.proc.stdin.write(b'{"id": "a1", "kind": "execute"}\n')
    host.proc.stdin.write(b'{"id": "a2", "kind": "frobnicate", "code": ""}\n')
    host.proc.stdin.write(b'{"id": "a3", "code": "", "timeout_ms": -1}\n')
    host.proc.stdin.write(b'["not", "an", "object"]\n')
    host.proc.stdin.flush()
    got = [host.next() for _ in range(5)]
    assert [m["id"] for m in got] == [None, "a1", "a2", "a3", None]
    assert all(m["type"] == "result" and m["error"]["name"] == "ProtocolError" for m in got)
    assert host.run(COUNTER[host.lang][0]).status == "ok"


def test_end_of_input_ends_the_host(host):
    host.run(COUNTER[host.lang][0])
    host.proc.stdin.close()
    assert host.proc.wait(timeout=10) == 0


# ---------------------------------------------------------------------------------------------
# Language specifics

def test_python_top_level_await_and_magics(py):
    c = py.run("import asyncio\nawait asyncio.sleep(0.01)\nr = await asyncio.gather(*(asyncio.sleep(0, i) for i in range(3)))\nr")
    assert c.value == "[0, 1, 2]"
    c = py.run("!echo from-shell\n%matplotlib inline\nx = 3\nx")
    assert c.stdout == "from-shell\n" and c.value == "3"
    assert py.run("import sys\nsys.modules['__main__'].x").value == "3"   # pickle-able __main__


def test_python_subprocess_output_order(py):
    c = py.run("import subprocess\nprint('1')\nsubprocess.run(['echo', '2'])\nprint('3')")
    assert c.stdout == "1\n2\n3\n"


def test_js_redeclaration_and_top_level_await(js):
    assert js.run("let a = 1; const b = 2; class C { m() { return 'c1' } }").status == "ok"
    # a notebook re-runs cells: redeclaring let/const/class in a later cell rebinds
    assert js.run("let a = 10; const b = 20; class C { m() { return 'c2' } }\na + b").value == "30"
    assert js.run("new C().m()").value == "'c2'"
    c = js.run("const { p, q: [r] } = await Promise.resolve({ p: 1, q: [2] })\n"
               "async function later() { return p + r }\nlet u\nawait later()")
    assert c.value == "3"
    assert js.run("[p, r, typeof later, u]").value == "[ 1, 2, 'function', undefined ]"
    assert js.run("let p = 5; p").value == "5"
    c = js.run("import os from 'os'\nimport { join as j } from 'path'\nimport * as u2 from 'util'\n"
               "typeof os.cpus + j('x', 'y') + typeof u2.inspect")
    assert c.value == "'functionx/yfunction'"
    assert js.run("j('a', 'b')").value == "'a/b'"
    # for-loop bindings stay block scoped
    assert js.run("let s = 0; for (let i = 0; i < 3; i++) s += i; typeof i").value == "'undefined'"


def test_js_callback_errors_do_not_kill_the_host(js):
    c = js.run("setTimeout(() => { throw new Error('later') }, 0); Promise.reject(new Error('rej'));\n"
               "await new Promise(r => setTimeout(r, 50)); 'alive'")
    assert c.value == "'alive'"
    assert "Uncaught Error: later" in c.stderr and "Unhandled promise rejection: Error: rej" in c.stderr
    assert "runCell" not in c.stderr
    assert js.run("1 + 1").value == "2"


def test_bash_quoting_and_unicode_round_trip(sh):
    tricky = "a'b\"c\\d $HOME `x` \t é ✓ 😀 !x"
    c = sh.run("cat <<'EOF'\n%s\nEOF\nprintf '%%s\\n' '%s'" % (tricky, tricky.replace("'", "'\\''")))
    assert c.stdout == tricky + "\n" + tricky + "\n"
    c = sh.run("printf '%s' \"$(printf 'x\\001y')\" | od -An -c | tr -s ' '")
    assert "x 001 y" in c.stdout
    c = sh.run("echo 'nul: \x00'")
    assert c.status == "error" and c.error["name"] == "ValueError"


def test_bash_background_job_and_exit_status(sh):
    c = sh.run("(sleep 0.2; echo bg-done) &\nwait\nfalse")
    assert "bg-done" in c.stdout
    assert c.result["exit_code"] == 1 and c.status == "error"
    assert sh.run("true").result["exit_code"] == 0


def test_bash_one_interrupt_stops_a_cell_that_missed_it(sh):
    # The SIGINT reaches the shell while the cell ignores it (as one that lands between two
    # commands, after a builtin and before the next fork, is lost): the host forwards it again
    # while the cell runs on, so one interrupt still stops the command that follows.
    sh.run("kept=yes")
    rid = sh.send_running("trap '' INT; sleep 0.6; trap - INT; sleep 100")
    t0 = time.monotonic()
    sh.interrupt()
    c = sh.collect(rid, timeout=10)
    assert c.status == "interrupted", c.result
    assert time.monotonic() - t0 < 5
    assert sh.run("echo $kept").stdout == "yes\n"


@pytest.mark.parametrize("code", ["Promise.resolve().then(() => { RUNNING while (true) {} }); 1",
                                  "process.nextTick(() => { RUNNING while (true) {} }); 1",
                                  "setImmediate(() => { RUNNING while (true) {} }); 1"])
def test_js_interrupt_a_callback_the_cell_queued(js, code):
    js.run("let kept = 'yes'")
    c = js.run_interrupted(code)
    assert c.status == "interrupted", c.result
    assert js.run("kept").value == "'yes'"


def test_js_interrupt_a_loop_after_an_await(js):
    # Outside vm's breakOnSigint (the loop runs in a promise reaction): the worker thread stops
    # it through the inspector and the cell is reported interrupted, state intact.
    js.run("let kept = 'yes'")
    c = js.run_interrupted("await null; RUNNING while (true) {}")
    assert c.status == "interrupted", c.result
    assert js.run("kept").value == "'yes'"
    c = js.run("await null; while (true) {}", timeout_ms=300)
    assert c.status == "timeout", c.result
    assert js.run("kept").value == "'yes'"


@pytest.mark.parametrize("schedule", ["f()", "setImmediate(f)", "process.nextTick(f)",
                                      "require('fs').stat('/', f)", "Promise.resolve().then(f)"])
def test_js_interrupt_a_stuck_background_callback(js, schedule):
    js.run("let kept = 'yes'; const f = () => { console.log('stuck'); while (true) {} }; "
           "setTimeout(() => { %s }, 100); 'later'" % schedule)
    # The host is stuck between cells once the callback said so.
    deadline = time.monotonic() + 30
    while True:
        _, msg = js.next_timed(max(0.1, deadline - time.monotonic()))
        assert msg is not None, "host died"
        if msg["type"] == "stdout" and "stuck" in msg["data"]:
            break
    js.interrupt()
    c = js.run("kept", timeout=10)
    assert c.value == "'yes'"
    assert js.run("await new Promise(r => setTimeout(r, 20)); [kept, 1 + 1]").value == "[ 'yes', 2 ]"


STUCK = {
    "python": ["while True:\n    pass", "import time\ntime.sleep(100)",
               "import asyncio\nawait asyncio.sleep(100)"],
    "javascript": ["while (true) {}", "await new Promise(() => {})",
                   "await null; RUNNING while (true) {}",
                   "setTimeout(() => { RUNNING for (;;) {} }, 0); await new Promise(() => {})"],
    "bash": ["while :; do :; done", "sleep 100", "cat /dev/zero | sleep 100"],
}


def test_repeated_interrupts_and_signal_storms(host):
    setup, _, read, expected = LOOPS[host.lang]
    host.run(setup)
    for i in range(12):
        code = STUCK[host.lang][i % len(STUCK[host.lang])]
        c = host.run_interrupted(code)
        assert c.status == "interrupted", (i, code, c.result)
        if i % 4 == 3:                   # two signals back to back while idle
            host.interrupt()
            host.interrupt_idle()
        if i % 4 == 1:                   # two signals back to back while a cell runs
            rid = host.send_running(code)
            host.interrupt()
            host.interrupt()
            c = host.collect(rid, timeout=10)
            assert c.status == "interrupted", (i, code, c.result)
        assert _readback(host, read) == expected, (i, code)
    assert host.proc.poll() is None


def test_js_plain_node_e_launch():
    # Without the shell's fds 3/4 the host reopens its pipes through /proc/self/fd (possible
    # here: the test owns the pipes).
    _skip_missing("javascript")
    h = Host("javascript-plain")
    try:
        c = h.run("require('child_process').execSync('echo child', {stdio: 'inherit'}); process.argv.length")
        assert c.stdout == "child\n" and c.value == "1"
    finally:
        h.close()


def test_js_launch_argument_is_hidden_from_cells(js):
    assert js.run("process.argv.some((a) => a.includes('sandlot'))").value == "false"
    # the protocol descriptors do not leak into child processes
    c = js.run("require('child_process').execSync('ls /proc/self/fd', {encoding: 'utf8'}).split('\\n').filter(Boolean)")
    assert c.value == "[ '0', '1', '2', '3' ]"          # 3: ls's own directory handle


def test_js_without_mkfifo_keeps_the_protocol_safe(tmp_path):
    # No mkfifo on PATH: fd-level capture is off, JS-level output is framed directly and the
    # output of child processes goes to /dev/null instead of into the protocol stream.
    _skip_missing("javascript")
    h = Host("javascript", env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    try:
        assert h.ready["capture"] == "js"
        c = h.run("console.log('js'); require('child_process').execSync('echo child', {stdio: 'inherit'}); "
                  "console.error('e'); 1")
        assert c.stdout == "js\n" and c.stderr == "e\n" and c.value == "1"
    finally:
        h.close()


def test_no_protocol_descriptor_reaches_child_processes(host):
    code = {
        "python": "import os\nos.system('ls /proc/self/fd | tr \"\\\\n\" \" \"')",
        "javascript": "require('child_process').execSync('ls /proc/self/fd | tr \"\\\\n\" \" \"', {stdio: 'inherit'})",
        "bash": "ls /proc/self/fd | tr '\\n' ' '",
    }[host.lang]
    c = host.run(code)
    assert c.stdout.split() == ["0", "1", "2", "3"], c.stdout       # 3: ls's own directory handle


# ---------------------------------------------------------------------------------------------
# The same hosts inside a real sandbox (sandlot run -i: the sandbox user, read-only /usr, seccomp,
# sandlot-init's pipes).  Skipped where no sandbox can be made here.

SANDLOT = os.environ.get("SANDLOT_BIN", os.path.join(ROOT, "build", "bin", "sandlot"))
_sandbox_ok = None


@pytest.fixture(scope="module", autouse=True)
def _sandbox_data_dir():
    """The sandboxes of this module get a data dir of their own (never the
    host's /var/lib/sandlot), whose storage pool is unmounted at the end."""
    import tempfile
    base = tempfile.mkdtemp(prefix="sandlot-interp-", dir="/var/tmp")
    old = os.environ.get("SANDLOT_DATA_DIR")
    os.environ["SANDLOT_DATA_DIR"] = os.path.join(base, "data")
    yield
    if old is None:
        del os.environ["SANDLOT_DATA_DIR"]
    else:
        os.environ["SANDLOT_DATA_DIR"] = old
    # Each `sandlot run`'s cleanup helper holds a shared flock on
    # cleanup.lock until its sandbox is gone: wait for them, then unmount the
    # pool (a busy unmount ignored here once left a mount and a loop device
    # behind a removed directory).
    import fcntl
    lock = os.path.join(base, "data", "cleanup.lock")
    if os.path.exists(lock):
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "sandlot run's cleanup helpers still running after 60 s"
                    time.sleep(0.05)
        finally:
            os.close(fd)
    mnt = os.path.join(base, "data", "storage", "mnt")
    deadline = time.monotonic() + 10
    while os.path.ismount(mnt):
        r = subprocess.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            break
        assert time.monotonic() < deadline, "cannot unmount %s: %s" % (mnt, r.stderr.strip())
        time.sleep(0.1)
    shutil.rmtree(base, ignore_errors=True)


def _sandbox_available():
    global _sandbox_ok
    if _sandbox_ok is None:
        _sandbox_ok = False
        if os.path.exists(SANDLOT) and os.geteuid() == 0:
            try:
                r = subprocess.run([SANDLOT, "run", "--", "true"], capture_output=True, timeout=60)
                _sandbox_ok = r.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _sandbox_ok


def _sandbox_argv(lang, direct):
    """`sandlot run -i -- <the host's argv>`, with the sandbox's own python3 / sh / node."""
    argv = direct(lang)
    argv[0] = {PYTHON: "python3", "/bin/sh": "sh"}[argv[0]]
    if lang == "javascript":
        argv[-1] = "node"
    return [SANDLOT, "run", "-i", "-t", "0", "--"] + argv


@pytest.mark.parametrize("lang", LANGS)
def test_hosts_inside_a_sandbox(lang, capsys, monkeypatch):
    _skip_missing(lang)
    if not _sandbox_available():
        pytest.skip("no sandbox here (%s missing, not root, or `sandlot run -- true` fails)" % SANDLOT)
    monkeypatch.setattr(sys.modules[__name__], "host_argv",
                        lambda l, _direct=host_argv: _sandbox_argv(l, _direct))
    h = Host(lang)
    try:
        setup, step, read, expected = COUNTER[lang]
        h.run(setup)
        times = []
        for _ in range(100):
            t = time.perf_counter()
            assert h.run(step).status == "ok"
            times.append((time.perf_counter() - t) * 1000)
        assert _readback(h, read) == ("100\n" if lang == "bash" else "100")
        code = {"python": "import os, subprocess\nprint('p')\nos.write(1, b'raw\\n')\nsubprocess.run(['echo', 'sub'])",
                "javascript": "console.log('p'); require('fs').writeSync(1, 'raw\\n'); "
                              "require('child_process').execSync('echo sub', {stdio: 'inherit'})",
                "bash": "echo p; printf 'raw\\n'; sh -c 'echo sub'"}[lang]
        c = h.run(code)
        assert c.stdout == "p\nraw\nsub\n"
        # `sandlot run` passes its SIGINT on to the command: the host in the sandbox
        c = h.run_interrupted(LOOPS[lang][1])
        assert c.status == "interrupted"
        assert _readback(h, read) == ("100\n" if lang == "bash" else "100")
        if lang == "python" and _can_import("matplotlib"):
            c = h.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])", timeout=120)
            _png_dims(c.displays[0]["data"]["image/png"])
        times.sort()
        report(capsys, "%-10s in a sandbox (via sandlot run -i): round trip p50 %.3f ms"
               % (lang, times[50]))
    finally:
        h.close()
