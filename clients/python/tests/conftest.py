"""Fixtures for the sandlot Python package's tests: a real sandlotd.

`sandlotd` (session) starts build/bin/sandlotd on a unix socket in a
temporary directory with its own data dir, the way tests/integration/daemon.py
does; after each test no sandbox of it may still run, and at the end it must
stop cleanly with nothing left in its storage.  `Daemon` starts further ones
(TCP with a token).  Run as root after `make`:

    /usr/bin/python3 -m pytest -q clients/python/tests
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PKG = HERE.parent
REPO = PKG.parents[1]
sys.path.insert(0, str(PKG))

import sandlot  # noqa: E402

BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin").resolve()
SANDLOTD = BIN_DIR / "sandlotd"


class Daemon:
    """A sandlotd of the tests: ``sock`` its unix socket, ``client()`` a
    sandlot.Client for it."""

    def __init__(self, base, extra_args=()):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.sock = self.base / "sandlot.sock"
        self.data_dir = self.base / "data"
        self.log_path = self.base / "sandlotd.log"
        self.extra_args = [str(a) for a in extra_args]
        self.proc = None

    def start(self, timeout=15):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
        if os.environ.get("SANDLOT_INIT"):
            env["SANDLOT_INIT"] = os.environ["SANDLOT_INIT"]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(SANDLOTD), "--listen", f"unix:{self.sock}", "--data-dir", str(self.data_dir),
             *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        client = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandlotd exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                client.health()
                return self
            except sandlot.TransportError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sandlotd not healthy after {timeout}s:\n{self.logs()}")

    def client(self, **kw):
        return sandlot.Client(f"unix:{self.sock}", **kw)

    def stop(self, timeout=20):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        self.log.close()
        return rc

    def logs(self):
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def leftovers(self):
        """Files of sandboxes still in the data dir (storage images)."""
        storage = self.data_dir / "storage"
        return sorted(os.listdir(storage)) if storage.is_dir() else []


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_dir():
    if os.geteuid() != 0:
        pytest.skip("sandlotd needs root (uid maps, cgroups, loop devices); run the tests as root")
    if not os.access(SANDLOTD, os.X_OK):
        pytest.fail(f"not built: {SANDLOTD} (run `make` first)", pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="sandlot-py-", dir="/var/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sandlotd(base_dir):
    d = Daemon(base_dir / "main").start()
    yield d
    rc = d.stop()
    assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"
    assert not d.leftovers(), f"storage left after the session: {d.leftovers()}"


@pytest.fixture
def client(sandlotd):
    """A Client of the session's daemon; after the test no sandbox may run
    (each test destroys what it created)."""
    c = sandlotd.client()
    yield c
    left = c.list(state="running") + c.list(state="paused")
    for sb in left:
        sb.destroy(missing_ok=True)
    assert not left, f"sandboxes left running by the test: {[s.id for s in left]}"


@pytest.fixture
def sb(client):
    s = client.create(memory="256M", metadata={"test": "python-client"})
    yield s
    s.destroy(missing_ok=True)


@pytest.fixture
def fresh_modules():
    """Import sandlot's adapter modules afresh inside the test (e.g. with a
    fake framework on sys.path), and put sys.path and sys.modules back."""
    saved_path = list(sys.path)
    saved = dict(sys.modules)

    def load(*fake_dirs):
        for d in fake_dirs:
            sys.path.insert(0, str(d))
        for name in list(sys.modules):
            if name.startswith(("sandlot.langchain", "sandlot.deepagents", "sandlot.codeact",
                                "langchain_core", "deepagents")):
                del sys.modules[name]
        import importlib
        return importlib

    yield load
    sys.path[:] = saved_path
    for name in list(sys.modules):
        if name not in saved:
            del sys.modules[name]
    sys.modules.update(saved)
