#!/usr/bin/python3
"""vm sandboxes: cold create + first exec, next to an ns sandbox; and the
workspace disk, made by mkfs per create or copied from a premade one.

    sudo /usr/bin/python3 bench/vm.py [-n 5] [--disk-rounds 10] [--disk 1G]

1. Workspace disk (what vm.c does per create, docs/vm.md): `--disk-rounds`
   rounds, interleaved, of
     mkfs:  mkfs.ext4 of a new sparse file of --disk (the flags vm.c uses);
     copy:  a sparse copy (SEEK_DATA/SEEK_HOLE + copy_file_range, as vm.c)
            of an empty ext4 of that size made once.
2. Cold create + first exec: `-n` rounds, interleaved, of
     vm:    build/bin/sandlot run --isolation vm -- true
     ns:    build/bin/sandlot run -- true            (the baseline)
   each timed around fork + exec + wait in this process.  The vm's root is
   a small erofs image made from busybox (SANDLOT_VM_ROOT), its kernel and
   initramfs build/vm (or SANDLOT_VM_DIR).  The accelerator is the one the
   library picks (TCG where /dev/kvm cannot boot a stock kernel).
3. Host memory of an idle vm sandbox (--memory, default 256M): once its
   command printed a line, after --idle seconds, QEMU's resident and
   proportional set (VmRSS, Pss of /proc/PID/smaps_rollup) and its cgroup's
   memory use.

Prints median / min / max per row and the machine's load (uptime), since
timings on a shared machine drift.  Needs root, Debian's /usr/bin/python3
(stdlib only), qemu-system-x86, erofs-utils and busybox.  Exit status 0
whatever the numbers: a measurement.
"""
import argparse
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from vmguest import busybox_root  # noqa: E402  (the tests' busybox root, shared)
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin")
VM_DIR = Path(os.environ.get("SANDLOT_VM_DIR") or REPO / "build" / "vm")
MKFS = ["/sbin/mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
        "-E", "lazy_itable_init=0,root_owner=0:0"]


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def sparse_copy(src, dst):
    with open(src, "rb") as i, open(dst, "xb") as o:
        size = os.fstat(i.fileno()).st_size
        os.ftruncate(o.fileno(), size)
        pos = 0
        while pos < size:
            try:
                data = os.lseek(i.fileno(), pos, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(i.fileno(), data, os.SEEK_HOLE)
            left, off = hole - data, data
            while left:
                n = os.copy_file_range(i.fileno(), o.fileno(), left, off, off)
                left -= n
                off += n
            pos = hole


def row(name, xs):
    ms = [x * 1000 for x in xs]
    print(f"  {name:<8} median {statistics.median(ms):8.1f} ms   min {min(ms):8.1f}   "
          f"max {max(ms):8.1f}   (n={len(ms)})")


def bench_disk(base, size, rounds):
    empty = base / "empty.ext4"
    with open(empty, "wb") as f:
        f.truncate(size)
    subprocess.run([*MKFS, str(empty)], check=True)
    mk, cp = [], []
    for i in range(rounds):
        p = base / f"m{i}.img"
        t = time.perf_counter()
        with open(p, "wb") as f:
            f.truncate(size)
        subprocess.run([*MKFS, str(p)], check=True)
        mk.append(time.perf_counter() - t)
        p.unlink()
        p = base / f"c{i}.img"
        t = time.perf_counter()
        sparse_copy(empty, p)
        cp.append(time.perf_counter() - t)
        p.unlink()
    print(f"workspace disk of {size >> 20} MiB (allocated in the empty one: "
          f"{os.stat(empty).st_blocks // 2048} MiB):")
    row("mkfs", mk)
    row("copy", cp)


def bench_create(base, n):
    env = dict(os.environ, SANDLOT_DATA_DIR=str(base / "data"), SANDLOT_VM_DIR=str(VM_DIR),
               SANDLOT_VM_ROOT=str(busybox_root(base)))
    cmds = {
        "vm": [str(BIN_DIR / "sandlot"), "run", "--isolation", "vm", "--", "true"],
        "ns": [str(BIN_DIR / "sandlot"), "run", "--", "true"],
    }
    times = {k: [] for k in cmds}
    for k, argv in cmds.items():  # warm-up: the empty disk, caches
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    for _ in range(n):
        for k, argv in cmds.items():
            t = time.perf_counter()
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
            times[k].append(time.perf_counter() - t)
    print("cold create + first exec (sandlot run ... -- true):")
    for k in cmds:
        row(k, times[k])


def qemu_of(run_pid):
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"qemu-system-x86_64"):
                continue
            p = int(d.name)
            while p > 1:  # a descendant of the run
                p = int((Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1]).split()[1])
                if p == run_pid:
                    return int(d.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def kib(path, key):
    for ln in Path(path).read_text().splitlines():
        if ln.startswith(key + ":"):
            return int(ln.split()[1])
    return 0


def bench_idle_memory(base, memory, idle):
    env = dict(os.environ, SANDLOT_DATA_DIR=str(base / "data"), SANDLOT_VM_DIR=str(VM_DIR),
               SANDLOT_VM_ROOT=str(busybox_root(base)))
    p = subprocess.Popen([str(BIN_DIR / "sandlot"), "run", "--isolation", "vm", "-m", memory,
                          "--", "sh", "-c", "echo up; sleep 600"], env=env,
                         stdout=subprocess.PIPE, start_new_session=True)
    try:
        if p.stdout.readline().strip() != b"up":
            print("idle memory: the vm sandbox did not start")
            return
        time.sleep(idle)  # a measurement of the idle state, not a synchronization
        q = qemu_of(p.pid)
        rss = kib(f"/proc/{q}/status", "VmRSS")
        pss = kib(f"/proc/{q}/smaps_rollup", "Pss")
        cg = [ln.split(":", 2)[2] for ln in Path(f"/proc/{q}/cgroup").read_text().splitlines()
              if ":memory:" in ln]
        usage = ""
        if cg:
            f = Path("/sys/fs/cgroup/memory") / cg[0].lstrip("/") / "memory.usage_in_bytes"
            usage = f", cgroup {int(f.read_text()) >> 20} MiB"
        print(f"idle vm sandbox ({memory} guest, {idle:g} s after its command started): "
              f"QEMU VmRSS {rss >> 10} MiB, Pss {pss >> 10} MiB{usage}")
    finally:
        os.killpg(p.pid, 15)
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--disk-rounds", type=int, default=10)
    ap.add_argument("--disk", default="1G")
    ap.add_argument("--memory", default="256M")
    ap.add_argument("--idle", type=float, default=5)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandlot run does)")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-vm-", dir="/var/tmp"))
    try:
        print("load before:", Path("/proc/loadavg").read_text().strip())
        bench_disk(base, parse_size(a.disk), a.disk_rounds)
        bench_create(base, a.n)
        bench_idle_memory(base, a.memory, a.idle)
        print("load after: ", Path("/proc/loadavg").read_text().strip())
    finally:
        # The ns runs' cleanup helpers may still be at work (docs/cli.md,
        # cleanup.lock), and `sandlot run` leaves the data dir's storage
        # pool mounted for the next run: wait, then unmount it.
        data_dir = base / "data"
        lock = data_dir / "cleanup.lock"
        if lock.exists():
            with open(lock) as f:
                fcntl.flock(f, fcntl.LOCK_EX)
        subprocess.run(["umount", str(data_dir / "storage" / "mnt")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
