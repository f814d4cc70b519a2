"""E2B's in-sandbox API (commands, files, the code interpreter) with the
real `e2b` and `e2b-code-interpreter` PyPI SDKs against sandlotd.

Like envd-harness.mjs: sandlotd on a unix socket of its own; a relay on
127.0.0.1 passes the SDK's TCP connections to it; sandboxes are made over
sandlotd's API and the SDK's Sandbox is built for each as Sandbox.create()
builds it from the control plane's answer.  Run with the venv of
scripts/e2b-pyenv.sh (SDK versions pinned in requirements.txt).
"""
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

e2b = pytest.importorskip("e2b", reason="run with scripts/e2b-pyenv.sh's python (the pinned E2B SDKs)")
from e2b import (  # noqa: E402
    CommandExitException,
    ConnectionConfig,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    TimeoutException,
)
from e2b_code_interpreter import Sandbox  # noqa: E402
from packaging.version import Version  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin")
ENVD_VERSION = "0.5.7"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

if os.getuid() != 0:
    pytest.skip("sandlotd needs root (uid maps, cgroups, loop devices)", allow_module_level=True)


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.path)


class Daemon:
    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="sandlot-e2benvd-py-", dir="/var/tmp"))
        self.sock = str(self.base / "sandlot.sock")
        self.log = open(self.base / "sandlotd.log", "ab")
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "sandlotd"), "--listen", f"unix:{self.sock}", "--data-dir", str(self.base / "data")],
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 15
        while True:
            assert self.proc.poll() is None, f"sandlotd exited:\n{self.logs()}"
            try:
                if self.request("GET", "/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"sandlotd did not answer:\n{self.logs()}"
            time.sleep(0.05)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sandbox_url = f"http://127.0.0.1:{self.port}/e2b"
        self.ids = []
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.sock)
            except OSError:
                client.close()
                continue
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def logs(self):
        try:
            return (self.base / "sandlotd.log").read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def request(self, method, path, body=None):
        c = UnixHTTP(self.sock)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            r = c.getresponse()
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
        finally:
            c.close()

    def sandbox(self):
        status, body = self.request("POST", "/v1/sandboxes", {})
        assert status in (200, 201), body
        self.ids.append(body["id"])
        return self.attach(body["id"])

    def attach(self, sandbox_id):
        headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
        cc = ConnectionConfig(api_key="unused-by-the-in-sandbox-api", sandbox_url=self.sandbox_url,
                              extra_sandbox_headers=headers)
        return Sandbox(sandbox_id=sandbox_id, envd_version=Version(ENVD_VERSION), envd_access_token=None,
                       sandbox_domain=None, connection_config=cc)

    def stop(self):
        for i in self.ids:
            try:
                self.request("DELETE", f"/v1/sandboxes/{i}")
            except OSError:
                pass
        self.closing = True
        self.listener.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        logs = self.logs()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)
        assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{logs}"


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def sbx(daemon):
    return daemon.sandbox()


def test_commands_foreground_streams_cwd_envs(sbx):
    out, err = [], []
    sbx.files.make_dir("/tmp/py-work")
    r = sbx.commands.run('echo "$WHO in $(pwd)"; echo warn >&2', cwd="/tmp/py-work", envs={"WHO": "py"},
                         on_stdout=out.append, on_stderr=err.append)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "py in /tmp/py-work\n", "warn\n")
    assert "".join(out) == "py in /tmp/py-work\n" and "".join(err) == "warn\n"


def test_commands_nonzero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo so-far; exit 9")
    assert e.value.exit_code == 9 and e.value.stdout == "so-far\n"


def test_commands_background_list_kill_stdin(sbx):
    h = sbx.commands.run("sleep 600", background=True)
    assert h.pid in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert sbx.commands.kill(h.pid) is False
    c = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(c.pid, "via stdin\n")
    sbx.commands.close_stdin(c.pid)
    assert c.wait().stdout == "via stdin\n"
    with pytest.raises(NotFoundException):
        sbx.commands.send_stdin(4194000, "x")


def test_commands_timeout(sbx):
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 600", timeout=1.5)


def test_files_roundtrip_many_list_and_errors(sbx):
    info = sbx.files.write("py/one.txt", "first")
    assert info.path == "/home/user/py/one.txt"
    assert sbx.files.read("py/one.txt") == "first"
    sbx.files.write_files([{"path": "py/two.bin", "data": b"\x00\xff"}, {"path": "py/sub/three.txt", "data": "3"}])
    assert bytes(sbx.files.read("py/two.bin", format="bytes")) == b"\x00\xff"
    assert b"".join(sbx.files.read("py/sub/three.txt", format="stream")) == b"3"
    names = sorted(e.path for e in sbx.files.list("py", depth=2))
    assert names == ["/home/user/py/one.txt", "/home/user/py/sub", "/home/user/py/sub/three.txt",
                     "/home/user/py/two.bin"]
    assert sbx.files.get_info("py/sub").type == FileType.DIR
    assert sbx.files.exists("py/one.txt") and not sbx.files.exists("py/none")
    assert sbx.files.make_dir("py/newdir") is True and sbx.files.make_dir("py/newdir") is False
    assert sbx.files.rename("py/one.txt", "py/moved.txt").path == "/home/user/py/moved.txt"
    sbx.files.remove("py/moved.txt")
    assert not sbx.files.exists("py/moved.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read("py/absent.txt")
    with pytest.raises(InvalidArgumentException):
        sbx.files.read("/home/user/py")


def test_watch_dir(sbx):
    sbx.files.make_dir("pywatch")
    h = sbx.files.watch_dir("pywatch", recursive=True)
    sbx.files.write("pywatch/f.txt", "1")
    sbx.commands.run("mkdir pywatch/d && echo 2 > pywatch/d/g.txt && echo 3 > py-outside.txt")
    seen = {(e.type.name, e.name) for e in h.get_new_events()}
    assert {("CREATE", "f.txt"), ("CREATE", "d"), ("CREATE", "d/g.txt")} <= seen, seen
    assert not any("outside" in name for _, name in seen)
    sbx.files.remove("pywatch/f.txt")
    assert ("REMOVE", "f.txt") in {(e.type.name, e.name) for e in h.get_new_events()}
    h.stop()


def test_run_code_state_chart_error(sbx):
    sbx.run_code("acc = 1")
    lines = []
    e = sbx.run_code("print('hi'); acc + 1", on_stdout=lambda m: lines.append(m.line))
    assert e.text == "2" and e.logs.stdout == ["hi\n"] and lines == ["hi\n"]
    chart = sbx.run_code("import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()")
    pngs = [r.png for r in chart.results if r.png]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(PNG_MAGIC)
    err = sbx.run_code("1 / 0")
    assert err.error.name == "ZeroDivisionError" and "ZeroDivisionError" in err.error.traceback
    ctx = sbx.create_code_context(language="python")
    sbx.run_code("only_here = 5", context=ctx)
    assert sbx.run_code("only_here", context=ctx).text == "5"
    assert any(c.id == ctx.id for c in sbx.list_code_contexts())
    sbx.remove_code_context(ctx)
    assert sbx.run_code("21 * 2", language="js").text == "42"


def test_unknown_sandbox(daemon):
    ghost = daemon.attach("sb-doesnotexistdoesnotexist0")
    with pytest.raises(Exception) as e:
        ghost.files.read("a.txt")
    assert "not found" in str(e.value).lower() or isinstance(e.value, TimeoutException)
