#!/usr/bin/python3
"""Start-up time and idle memory of `sandlot run`, next to bubblewrap.

    sudo /usr/bin/python3 bench/startup.py [-n 200] [--warmup 10]

Times N sequential runs each (interleaved round by round, so drift in the
machine's load hits all three alike) of

    sandlot   build/bin/sandlot run -- /bin/true
    sl-tmpfs  build/bin/sandlot run --storage tmpfs -- /bin/true
    sl-image  build/bin/sandlot run --image minimal -- /bin/true
    sl-img-tmpfs  the same with --storage tmpfs
    base      with --baseline DIR: DIR/sandlot run -- /bin/true (another build,
              e.g. of main, with its own sandlot-init next to it)
    base-tmpfs  the same with --storage tmpfs
    bwrap     bwrap --unshare-all --die-with-parent --ro-bind /usr /usr ...
              --proc /proc --dev /dev --tmpfs /tmp /bin/true
    bare      /bin/true

and prints median / p90 / min / mean per command and the sandlot/bwrap ratio
of the medians (target <= 0.7), and with --baseline the sandlot/base ratios.  The sl-image rows run on a built image
(images/minimal.recipe, built first into the benchmark's data dir with
`sandlot image build`; --no-image skips them): a sandbox on a built image
binds the image read-only instead of copying it, so it should start as fast
as one on the host's /usr.  Each run is timed from the parent with
time.perf_counter() around fork+exec+wait, so the same launcher overhead is
in every row (the "bare" row shows how much that is).

Then it measures the idle memory of a sandbox running `sleep`: the PSS
(/proc/PID/smaps_rollup) of every host process of the sandbox — its
sandlot-init and the sleep — summed (target <= 2 MB), and separately the
sandlot CLI process that hosts the sandbox.

Uses its own temporary SANDLOT_DATA_DIR (removed at the end); needs root.
Exit status 0 whatever the numbers: this is a measurement, not a test.
"""
import argparse
import fcntl
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO, percentile  # noqa: E402
SANDLOT = REPO / "build" / "bin" / "sandlot"
BWRAP_ARGS = [
    "--unshare-all", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--ro-bind", "/lib", "/lib", "--ro-bind", "/lib64", "/lib64",
    "--ro-bind", "/bin", "/bin", "--ro-bind", "/etc", "/etc",
    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true",
]
RATIO_TARGET = 0.7
IDLE_PSS_TARGET_KB = 2048


def time_once(argv, env):
    t0 = time.perf_counter()
    rc = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    dt = time.perf_counter() - t0
    return dt, rc


def bench_startup(cmds, n, warmup, env):
    times = {name: [] for name in cmds}
    failures = {name: 0 for name in cmds}
    for _ in range(warmup):
        for name, argv in cmds.items():
            time_once(argv, env)
    for _ in range(n):
        for name, argv in cmds.items():
            dt, rc = time_once(argv, env)
            if rc != 0:
                failures[name] += 1
            times[name].append(dt * 1000)
    return times, failures


# ---- where the time goes ------------------------------------------------------

def bench_phases(argv, n, env):
    """Median time of each phase libsandlot reports with SANDLOT_TRACE set
    (src/common/util.c), over n runs of argv: what bench/README.md's table
    of where the time goes is made from."""
    env = dict(env, SANDLOT_TRACE="1")
    phases = {}
    walls = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env)
        walls.append((time.perf_counter() - t0) * 1000)
        for ln in r.stderr.decode(errors="replace").splitlines():
            if ln.startswith("sandlot-trace:"):
                name, _, rest = ln[len("sandlot-trace:"):].rpartition(" ")
                name = name.strip().rsplit(None, 1)
                if len(name) == 2:
                    phases.setdefault(name[0].strip(), []).append(float(name[1]))
    return phases, walls


# ---- idle memory ------------------------------------------------------------

def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return []


