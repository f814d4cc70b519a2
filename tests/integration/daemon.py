"""A real sandlotd for the daemon tests, and an HTTP client for it.

`Daemon(tmpdir)` starts build/bin/sandlotd on a unix socket in tmpdir with
its own data dir, waits for /v1/health, and offers small request helpers.
Use it through the `sandlotd` fixture (conftest.py), or directly when a test
needs to kill and restart the daemon.  Standard library only.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import hostscan
from conftest import BIN_DIR, sanitizer_report_of

SANDLOTD = BIN_DIR / "sandlotd"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = str(path)

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def error_code(self):
        return self.json()["error"]["code"]

    def __repr__(self):
        return f"<{self.status} {self.body[:500]!r}>"


class Daemon:
    def __init__(self, base, extra_args=(), data_dir=None, socket_path=None, env=None,
                 binary=None, prefix=()):
        self.binary = Path(binary) if binary else SANDLOTD
        self.prefix = list(prefix)  # argv that execs the rest (e.g. unshare ... sh -c 'exec "$@"')
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.sock = Path(socket_path) if socket_path else self.base / "sandlot.sock"
        self.data_dir = Path(data_dir) if data_dir else self.base / "data"
        self.extra_args = list(extra_args)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.pid = None          # of the last start, kept after it ended
        self.log_path = self.base / "sandlotd.log"
        # Run through this (e.g. nsenter --net=... for the fake internet);
        # it must exec sandlotd, so that self.proc is the daemon itself.
        self.prefix = list(prefix)

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout=10):
        hostscan.owner().add_log(self.log_path)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, str(self.binary), "--listen", f"unix:{self.sock}", "--data-dir", str(self.data_dir),
             *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandlotd exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if self.get("/v1/health", timeout=2).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"sandlotd not healthy after {timeout}s:\n{self.logs()}")

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stop the daemon; returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"sandlotd ignored {sig!r} for {timeout}s:\n{self.logs()}")
        rc = self.proc.returncode
        self.proc = None
        self.log.close()
        return rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        self.log.close()

    def log_text(self):
        """The whole log, for checks of what it says (logs() is its end, for messages)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def logs(self):
        """The end of the log, and the sanitizer report of the last run if
        it wrote one (so that an assertion on the exit status shows why)."""
        try:
            text = self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            text = ""
        report = sanitizer_report_of(self.pid) if self.pid else ""
        return text + (f"\n--- sanitizer report of sandlotd {self.pid}:\n{report}" if report else "")

    # -- requests ------------------------------------------------------------
    def conn(self, timeout=60):
        return UnixHTTPConnection(self.sock, timeout=timeout)

    def request(self, method, path, body=None, json_body=None, headers=None, timeout=60):
        h = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            c.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json_body=None, **kw):
        return self.request("POST", path, json_body=json_body, **kw)

    def put(self, path, body, **kw):
        return self.request("PUT", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def create(self, **opts):
        r = self.post("/v1/sandboxes", json_body=opts)
        assert r.status == 201, r
        return r.json()["id"]

    def exec(self, sid, command=None, argv=None, **kw):
        body = dict(kw)
        if command is not None:
            body["command"] = command
        if argv is not None:
            body["argv"] = argv
        r = self.post(f"/v1/sandboxes/{sid}/exec", json_body=body)
        assert r.status == 200, r
        return r.json()

    def stream(self, method, path, json_body=None, headers=None, timeout=60):
        """Open a streaming request; returns (connection, response) so the
        caller can read lines as they arrive (and close early)."""
        h = dict(headers or {})
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        c.request(method, path, body=body, headers=h)
        return c, c.getresponse()
