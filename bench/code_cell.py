#!/usr/bin/python3
"""Python cell `x += 1` in a live code context, next to cold `python3 -c pass`.

    sudo /usr/bin/python3 bench/code_cell.py [-n 500] [--warmup 20]

Starts build/bin/sandlotd on a temporary socket and data dir (removed at
the end), creates one sandbox, runs `x = 0` in its default Python context,
then N rounds (interleaved, so that load changes hit every row alike), each
timed with time.perf_counter() in this process:

  cell x += 1           POST /v1/sandboxes/{id}/code {"language": "python",
                        "code": "x += 1"}: the context keeps x between cells
  exec python3 -c pass  POST /v1/sandboxes/{id}/exec {"argv": ["python3",
                        "-c", "pass"]}: what the same step costs without a
                        context (a cold interpreter per step, in the sandbox)
  host python3 -c pass  `/usr/bin/python3 -c pass` run on the host
                        (subprocess.run), no sandbox, no HTTP: the floor of
                        a cold interpreter

All three over the same kept-alive unix-socket connection where HTTP is
involved.  At the end the context's x must equal the number of cells run
(the script exits 1 otherwise).  Prints p50 / p99 / mean per row and
whether the target (cell p50 <= 2 ms) is met.  Needs root and Debian's
/usr/bin/python3 (stdlib only).  Exit status 0 whatever the numbers.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import percentile  # noqa: E402
from pool import Daemon, call  # noqa: E402  (the same daemon wrapper)

TARGET_P50_MS = 2.0


def fmt_row(name, xs):
    ms = [x * 1000 for x in xs]
    return (f"| {name:<28} | {percentile(ms, .5):8.3f} | {percentile(ms, .99):8.3f} | "
            f"{statistics.fmean(ms):8.3f} | {len(ms):>5} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=int(os.environ.get("N", 500)))
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: sandboxes need it")

    load0 = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-code-", dir="/var/tmp"))
    d = None
    rows = {"cell": [], "exec": [], "host": []}
    cells = 0
    try:
        d = Daemon(base / "d", [])
        st, sbx, _ = call(d.conn, "POST", "/v1/sandboxes", {})
        if st != 201:
            sys.exit(f"create: {st} {sbx}")
        sid = sbx["id"]
        st, r, _ = call(d.conn, "POST", f"/v1/sandboxes/{sid}/code",
                        {"language": "python", "code": "x = 0"})
        if st != 200 or r.get("status") != "ok":
            sys.exit(f"first cell: {st} {r}")
        for i in range(args.warmup + args.n):
            t0 = time.perf_counter()
            st, r, _ = call(d.conn, "POST", f"/v1/sandboxes/{sid}/code",
                            {"language": "python", "code": "x += 1"})
            t1 = time.perf_counter()
            if st != 200 or r.get("status") != "ok":
                sys.exit(f"cell: {st} {r}")
            cells += 1
            st, r, _ = call(d.conn, "POST", f"/v1/sandboxes/{sid}/exec",
                            {"argv": ["python3", "-c", "pass"]})
            t2 = time.perf_counter()
            if st != 200 or r.get("exit_code") != 0:
                sys.exit(f"exec: {st} {r}")
            subprocess.run(["/usr/bin/python3", "-c", "pass"], check=True)
            t3 = time.perf_counter()
            if i >= args.warmup:
                rows["cell"].append(t1 - t0)
                rows["exec"].append(t2 - t1)
                rows["host"].append(t3 - t2)
        st, r, _ = call(d.conn, "POST", f"/v1/sandboxes/{sid}/code",
                        {"language": "python", "code": "x"})
        if r.get("value") != str(cells):
            print(f"the context lost state: x = {r.get('value')}, expected {cells}")
            sys.exit(1)
        call(d.conn, "DELETE", f"/v1/sandboxes/{sid}")
    finally:
        rc = d.stop() if d else None
        shutil.rmtree(base, ignore_errors=True)

    print(f"\nPython code context vs cold interpreters ({os.cpu_count()} CPUs, {args.n} rounds, "
          "unix socket, kept-alive connection)\n")
    print(f"| {'what':<28} | {'p50 ms':>8} | {'p99 ms':>8} | {'mean ms':>8} | {'n':>5} |")
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 7}|")
    print(fmt_row("cell x += 1 (context)", rows["cell"]))
    print(fmt_row("exec python3 -c pass", rows["exec"]))
    print(fmt_row("host python3 -c pass", rows["host"]))
    p50 = percentile(rows["cell"], .5) * 1000
    cold = percentile(rows["exec"], .5) * 1000
    print(f"\ncell p50 = {p50:.3f} ms (target <= {TARGET_P50_MS} ms): "
          f"{'met' if p50 <= TARGET_P50_MS else 'NOT met'}; a cold python3 in the sandbox "
          f"costs {cold / p50:.1f} x as much")
    print(f"x after the run = {cells} (state kept across every cell)")
    print(f"sandlotd exit status on SIGTERM: {rc}")
    print(f"load average (1 min) at start / end: {load0:.2f} / {os.getloadavg()[0]:.2f} "
          "(other work on the machine shows in the numbers)")


if __name__ == "__main__":
    main()