def ppid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("PPid:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for ln in f:
                if ln.startswith("Pss:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return None


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return None


def descendants(root):
    kids = {}
    for p in all_pids():
        kids.setdefault(ppid(p), []).append(p)
    out, stack = [], [root]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


def bench_idle_memory(env, settle):
    tag = f"1000.{uuid.uuid4().int % 10**9}"
    cli = subprocess.Popen([str(SANDLOT), "run", "--", "sleep", tag], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        sleep_pid = None
        while time.monotonic() < deadline and sleep_pid is None:
            for p in all_pids():
                if cmdline(p) == [b"sleep", tag.encode()]:
                    sleep_pid = p
                    break
            else:
                time.sleep(0.02)
        if sleep_pid is None:
            cli.kill()
            err = cli.communicate()[1].decode(errors="replace")
            print(f"idle memory: the sandbox's sleep never appeared ({err.strip()})")
            return None
        time.sleep(settle)
        init = ppid(sleep_pid)
        procs = descendants(init)
        rows = []
        for p in procs:
            name = os.path.basename(cmdline(p)[0].decode(errors="replace")) if cmdline(p) else "?"
            rows.append((p, name, pss_kb(p), rss_kb(p)))
        cli_pss, cli_rss = pss_kb(cli.pid), rss_kb(cli.pid)
        cg_usage = None
        try:
            with open(f"/proc/{init}/cgroup") as f:
                for ln in f:
                    parts = ln.strip().split(":", 2)
                    if parts[1] == "memory":
                        path = f"/sys/fs/cgroup/memory{parts[2]}/memory.usage_in_bytes"
                        cg_usage = int(open(path).read()) // 1024
                    elif parts[1] == "" and cg_usage is None:
                        path = f"/sys/fs/cgroup{parts[2]}/memory.current"
                        if os.path.exists(path):
                            cg_usage = int(open(path).read()) // 1024
        except (OSError, ValueError, IndexError):
            pass
        return rows, (cli.pid, cli_pss, cli_rss), cg_usage
    finally:
        try:
            os.killpg(cli.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            cli.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()


def main():
    global SANDLOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=int(os.environ.get("N", 200)),
                    help="timed runs per command (default 200, or $N)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs per command first")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds to let the idle sandbox settle before measuring")
    ap.add_argument("--sandlot", default=str(SANDLOT),
                    help="sandlot binary (default build/bin/sandlot; sandlot-init next to it)")
    ap.add_argument("--no-bwrap", action="store_true", help="skip bubblewrap")
    ap.add_argument("--baseline", metavar="DIR",
                    help="also time DIR/sandlot (a baseline build, sandlot-init next to it) "
                         "in the same rounds, on the same data dir")
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="also run the sandlot and sl-tmpfs rows N times with SANDLOT_TRACE "
                         "and print the median of each phase (where the time goes)")
    ap.add_argument("--no-memory", action="store_true", help="skip the idle memory measurement")
    ap.add_argument("--no-image", action="store_true",
                    help="skip the rows on a built image (no image build)")
    ap.add_argument("--recipe", default=str(REPO / "images" / "minimal.recipe"),
                    help="recipe of the built image rows (default images/minimal.recipe)")
    args = ap.parse_args()
    SANDLOT = Path(args.sandlot)

    if os.geteuid() != 0:
        sys.exit("bench/startup.py: sandlot run needs root")
    if not os.access(SANDLOT, os.X_OK):
        sys.exit(f"bench/startup.py: {SANDLOT} not built (run `make`)")

    data_dir = tempfile.mkdtemp(prefix="sandlot-bench-", dir="/var/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
    env["SANDLOT_DATA_DIR"] = data_dir
    try:
        cmds = {"sandlot": [str(SANDLOT), "run", "--", "/bin/true"],
                # the same with the workspace on tmpfs instead of in the storage pool
                "sl-tmpfs": [str(SANDLOT), "run", "--storage", "tmpfs", "--", "/bin/true"]}
        if args.baseline:
            base = Path(args.baseline) / "sandlot"
            if not os.access(base, os.X_OK):
                sys.exit(f"bench/startup.py: no {base}")
            cmds["base"] = [str(base), "run", "--", "/bin/true"]
            cmds["base-tmpfs"] = [str(base), "run", "--storage", "tmpfs", "--", "/bin/true"]
        if not args.no_image:
            t0 = time.monotonic()
            r = subprocess.run([str(SANDLOT), "image", "build", "-q", "--name", "bench",
                                args.recipe], stdin=subprocess.DEVNULL, capture_output=True,
                               env=env)
            if r.returncode == 0:
                print(f"built image \"bench\" from {args.recipe} in "
                      f"{time.monotonic() - t0:.1f}s")
                cmds["sl-image"] = [str(SANDLOT), "run", "--image", "bench", "--", "/bin/true"]
                cmds["sl-img-tmpfs"] = [str(SANDLOT), "run", "--image", "bench", "--storage",
                                        "tmpfs", "--", "/bin/true"]
            else:
                print(f"image build failed (no sl-image rows): "
                      f"{r.stderr.decode(errors='replace')[-500:]}")
        bwrap = shutil.which("bwrap")
        if not args.no_bwrap:
            if bwrap:
                cmds["bwrap"] = [bwrap, *BWRAP_ARGS]
            else:
                print("bwrap not installed (apt-get install bubblewrap): no comparison")
        cmds["bare"] = ["/bin/true"]

        # One checked run each, so a broken command is not timed 200 times.
        for name, argv in cmds.items():
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env)
            if r.returncode != 0:
                print(f"{name} fails (exit {r.returncode}): {r.stderr.decode(errors='replace').strip()}")

        print(f"start-up: {args.n} sequential runs each, {args.warmup} warm-up runs, "
              f"{os.cpu_count()} CPUs, kernel {os.uname().release}, load average "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        times, failures = bench_startup(cmds, args.n, args.warmup, env)
        print(f"{'':12} {'median':>9} {'p90':>9} {'min':>9} {'mean':>9} {'failed':>7}")
        for name, ts in times.items():
            print(f"{name:12} {statistics.median(ts):8.2f}ms {percentile(ts, 0.9):8.2f}ms "
                  f"{min(ts):8.2f}ms {statistics.fmean(ts):8.2f}ms {failures[name]:7d}")
        if "base" in times:
            for row, brow in (("sandlot", "base"), ("sl-tmpfs", "base-tmpfs")):
                r50 = statistics.median(times[row]) / statistics.median(times[brow])
                r90 = percentile(times[row], 0.9) / percentile(times[brow], 0.9)
                print(f"{row}/{brow}: median {r50:.3f}, p90 {r90:.3f} (baseline {args.baseline})")
        if "bwrap" in times:
            ratio = statistics.median(times["sandlot"]) / statistics.median(times["bwrap"])
            p90r = percentile(times["sandlot"], 0.9) / percentile(times["bwrap"], 0.9)
            verdict = "meets" if ratio <= RATIO_TARGET else "MISSES"
            print(f"sandlot/bwrap: median {ratio:.2f}, p90 {p90r:.2f} "
                  f"({verdict} the target of <= {RATIO_TARGET})")
            tr = statistics.median(times["sl-tmpfs"]) / statistics.median(times["bwrap"])
            print(f"sandlot --storage tmpfs/bwrap: median {tr:.2f}")

        if args.phases:
            for row in ("sandlot", "sl-tmpfs"):
                phases, walls = bench_phases(cmds[row], args.phases, env)
                print(f"\nwhere the time goes, {row} (median of {args.phases} runs with "
                      f"SANDLOT_TRACE; each phase since the previous one):")
                for name, ts in phases.items():
                    print(f"  {name:18} {statistics.median(ts):7.3f} ms")
                print(f"  {'(wall, all)':18} {statistics.median(walls):7.3f} ms")

        if not args.no_memory:
            print()
            res = bench_idle_memory(env, args.settle)
            if res:
                rows, (cli_pid, cli_pss, cli_rss), cg_usage = res
                print("idle memory of a sandbox running `sleep` (host processes of the sandbox):")
                total = 0
                for pid, name, pss, rss in rows:
                    total += pss or 0
                    print(f"  {name:14} pid {pid:<8} PSS {pss if pss is not None else '?':>6} KiB"
                          f"   RSS {rss if rss is not None else '?':>6} KiB")
                verdict = "meets" if total <= IDLE_PSS_TARGET_KB else "MISSES"
                print(f"  {'sandbox total':14} {'':12} PSS {total:>6} KiB   "
                      f"({verdict} the target of <= {IDLE_PSS_TARGET_KB} KiB)")
                print(f"  {'sandlot CLI':14} pid {cli_pid:<8} PSS {cli_pss if cli_pss is not None else '?':>6} KiB"
                      f"   RSS {cli_rss if cli_rss is not None else '?':>6} KiB   (host side, not counted)")
                if cg_usage is not None:
                    print(f"  cgroup memory usage (incl. page cache, kernel memory): {cg_usage} KiB")
    finally:
        # The runs' cleanup helpers may still be tearing the last sandboxes
        # down: wait for them (docs/cli.md, cleanup.lock).  `sandlot run`
        # leaves the data dir's storage pool mounted for the next run:
        # unmount it then.
        lock = os.path.join(data_dir, "cleanup.lock")
        if os.path.exists(lock):
            with open(lock) as f:
                fcntl.flock(f, fcntl.LOCK_EX)
        # And the network namespaces they left ready for the next run
        # (sandlot drain; a baseline build without the verb just fails).
        subprocess.run([str(SANDLOT), "drain"], env=dict(os.environ, SANDLOT_DATA_DIR=data_dir),
                       capture_output=True)
        subprocess.run(["umount", os.path.join(data_dir, "storage", "mnt")], capture_output=True)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
