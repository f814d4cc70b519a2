#!/usr/bin/python3
"""sandlotd pause and resume times for a 100 MiB workspace, over the unix socket.

    sudo /usr/bin/python3 bench/pause_resume.py [-n 5] [--mib 100] [--cold]

Starts build/bin/sandlotd on a temporary socket and data dir (removed at
the end), creates one sandbox (disk 512M) and fills its workspace with
--mib MiB of random data inside the sandbox: half in one file, half in
1,000 files.  Then, N rounds (default 5), each timed with
time.perf_counter() in this process:

  pause (dirty)   rewrite 10 MiB of the big file, then POST .../pause: kills
                  the sandbox and flushes its workspace to disk (syncfs of
                  the storage pool), so the round's new data is part of the
                  cost
  resume          POST .../resume: a new sandbox on the same workspace (mount,
                  namespaces, cgroup, init, change-tracking baseline scan of
                  the 1,001 files)
  first exec      the first POST .../exec after the resume (`echo`): resume
                  + first exec is the time until the agent can work again
  pause (clean)   pause again right away: nothing new to flush
  resume again    for the second pause

With --cold the page cache is dropped (echo 3 > /proc/sys/vm/drop_caches,
host-wide) before each "resume" and "first exec", so they read the
workspace from the disk.  The files' SHA-256 is checked after every resume.

Prints median / min / max per step (median of N: the figure to quote) and,
for scale, one create and one delete.  Needs root, Debian's
/usr/bin/python3 (stdlib only).  Exits 0 whatever the numbers unless the
files came back wrong.
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
from benchlib import UnixConn, request, start_daemon  # noqa: E402


def call(sock, method, path, body=None):
    """One call on a connection of its own: (status, JSON answer)."""
    c = UnixConn(sock)
    try:
        st, js, _ = request(c, method, path, body)
        return st, js
    finally:
        c.close()



def sh(sock, sid, command):
    st, r = call(sock, "POST", f"/v1/sandboxes/{sid}/exec", {"command": command})
    assert st == 200 and r["exit_code"] == 0, (st, r)
    return r["stdout"]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--mib", type=int, default=100, help="workspace size in MiB (default 100)")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before resuming")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandboxes need it)")

    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-pause-", dir="/var/tmp"))
    proc, sock = start_daemon(base)
    try:
        t_create, (st, sbx) = timed(lambda: call(sock, "POST", "/v1/sandboxes",
                                                 {"disk": "512M", "memory": "256M"}))
        assert st == 201, (st, sbx)
        sid = sbx["id"]
        half = args.mib // 2
        small_kib = (args.mib - half) * 1024 // 1000
        sh(sock, sid, f"head -c {half}M /dev/urandom > big.bin && mkdir many && "
                      f"for i in $(seq 1 1000); do head -c {small_kib}K /dev/urandom > many/f$i; "
                      f"done")
        used = int(sh(sock, sid, "du -sk /home/user | cut -f1")) // 1024
        digest_cmd = "cd /home/user && find . -type f | sort | xargs sha256sum | sha256sum"
        want = sh(sock, sid, digest_cmd)

        rows = {k: [] for k in ("pause (dirty)", "resume", "first exec", "pause (clean)",
                                "resume again")}
        for i in range(args.n):
            # 10 MiB of new data, so that every dirty pause has to flush it
            sh(sock, sid, "head -c 10M /dev/urandom | dd of=big.bin conv=notrunc status=none")
            want = sh(sock, sid, digest_cmd)
            t, (st, r) = timed(lambda: call(sock, "POST", f"/v1/sandboxes/{sid}/pause"))
            assert st == 200 and r["state"] == "paused", (st, r)
            rows["pause (dirty)"].append(t)
            if args.cold:
                drop_caches()
            t, (st, r) = timed(lambda: call(sock, "POST", f"/v1/sandboxes/{sid}/resume"))
            assert st == 200 and r["state"] == "running", (st, r)
            rows["resume"].append(t)
            if args.cold:
                drop_caches()
            t, _ = timed(lambda: sh(sock, sid, "echo hi"))
            rows["first exec"].append(t)
            got = sh(sock, sid, digest_cmd)
            if got != want:
                sys.exit(f"round {i}: the workspace came back different")
            t, (st, r) = timed(lambda: call(sock, "POST", f"/v1/sandboxes/{sid}/pause"))
            assert st == 200, (st, r)
            rows["pause (clean)"].append(t)
            t, (st, r) = timed(lambda: call(sock, "POST", f"/v1/sandboxes/{sid}/resume"))
            assert st == 200, (st, r)
            rows["resume again"].append(t)
        t_delete, (st, _) = timed(lambda: call(sock, "DELETE", f"/v1/sandboxes/{sid}"))
        assert st == 204

        print(f"workspace: {used} MiB in 1,001 files (workspace {sid}, disk 512M); "
              f"{args.n} rounds{', cold cache' if args.cold else ''}")
        print(f"{'step':<16} {'median':>9} {'min':>9} {'max':>9}")
        for k, xs in rows.items():
            print(f"{k:<16} {statistics.median(xs) * 1000:8.1f}ms {min(xs) * 1000:8.1f}ms "
                  f"{max(xs) * 1000:8.1f}ms")
        print(f"{'(create)':<16} {t_create * 1000:8.1f}ms")
        print(f"{'(delete)':<16} {t_delete * 1000:8.1f}ms")
        print("files: identical after every resume (SHA-256 of all 1,001)")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
