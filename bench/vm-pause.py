#!/usr/bin/python3
"""Pause and resume of a vm sandbox through sandlotd, with and without its
memory, next to an ns sandbox's files-only pause (the baseline).

    sudo /usr/bin/python3 bench/vm-pause.py [-n 3] [--memory 256M] [--touch 64]

Starts build/bin/sandlotd on a temporary socket and data dir (removed at the
end), with the vm guest of build/vm (or SANDLOT_VM_DIR) and a small erofs
root made here from busybox (SANDLOT_VM_ROOT).  Creates one vm sandbox of
--memory and has its guest write --touch MiB of random data to /tmp (so that
much of its RAM is page cache that a save must write, as a working guest's
would), then N rounds, interleaved, each timed with time.perf_counter():

  vm live pause    POST .../pause {"memory": true}: init syncs and detaches,
                   QEMU saves devices and RAM to the kept workspace, QEMU
                   ends, the disk is synced
  vm live resume   POST .../resume: QEMU with -incoming defer loads the state,
                   the guest runs on, init re-attaches (clock, RNG seed)
  first exec       the first exec after it (`echo`)
  state size       the saved state's size (apparent and on disk), before the
                   resume consumes it
  vm files pause   POST .../pause {}: sync, detach, QEMU ends
  vm files resume  POST .../resume: a fresh boot on the disk (+ first exec)
  ns pause/resume  the same for an ns sandbox (its files-only pause)

Prints median / min / max per row and the machine's load (uptime).  Needs
root, Debian's /usr/bin/python3 (stdlib only), qemu-system-x86, erofs-utils
and busybox.  Exits 0 whatever the numbers unless a resumed guest lost its
process or data.
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
from benchlib import UnixConn, request, start_daemon  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from vmguest import busybox_root  # noqa: E402  (the tests' busybox root, shared)
VM_DIR = Path(os.environ.get("SANDLOT_VM_DIR") or REPO / "build" / "vm")


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def call(sock, method, path, body=None):
    c = UnixConn(sock, 600)
    try:
        st, js, _ = request(c, method, path, body)
        return st, js
    finally:
        c.close()


def ok(sock, method, path, body=None):
    st, js = call(sock, method, path, body)
    if st not in (200, 201, 204):
        sys.exit(f"{method} {path}: {st} {js}")
    return js


def sh(sock, sid, command):
    r = ok(sock, "POST", f"/v1/sandboxes/{sid}/exec", {"command": command})
    if r["exit_code"] != 0:
        sys.exit(f"{command!r} failed: {r}")
    return r["stdout"]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--memory", default="256M", help="the vm's memory (default 256M)")
    ap.add_argument("--touch", type=int, default=64,
                    help="MiB the guest writes to /tmp first (default 64)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    for f in ("vmlinux", "initramfs.cpio"):
        if not (VM_DIR / f).exists():
            sys.exit(f"{VM_DIR / f} missing: make vm")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-vmpause-"))
    proc = None
    try:
        os.environ["SANDLOT_VM_DIR"] = str(VM_DIR)
        os.environ["SANDLOT_VM_ROOT"] = str(busybox_root(base))
        proc, sock = start_daemon(base)
        vm = ok(sock, "POST", "/v1/sandboxes",
                {"isolation": "vm", "memory": parse_size(a.memory)})["id"]
        ns = ok(sock, "POST", "/v1/sandboxes", {})["id"]
        accel = ok(sock, "GET", f"/v1/sandboxes/{vm}").get("accel")
        if a.touch:
            sh(sock, vm, f"dd if=/dev/urandom of=/tmp/blob bs=1M count={a.touch} 2>/dev/null")
        pid = sh(sock, vm, "sleep 100000 >/dev/null 2>&1 & echo $!").strip()
        kept = base / "data" / "vm" / "kept" / vm
        rows = {k: [] for k in ("vm live pause", "vm live resume", "  + first exec",
                                "vm files pause", "vm files resume + first exec",
                                "ns files pause", "ns files resume + first exec")}
        sizes, disk_sizes = [], []
        for _ in range(a.n):
            t, _ = timed(lambda: ok(sock, "POST", f"/v1/sandboxes/{vm}/pause", {"memory": True}))
            rows["vm live pause"].append(t)
            st = os.stat(kept / "state")
            sizes.append(st.st_size)
            disk_sizes.append(st.st_blocks * 512)
            t, _ = timed(lambda: ok(sock, "POST", f"/v1/sandboxes/{vm}/resume", {}))
            rows["vm live resume"].append(t)
            t, out = timed(lambda: sh(sock, vm, f"echo x; cat /proc/{pid}/comm"))
            rows["  + first exec"].append(t)
            if out.split() != ["x", "sleep"]:
                sys.exit(f"the resumed guest lost its process: {out!r}")
            t, _ = timed(lambda: ok(sock, "POST", f"/v1/sandboxes/{ns}/pause", {}))
            rows["ns files pause"].append(t)
            t, _ = timed(lambda: (ok(sock, "POST", f"/v1/sandboxes/{ns}/resume", {}),
                                  sh(sock, ns, "echo x")))
            rows["ns files resume + first exec"].append(t)
        # Files only last: it ends the guest's processes.
        for _ in range(a.n):
            t, _ = timed(lambda: ok(sock, "POST", f"/v1/sandboxes/{vm}/pause", {}))
            rows["vm files pause"].append(t)
            t, _ = timed(lambda: (ok(sock, "POST", f"/v1/sandboxes/{vm}/resume", {}),
                                  sh(sock, vm, "echo x")))
            rows["vm files resume + first exec"].append(t)
        print(f"vm sandbox: {a.memory} of memory, accel {accel}, guest wrote {a.touch} MiB "
              f"to /tmp first; {a.n} rounds")
        print(f"{'':32} {'median':>10} {'min':>10} {'max':>10}")
        for k, v in rows.items():
            print(f"{k:32} {statistics.median(v) * 1000:9.0f}ms {min(v) * 1000:9.0f}ms "
                  f"{max(v) * 1000:9.0f}ms")
        print(f"{'saved state (apparent)':32} {statistics.median(sizes) / 2**20:8.1f}MiB")
        print(f"{'saved state (on disk)':32} {statistics.median(disk_sizes) / 2**20:8.1f}MiB")
        print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        for sid in (vm, ns):
            call(sock, "DELETE", f"/v1/sandboxes/{sid}")
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
