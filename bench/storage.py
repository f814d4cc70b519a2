#!/usr/bin/python3
"""Workspace storage: the former design (an ext4 image per sandbox on its own
loop device) against the storage pool (a btrfs subvolume under a quota per
sandbox, in one pool per data dir), in one run.

    make && sudo /usr/bin/python3 bench/storage.py [-n 200] [--runs 100]
         [--baseline REF | --baseline-bin DIR | --no-baseline]

1. The storage operations alone (build/bench/storage-ops, C): set-up and
   tear-down per sandbox, and a from_snapshot copy of a 64 MiB workspace,
   the two designs interleaved round by round.
2. End to end: `sandlot run -- /bin/true`, median and p90 over --runs runs,
   of this build, of the baseline build (the former design: REF, by default
   the last commit before the pool, built in a temporary worktree; or the
   binaries in --baseline-bin), and of this build with --storage tmpfs (no
   storage at all, for scale).  Runs interleaved round by round.

Prints `uptime` first: numbers on a loaded machine are noisy.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"
BASELINE_REF = "ef4ca73"  # main before the storage pool: an ext4 image per sandbox


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def build_baseline(ref, where):
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref],
                   check=True, capture_output=True)
    subprocess.run(["meson", "setup", str(where / "build")], cwd=where, check=True,
                   capture_output=True)
    subprocess.run(["ninja", "-C", str(where / "build"), "src/cli/sandlot", "src/init/sandlot-init"],
                   check=True, capture_output=True)
    bindir = where / "bin"
    bindir.mkdir()
    shutil.copy(where / "build/src/cli/sandlot", bindir)
    shutil.copy(where / "build/src/init/sandlot-init", bindir)
    return bindir


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return dt * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="rounds of the storage operations")
    ap.add_argument("--runs", type=int, default=100, help="runs of sandlot run per row")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--baseline", default=BASELINE_REF, help="git ref of the former design")
    g.add_argument("--baseline-bin", help="a directory with the former design's sandlot")
    g.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root, as sandlot run does")
    ops = BUILD / "bench" / "storage-ops"
    if not ops.exists():
        sys.exit(f"{ops} not built: run make")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    tmp = Path(tempfile.mkdtemp(prefix="sandlot-bench-storage-", dir="/var/tmp"))
    # The baseline's sandlot-init is exec'd from here by a sandbox's root,
    # an unprivileged host uid.
    tmp.chmod(0o755)
    worktree = None
    try:
        # 1. the operations
        scratch = tmp / "ops"
        scratch.mkdir()
        out = subprocess.run([str(ops), str(scratch), str(args.n)], check=True,
                             capture_output=True, text=True).stdout
        rows = {ln.split()[0]: (int(ln.split()[1]), int(ln.split()[2])) for ln in out.splitlines()}
        print(f"\nstorage operations per sandbox ({args.n} rounds; from_snapshot: 10), "
              "median / p90 in ms")
        print(f"{'':28}{'former (image+loop)':>24}{'pool (subvolume)':>22}{'ratio':>8}")
        for label, a, b in (("set-up", "image_setup", "pool_setup"),
                            ("tear-down (8 MiB written)", "image_teardown", "pool_teardown"),
                            ("from_snapshot, 64 MiB", "image_copy64", "pool_copy64")):
            (am, ap9), (bm, bp9) = rows[a], rows[b]
            print(f"{label:28}{am / 1000:>13.3f} / {ap9 / 1000:<8.3f}{bm / 1000:>11.3f} / "
                  f"{bp9 / 1000:<8.3f}{am / max(bm, 1):>7.0f}x")
        rm, rp = rows["resv_setup"]
        print(f"{'set-up, image fallocated':28}{rm / 1000:>13.3f} / {rp / 1000:<8.3f}"
              "  (what a per-sandbox image needs to be safe on a full host)")

        # 2. end to end
        bins = {"pool": BUILD / "bin"}
        if args.baseline_bin:
            bins["former"] = Path(args.baseline_bin)
        elif not args.no_baseline:
            print(f"\nbuilding the baseline {args.baseline} ...", flush=True)
            worktree = tmp / "baseline"
            bins["former"] = build_baseline(args.baseline, worktree)
        cases = [(name, [str(b / "sandlot"), "run", "--", "/bin/true"], b)
                 for name, b in bins.items()]
        cases.append(("tmpfs", [str(BUILD / "bin/sandlot"), "run", "--storage", "tmpfs", "--",
                                "/bin/true"], BUILD / "bin"))
        envs = {}
        for name, _, b in cases:
            e = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
            e["SANDLOT_DATA_DIR"] = str(tmp / f"data-{name}")
            e["SANDLOT_INIT"] = str(b / "sandlot-init")
            envs[name] = e
        times = {name: [] for name, _, _ in cases}
        for _ in range(5):  # warm-up: makes the pool, the template
            for name, argv, _ in cases:
                timed(argv, envs[name])
        for _ in range(args.runs):
            for name, argv, _ in cases:
                times[name].append(timed(argv, envs[name]))
        print(f"\nsandlot run -- /bin/true ({args.runs} runs each), ms")
        print(f"{'':10}{'median':>9}{'p90':>9}")
        for name, _, _ in cases:
            v = times[name]
            print(f"{name:10}{pct(v, 0.5):>9.2f}{pct(v, 0.9):>9.2f}")
        if "former" in times:
            print(f"pool/former median ratio {pct(times['pool'], .5) / pct(times['former'], .5):.2f}")
        print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    finally:
        for name in ("pool", "tmpfs"):
            mnt = tmp / f"data-{name}" / "storage" / "mnt"
            subprocess.run(["umount", str(mnt)], capture_output=True)
        if worktree:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
