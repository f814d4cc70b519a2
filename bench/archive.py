#!/usr/bin/python3
"""Moving a paused sandbox between two daemons through a file:// archive
store (docs/fleet-move.md), beside what staying on one node costs, in one run.

    sudo /usr/bin/python3 bench/archive.py [-n 5] [--mib 64]

Starts two build/bin/sandlotd (node ids ba and bb) on temporary sockets and
data dirs sharing a temporary store (all removed at the end).  Each round
makes a sandbox on ba with --mib MiB of random data in its workspace (half
in one file, half in 256 files), pauses it, then times with
time.perf_counter() in this process:

  archive            POST .../archive on ba (tar, sha256, write to the store)
  restore + resume   POST .../resume {"from_archive": true} on bb (read,
                     sha256 check, unpack into a new workspace, claim, resume)
  first exec         the first exec on bb (sha256sum of the big file: the
                     data is checked to have come across)
and, as the baseline on ba, for the same sandbox size:
  resume (same node) a plain resume of a paused sandbox on its own node
  from_snapshot      a new sandbox from a paused one's workspace (a btrfs
                     snapshot: what a copy costs when nothing leaves the node)

Prints `uptime` first (numbers on a loaded machine are noisy), then median /
min / max per step.  Exits 0 whatever the numbers unless the data came back
wrong.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import UnixConn, request, start_daemon  # noqa: E402

FILL = ("set -e; cd /home/user; head -c {half} /dev/urandom > big; mkdir many; "
        "for i in $(seq 1 256); do head -c {small} /dev/urandom > many/$i; done; "
        "sha256sum big | cut -d' ' -f1")


def call(sock, method, path, body=None):
    c = UnixConn(sock)
    try:
        st, js, _ = request(c, method, path, body)
        return st, js
    finally:
        c.close()


def must(sock, method, path, body=None, want=200):
    st, js = call(sock, method, path, body)
    if st != want:
        sys.exit(f"{method} {path}: {st} {js}")
    return js


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    tmp = Path(tempfile.mkdtemp(prefix="sandlot-bench-archive-", dir="/var/tmp"))
    store = tmp / "store"
    store.mkdir()
    procs = []
    try:
        socks = []
        for n in ("ba", "bb"):
            (tmp / n).mkdir()
            p, s = start_daemon(tmp / n, ["--archive", f"file://{store}", "--node-id", n])
            procs.append(p)
            socks.append(s)
        a, b = socks
        half = args.mib << 19
        fill = FILL.format(half=half, small=half // 256)
        steps = {k: [] for k in ("archive", "restore + resume", "first exec",
                                 "resume (same node)", "from_snapshot")}
        for _ in range(args.n):
            sid = must(a, "POST", "/v1/sandboxes", {"disk": "512M"}, 201)["id"]
            digest = must(a, "POST", f"/v1/sandboxes/{sid}/exec", {"command": fill})["stdout"].strip()
            must(a, "POST", f"/v1/sandboxes/{sid}/pause", {})
            # Baselines on the same node first (they leave it paused).
            ms, _ = timed(lambda: must(a, "POST", f"/v1/sandboxes/{sid}/resume", {}))
            steps["resume (same node)"].append(ms)
            must(a, "POST", f"/v1/sandboxes/{sid}/pause", {})
            ms, copy = timed(lambda: must(a, "POST", "/v1/sandboxes", {"from_snapshot": sid}, 201))
            steps["from_snapshot"].append(ms)
            must(a, "DELETE", f"/v1/sandboxes/{copy['id']}", want=204)
            ms, _ = timed(lambda: must(a, "POST", f"/v1/sandboxes/{sid}/archive", {}))
            steps["archive"].append(ms)
            ms, _ = timed(lambda: must(b, "POST", f"/v1/sandboxes/{sid}/resume",
                                       {"from_archive": True}))
            steps["restore + resume"].append(ms)
            ms, r = timed(lambda: must(b, "POST", f"/v1/sandboxes/{sid}/exec",
                                       {"command": "sha256sum /home/user/big | cut -d' ' -f1"}))
            steps["first exec"].append(ms)
            if r["stdout"].strip() != digest:
                sys.exit(f"the data came back wrong: {r['stdout']!r} != {digest!r}")
            must(b, "DELETE", f"/v1/sandboxes/{sid}", want=204)
            must(a, "DELETE", f"/v1/sandboxes/{sid}", want=204)  # A's fenced copy: gone
            shutil.rmtree(store / "sandboxes" / sid, ignore_errors=True)
        print(f"{args.mib} MiB workspace, {args.n} rounds (ms)      median      min      max")
        for k, v in steps.items():
            print(f"  {k:<28} {statistics.median(v):10.1f} {min(v):8.1f} {max(v):8.1f}")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)
        subprocess.run(["umount", *[str(p) for p in tmp.glob("*/data/storage/mnt")]],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
