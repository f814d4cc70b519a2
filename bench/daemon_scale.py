#!/usr/bin/python3
"""sandlotd at scale: many live sandboxes, and create/delete latency.

Starts build/bin/sandlotd on a temporary socket and data dir (root needed),
then:
  1. creates and deletes --latency-n sandboxes one after the other and
     reports p50/p99 of each call;
  2. creates --n sandboxes with --clients concurrent clients, reports the
     time, whether create time stays flat (goal: the p50 of the last 100
     creates within 1.5x of the first 100's), the host memory they take
     (MemAvailable before and after), the daemon's RSS, threads and
     descriptors with all of them live, the time to list them, and the time
     to delete them all;
  3. stops the daemon (SIGTERM) and checks it exits 0.

    sudo /usr/bin/python3 bench/daemon_scale.py --n 1000 --clients 4

Prints the machine's load (uptime) first: timings mean little on a busy host.
"""
import argparse
import concurrent.futures as cf
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from daemon import Daemon  # noqa: E402

SMALL = {"memory": "32M", "disk": "16M", "pids": 16}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


FLAT_RATIO = 1.5


def meminfo_kib(key):
    for line in open("/proc/meminfo"):
        k, _, v = line.partition(":")
        if k == key:
            return int(v.split()[0])
    return 0


def proc_status(pid):
    out = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--latency-n", type=int, default=100)
    a = ap.parse_args()
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} CPUs")
    base = tempfile.mkdtemp(prefix="sandlot-bench-", dir="/var/tmp")
    d = Daemon(base).start(timeout=30)
    try:
        create, delete = [], []
        for _ in range(a.latency_n):
            t = time.perf_counter()
            sid = d.create(**SMALL)
            create.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert d.delete(f"/v1/sandboxes/{sid}").status == 204
            delete.append(time.perf_counter() - t)
        print(f"sequential create: p50 {pct(create, 50) * 1000:.1f} ms, "
              f"p99 {pct(create, 99) * 1000:.1f} ms, mean {statistics.mean(create) * 1000:.1f} ms")
        print(f"sequential delete: p50 {pct(delete, 50) * 1000:.1f} ms, "
              f"p99 {pct(delete, 99) * 1000:.1f} ms")

        mem_before = meminfo_kib("MemAvailable")

        def timed_create(_):
            t = time.perf_counter()
            r = d.post("/v1/sandboxes", json_body=SMALL)
            return r, time.perf_counter() - t

        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(a.clients) as ex:
            timed = list(ex.map(timed_create, range(a.n)))
        took = time.perf_counter() - t0
        results = [r for r, _ in timed]
        ids = [r.json()["id"] for r in results if r.status == 201]
        failed = len(results) - len(ids)
        # Create time must stay flat as sandboxes pile up (goal: the p50 of
        # the last 100 within 1.5x of the first 100), in submission order.
        if len(timed) >= 200:
            first = statistics.median(dt for _, dt in timed[:100]) * 1000
            last = statistics.median(dt for _, dt in timed[-100:]) * 1000
            ratio = last / first
            print(f"create p50, first 100: {first:.1f} ms, last 100: {last:.1f} ms, "
                  f"ratio {ratio:.2f} ({'meets' if ratio <= FLAT_RATIO else 'MISSES'} the goal "
                  f"of <= {FLAT_RATIO})")
        st = proc_status(d.proc.pid)
        fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        print(f"{len(ids)} live sandboxes created in {took:.1f} s ({a.clients} clients, "
              f"{took / max(1, a.n) * 1000:.1f} ms each), {failed} failed")
        print(f"daemon with {len(ids)} live: RSS {st['VmRSS']}, {st['Threads']} threads, {fds} fds")
        used = (mem_before - meminfo_kib("MemAvailable")) / 1024
        print(f"host memory taken by {len(ids)} live sandboxes (MemAvailable before - after): "
              f"{used:.0f} MiB ({used * 1024 / max(1, len(ids)):.0f} KiB each) of "
              f"{meminfo_kib('MemTotal') / 1024 / 1024:.1f} GiB")
        t = time.perf_counter()
        r = d.get("/v1/sandboxes", timeout=120)
        print(f"list: {len(r.json()['sandboxes'])} sandboxes in "
              f"{(time.perf_counter() - t) * 1000:.0f} ms ({len(r.body) // 1024} KiB)")
        t = time.perf_counter()
        with cf.ThreadPoolExecutor(a.clients) as ex:
            list(ex.map(lambda i: d.delete(f"/v1/sandboxes/{i}"), ids))
        print(f"delete all: {time.perf_counter() - t:.1f} s")
    finally:
        t = time.perf_counter()
        rc = d.stop(timeout=120)
        print(f"stop: exit {rc} in {time.perf_counter() - t:.1f} s")
        import shutil
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
