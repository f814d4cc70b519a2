"""What the daemon benchmarks share: sandlotd's path, an HTTP connection over
its unix socket, a JSON call, starting a daemon, percentiles.  Standard
library only (run with Debian's /usr/bin/python3)."""
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin")
SANDLOTD = BIN_DIR / "sandlotd"


class UnixConn(http.client.HTTPConnection):
    """http.client over sandlotd's unix socket (kept alive between calls)."""

    def __init__(self, path, timeout=300):
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path_)
        self.sock = s


def request(conn, method, path, body=None):
    """One call with a JSON body (or none): (status, parsed JSON answer or
    None, the response for its headers)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    js = json.loads(raw) if raw and r.getheader("Content-Type", "").startswith(
        "application/json") else None
    return r.status, js, r


def start_daemon(base, extra=(), binary=None):
    """Start build/bin/sandlotd (or `binary`) on base/sandlot.sock with data in
    base/data (log: base/sandlotd.log) and wait until it answers /v1/health.
    Returns (process, socket path); exits the script if it does not come up."""
    sock = str(base / "sandlot.sock")
    log = open(base / "sandlotd.log", "wb")
    p = subprocess.Popen([str(binary or SANDLOTD), "--listen", f"unix:{sock}", "--data-dir",
                          str(base / "data"), *extra],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit(f"sandlotd exited with {p.returncode}; see {base}/sandlotd.log")
        try:
            c = UnixConn(sock, 2)
            try:
                if request(c, "GET", "/v1/health")[0] == 200:
                    return p, sock
            finally:
                c.close()
        except OSError:
            pass
        time.sleep(0.02)
    p.kill()
    sys.exit("sandlotd did not become healthy")


def percentile(xs, q):
    """The q-quantile (0..1) of xs, linearly interpolated; nan if empty."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
