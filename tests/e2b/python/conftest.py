"""A real sandlotd for the E2B Python SDK tests: a unix socket (for checks
over sandlot's own /v1 API) and TCP 127.0.0.1 with a token (the SDK's way
in), in a temporary directory of its own under /var/tmp, stopped with
SIGTERM at the end and the directory removed.  Standard library only."""
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin")
SANDLOTD = BIN_DIR / "sandlotd"


class _Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class E2bDaemon:
    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="sandlot-e2b-py-", dir="/var/tmp"))
        self.sock = str(self.base / "sandlot.sock")
        self.token = "e2b-py-" + secrets.token_hex(16)
        tok = self.base / "token"
        tok.write_text(self.token)
        tok.chmod(0o600)
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/e2b"
        self.log_path = self.base / "sandlotd.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(SANDLOTD), "--listen", f"unix:{self.sock}", "--listen", f"tcp:127.0.0.1:{self.port}",
             "--token-file", str(tok), "--data-dir", str(self.base / "data")],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandlotd exited:\n{self.logs()}")
            try:
                if self.request("GET", "/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sandlotd not healthy after 10 s:\n{self.logs()}")
            time.sleep(0.02)

    def opts(self):
        """The SDK's connection options: the token as the API key, both URLs at /e2b."""
        return {"api_key": self.token, "api_url": self.api_url, "sandbox_url": self.api_url}

    def logs(self):
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def request(self, method, path, body=None):
        """sandlot's own API over the unix socket: (status, parsed JSON or None)."""
        c = _Unix(self.sock)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, path, body=data,
                      headers={"Content-Type": "application/json"} if data else {})
            r = c.getresponse()
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
        finally:
            c.close()

    def record(self, sandbox_id):
        status, body = self.request("GET", f"/v1/sandboxes/{sandbox_id}")
        assert status == 200, body
        return body

    def sh(self, sandbox_id, command):
        status, body = self.request("POST", f"/v1/sandboxes/{sandbox_id}/exec", {"command": command})
        assert status == 200, body
        return body

    def stop(self):
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"sandlotd ignored SIGTERM for 20 s:\n{self.logs()}")
        else:
            rc = self.proc.returncode
        self.log.close()
        logs = self.logs()
        shutil.rmtree(self.base, ignore_errors=True)
        assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{logs}"


@pytest.fixture(scope="module")
def e2bd():
    if os.geteuid() != 0:
        why = "sandlotd needs root (uid maps, cgroups, loop devices)"
        if os.environ.get("SANDLOT_MUST_WORK") == "1":
            pytest.fail(f"SANDLOT_MUST_WORK=1: {why}")
        pytest.skip(why)
    if not os.access(SANDLOTD, os.X_OK):
        raise RuntimeError(f"not built: {SANDLOTD} (run `make` first)")
    d = E2bDaemon()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def anyio_backend():
    """The async tests run on asyncio (anyio's pytest plugin, an e2b dependency)."""
    return "asyncio"
