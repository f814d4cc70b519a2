"""A real sandlotd for the sandlot Python package's tests (the pattern of
tests/integration/daemon.py): build/bin/sandlotd on a unix socket in a
temporary directory with its own data dir, optional extra listeners."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sandlot  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
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
        """What sandboxes left in the data dir: anything in storage/ but the
        storage pool's own files, and workspaces of running sandboxes in the
        pool while it is mounted (a clean stop deletes those and unmounts
        it)."""
        storage = self.data_dir / "storage"
        if not storage.is_dir():
            return []
        left = sorted(n for n in os.listdir(storage) if n not in ("pool.img", "pool.lock", "mnt"))
        ws = storage / "mnt" / "ws"
        if ws.is_dir():
            left += sorted(f"ws/{n}" for n in os.listdir(ws))
        return left


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
