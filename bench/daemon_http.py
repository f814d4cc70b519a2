#!/usr/bin/python3
"""The HTTP layer's cost and what it buys: this build's sandlotd next to a
baseline build, in the same run.

    sudo /usr/bin/python3 bench/daemon_http.py --baseline DIR [-n 500] [--hostile 2000]

DIR holds a baseline sandlotd (and its sandlot-init), e.g. a build of main:

    git worktree add /var/tmp/sandlot-main main && cd /var/tmp/sandlot-main && make

Starts both daemons, each with a unix socket and a TCP listener with a
token, on temporary data dirs (removed at the end), and measures with
time.perf_counter() in this process, alternating between the two daemons
call by call so that the machine's load hits both rows alike:

1. the request path, N rounds (default 500) after a warm-up:
   GET /v1/health on a kept-alive unix connection, on a new unix connection
   and on a new TCP connection (with the token), and POST .../exec
   {"argv": ["true"]} on a kept-alive connection in one live sandbox;
2. the same TCP health call and a create + exec + delete over TCP while
   --hostile connections (default 2000) trickle half requests at each
   daemon, with each daemon's thread count.

Prints p50 / p99 per row and daemon, the ratio of the p50s, and the load
average.  Exit status 0 whatever the numbers: a measurement, not a test.
"""
import argparse
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import SANDLOTD, UnixConn, percentile, request, start_daemon  # noqa: E402

TOKEN = "bench-http-token-" + os.urandom(8).hex()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Side:
    def __init__(self, name, binary, base):
        self.name = name
        base.mkdir()
        tf = base / "token"
        tf.write_text(TOKEN + "\n")
        os.chmod(tf, 0o600)
        self.port = free_port()
        env_init = Path(binary).parent / "sandlot-init"
        if env_init.exists():
            os.environ["SANDLOT_INIT"] = str(env_init)
        self.proc, self.sock = start_daemon(
            base, ["--listen", f"tcp:127.0.0.1:{self.port}", "--token-file", str(tf)], binary)
        os.environ.pop("SANDLOT_INIT", None)
        self.keep = UnixConn(self.sock)
        st, sbx, _ = request(self.keep, "POST", "/v1/sandboxes", {})
        assert st == 201, (st, sbx)
        self.sid = sbx["id"]
        self.rows = {}

    def tcp(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = json.dumps(body).encode() if body is not None else None
        h = {"Authorization": f"Bearer {TOKEN}"}
        if data is not None:
            h["Content-Type"] = "application/json"
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
        finally:
            c.close()

    def calls(self):
        def health_keep():
            assert request(self.keep, "GET", "/v1/health")[0] == 200

        def health_new():
            c = UnixConn(self.sock)
            assert request(c, "GET", "/v1/health")[0] == 200
            c.close()

        def health_tcp():
            assert self.tcp("GET", "/v1/health")[0] == 200

        def exec_keep():
            st, r, _ = request(self.keep, "POST", f"/v1/sandboxes/{self.sid}/exec",
                               {"argv": ["true"]})
            assert st == 200 and r["exit_code"] == 0, (st, r)
        return {"health, kept-alive unix": health_keep, "health, new unix conn": health_new,
                "health, new TCP conn": health_tcp, "exec true, kept-alive unix": exec_keep}

    def cycle_tcp(self):
        st, sbx = self.tcp("POST", "/v1/sandboxes", {})
        assert st == 201, (st, sbx)
        st, r = self.tcp("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"argv": ["echo", "hi"]})
        assert st == 200, (st, r)
        assert self.tcp("DELETE", f"/v1/sandboxes/{sbx['id']}")[0] == 204

    def threads(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        return -1

    def stop(self):
        try:
            request(self.keep, "DELETE", f"/v1/sandboxes/{self.sid}")
        except OSError:
            pass
        self.keep.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            return self.proc.wait()


def hostile(port, n):
    socks = []
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    stop = threading.Event()

    def trickle():
        first = True
        while not stop.is_set():
            for i, s in enumerate(socks):
                try:
                    s.send(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-Slow: " if first else b"a")
                except OSError:
                    pass
            first = False
            stop.wait(1.0)
    t = threading.Thread(target=trickle, daemon=True)
    t.start()

    def done():
        stop.set()
        t.join(5)
        for s in socks:
            s.close()
    return done


def timed(fn, out):
    t0 = time.perf_counter()
    try:
        fn()
        out.append(time.perf_counter() - t0)
    except Exception:  # noqa: BLE001 - a failure is a row of its own
        out.append(float("inf"))


def table(title, sides, rows):
    print(f"\n{title}   (load {os.getloadavg()[0]:.2f})")
    print(f"| {'':32} | {'daemon':8} | {'p50 ms':>8} | {'p99 ms':>8} | {'failed':>6} | {'p50 vs baseline':>15} |")
    print(f"|{'-' * 34}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 17}|")
    for row in rows:
        base = None
        for side in sides:
            xs = side.rows.get(row, [])
            ok = [x for x in xs if x != float("inf")]
            p50 = percentile(ok, 0.5) * 1000
            p99 = percentile(ok, 0.99) * 1000
            if side.name == "baseline":
                base = p50
            ratio = f"{p50 / base:.2f} x" if base and side.name != "baseline" else "-"
            print(f"| {row:32} | {side.name:8} | {p50:8.3f} | {p99:8.3f} | "
                  f"{len(xs) - len(ok):6} | {ratio:>15} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="directory with the baseline sandlotd")
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--hostile", type=int, default=2000)
    ap.add_argument("--cycles", type=int, default=20)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandboxes)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * a.hostile + 1000
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))
    tmp = Path(tempfile.mkdtemp(prefix="sandlot-bench-http-", dir="/var/tmp"))
    sides = []
    try:
        sides = [Side("baseline", Path(a.baseline) / "sandlotd", tmp / "baseline"),
                 Side("this", SANDLOTD, tmp / "this")]
        fns = [s.calls() for s in sides]
        for _ in range(20):
            for f in fns:
                for fn in f.values():
                    fn()
        for _ in range(a.n):
            for side, f in zip(sides, fns):
                for name, fn in f.items():
                    timed(fn, side.rows.setdefault(name, []))
        print(f"uptime: {os.popen('uptime').read().strip()}")
        table(f"1. request path ({a.n} rounds, interleaved)", sides, list(fns[0]))

        stops = [hostile(s.port, a.hostile) for s in sides]
        peak = {s.name: s.threads() for s in sides}
        for _ in range(a.cycles):
            for side in sides:
                timed(lambda: side.tcp("GET", "/v1/health"),
                      side.rows.setdefault("health, TCP, under attack", []))
                timed(side.cycle_tcp, side.rows.setdefault("create+exec+delete, TCP, attack", []))
                peak[side.name] = max(peak[side.name], side.threads())
        for stop in stops:
            stop()
        table(f"2. with {a.hostile} trickling connections on each daemon ({a.cycles} rounds)",
              sides, ["health, TCP, under attack", "create+exec+delete, TCP, attack"])
        print("\nthreads at the peak: " + ", ".join(f"{k} {v}" for k, v in peak.items()))
    finally:
        for s in sides:
            rc = s.stop()
            print(f"{s.name} sandlotd exit status on SIGTERM: {rc}")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
