#!/usr/bin/python3
"""sandlotd warm pool: create from the pool + first exec `echo`, next to a cold create.

    sudo /usr/bin/python3 bench/pool.py [-n 500] [--pool 3] [--warmup 10] [--no-wait]

Starts two build/bin/sandlotd on temporary sockets and data dirs (removed at
the end): one with `--pool N` (default 3), one without.  Then, N times,
round by round so that drift in the machine's load hits both rows alike:

    timed:    POST /v1/sandboxes {}  +  POST /v1/sandboxes/{id}/exec {"argv": ["echo", "hi"]}
    untimed:  DELETE /v1/sandboxes/{id}

once on each daemon, each over its own kept-alive unix-socket connection,
timed with time.perf_counter() in this process (the exec is buffered: its
answer carries the output and the workspace change scan).

Steady state: after each pooled call (outside the timed part) the script
waits until GET /v1/health shows the pool full again, so every timed
create is a hit and measures a hand-out, not a refill (a pool sized for
the arrival rate behaves so).  The refill of the slot just taken starts
20 ms after the hand-out, as in production; the wait only makes sure it is
over before the next round.
--no-wait skips the wait (calls come faster than refills: once the pool
is drained, creates miss and the row shows that).  Every pooled create's
Sandlot-Pool header is checked and the hits/misses are counted.

Prints p50 / p99 / mean of create+exec and of each step, and whether the
target (pool p50 <= 3 ms) is met.  Needs root and Debian's /usr/bin/python3
(stdlib only).  Exit status 0 whatever the numbers: a measurement.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import SANDLOTD, UnixConn, percentile, request, start_daemon  # noqa: E402


def call(conn, method, path, body=None):
    """(status, JSON answer, Sandlot-Pool header)."""
    st, js, r = request(conn, method, path, body)
    return st, js, r.getheader("Sandlot-Pool")



TARGET_P50_MS = 3.0


class Daemon:
    def __init__(self, base, extra):
        base.mkdir(parents=True)
        self.base = base
        self.proc, self.sock = start_daemon(base, extra)
        self.conn = UnixConn(self.sock)

    def pool_ready(self):
        _, h, _ = call(self.conn, "GET", "/v1/health")
        return h.get("pool", {}).get("host", {}).get("ready", 0)

    def wait_pool(self, size, timeout=30):
        deadline = time.monotonic() + timeout
        while self.pool_ready() < size:
            if time.monotonic() > deadline:
                sys.exit(f"the pool did not refill to {size} in {timeout}s; see "
                         f"{self.base}/sandlotd.log")
            time.sleep(0.002)

    def once(self):
        """create + exec echo (timed), delete (untimed)."""
        t0 = time.perf_counter()
        st, sbx, pool = call(self.conn, "POST", "/v1/sandboxes", {})
        t1 = time.perf_counter()
        if st != 201:
            sys.exit(f"create: {st} {sbx}")
        st, r, _ = call(self.conn, "POST", f"/v1/sandboxes/{sbx['id']}/exec",
                        {"argv": ["echo", "hi"]})
        t2 = time.perf_counter()
        if st != 200 or r.get("stdout") != "hi\n":
            sys.exit(f"exec: {st} {r}")
        st, _, _ = call(self.conn, "DELETE", f"/v1/sandboxes/{sbx['id']}")
        if st != 204:
            sys.exit(f"delete: {st}")
        return (t2 - t0, t1 - t0, t2 - t1), pool

    def stop(self):
        self.conn.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def fmt_row(name, xs):
    ms = [x * 1000 for x in xs]
    return (f"| {name:<40} | {percentile(ms, .5):8.3f} | {percentile(ms, .99):8.3f} | "
            f"{statistics.fmean(ms):8.3f} | {len(ms):>5} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=int(os.environ.get("N", 500)))
    ap.add_argument("--pool", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-wait", action="store_true",
                    help="do not wait for the pool to refill between calls")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: sandboxes need it")
    if not os.access(SANDLOTD, os.X_OK):
        sys.exit(f"{SANDLOTD} not built (run make)")

    load0 = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-pool-", dir="/var/tmp"))
    pooled = cold = None
    rows = {"pool": [], "cold": []}
    outcomes = {}
    try:
        pooled = Daemon(base / "pool", ["--pool", str(args.pool)])
        cold = Daemon(base / "cold", [])
        pooled.wait_pool(args.pool)
        for i in range(args.warmup + args.n):
            for name, d in (("pool", pooled), ("cold", cold)):
                t, hdr = d.once()
                if name == "pool":
                    if i >= args.warmup:
                        outcomes[hdr] = outcomes.get(hdr, 0) + 1
                    if not args.no_wait:
                        pooled.wait_pool(args.pool)
                if i >= args.warmup:
                    rows[name].append(t)
    finally:
        rcs = [d.stop() for d in (pooled, cold) if d]
        shutil.rmtree(base, ignore_errors=True)

    print(f"\nsandlotd warm pool ({os.cpu_count()} CPUs, {args.n} calls each, unix socket, "
          f"--pool {args.pool}, {'no wait' if args.no_wait else 'pool full before each call'})\n")
    print(f"| {'what':<40} | {'p50 ms':>8} | {'p99 ms':>8} | {'mean ms':>8} | {'n':>5} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 7}|")
    for name, label in (("pool", "pool"), ("cold", "cold (no pool)")):
        xs = rows[name]
        print(fmt_row(f"{label}: create + exec echo", [x[0] for x in xs]))
        print(fmt_row("  create", [x[1] for x in xs]))
        print(fmt_row("  first exec echo", [x[2] for x in xs]))
    p50 = percentile([x[0] for x in rows["pool"]], .5) * 1000
    print(f"\nSandlot-Pool headers of the timed pooled creates: {outcomes}")
    print(f"pool create + first exec p50 = {p50:.3f} ms (target <= {TARGET_P50_MS} ms): "
          f"{'met' if p50 <= TARGET_P50_MS else 'NOT met'}")
    cold50 = percentile([x[0] for x in rows["cold"]], .5) * 1000
    print(f"cold create + first exec p50 = {cold50:.3f} ms ({cold50 / p50:.1f} x the pool's)")
    print(f"sandlotd exit statuses on SIGTERM: {rcs}")
    print(f"load average (1 min) at start / end: {load0:.2f} / {os.getloadavg()[0]:.2f} "
          "(other work on the machine shows in the numbers)")


if __name__ == "__main__":
    main()
