#!/usr/bin/python3
"""Fast vm creates (docs/vm.md, "Fast creates"): cold create + first exec of
a vm sandbox booted, restored from a template, and handed out by the warm
pool, side by side in one run, with an ns sandbox as the baseline; and the
host memory of an idle vm sandbox made each way.

    sudo /usr/bin/python3 bench/vm-fast.py [-n 5] [--idle 5]

Three sandlotd (build/bin, or SANDLOT_TEST_BIN_DIR), each on a data dir of
its own, a small busybox erofs root (SANDLOT_VM_ROOT) and build/vm's guest:

  boot      a daemon whose vm creates boot: no template (vm sandboxes are
            not its default, so it prepares none);
  template  `--default-isolation vm`: it saves a template at start (its
            making is timed: "template made in"), and cold creates restore it;
  pool      `--pool vm:1`: a create takes the booted VM (hand-out), the
            pool refills behind it (awaited before the next round, untimed);
  ns        the baseline: an ns sandbox of the boot daemon.

Each of `-n` rounds, interleaved: POST /v1/sandboxes + POST .../exec `true`,
timed together as a client sees them, then DELETE (untimed).  Memory: one
sandbox of each vm kind, --idle seconds after its first exec, QEMU's VmRSS
and Pss (smaps_rollup).  Prints median / min / max and the load (uptime)
before and after: timings on a shared machine drift.  Needs root and
Debian's /usr/bin/python3 (stdlib only).  Exit status 0 whatever the
numbers: a measurement.
"""
import argparse
import http.client
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin")
VM_DIR = Path(os.environ.get("SANDLOT_VM_DIR") or REPO / "build" / "vm")
BOOT = 300  # bound on one create under TCG on a loaded machine

_spec = importlib.util.spec_from_file_location("vmbench", REPO / "bench" / "vm.py")
vmbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vmbench)


class Conn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Daemon:
    def __init__(self, base, name, args, env):
        self.dir = base / name
        self.dir.mkdir()
        self.sock = str(self.dir / "d.sock")
        self.data = self.dir / "data"
        self.log = open(self.dir / "sandlotd.log", "wb")
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "sandlotd"), "--listen", f"unix:{self.sock}", "--data-dir",
             str(self.data), *args], env=env, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.call("GET", "/v1/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                sys.exit(f"sandlotd {name} did not start: {(self.dir / 'sandlotd.log').read_text()}")
            time.sleep(0.02)

    def call(self, method, path, body=None, timeout=BOOT):
        c = Conn(self.sock, timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            c.close()

    def create_and_exec(self, iso):
        t = time.perf_counter()
        st, body, hdr = self.call("POST", "/v1/sandboxes", {"isolation": iso})
        if st != 201:
            sys.exit(f"create failed: {st} {body[:300]!r}")
        sid = json.loads(body)["id"]
        st, body, _ = self.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        took = time.perf_counter() - t
        if st != 200 or json.loads(body)["exit_code"] != 0:
            sys.exit(f"exec failed: {st} {body[:300]!r}")
        return sid, took, hdr.get("Sandlot-Pool")

    def delete(self, sid):
        self.call("DELETE", f"/v1/sandboxes/{sid}")

    def health(self):
        return json.loads(self.call("GET", "/v1/health")[1])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
        self.log.close()


def wait(what, cond, limit=BOOT):
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling a condition, not synchronization by time


def qemu_of(sid):
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"guest={sid}".encode() in (d / "cmdline").read_bytes().split(b"\0"):
                    return int(d.name)
            except OSError:
                pass
    return None


def row(name, xs, note=""):
    ms = [x * 1000 for x in xs]
    print(f"  {name:<9} median {statistics.median(ms):8.1f} ms   min {min(ms):8.1f}   "
          f"max {max(ms):8.1f}   (n={len(ms)}){note}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--idle", type=float, default=5)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandlotd does)")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-vmfast-", dir="/var/tmp"))
    daemons = {}
    try:
        root = vmbench.busybox_root(base)
        env = dict(os.environ, SANDLOT_VM_DIR=str(VM_DIR), SANDLOT_VM_ROOT=str(root))
        env.pop("SANDLOT_DATA_DIR", None)
        print("load before:", Path("/proc/loadavg").read_text().strip())
        t0 = time.perf_counter()
        daemons["template"] = Daemon(base, "template", ["--default-isolation", "vm"], env)
        tdir = daemons["template"].data / "vm" / "templates"
        wait("the template", lambda: list(tdir.glob("*.key")))
        made = time.perf_counter() - t0
        state = sum(p.stat().st_size for p in tdir.glob("*.state"))
        print(f"template made in {made:.1f} s after sandlotd's start; saved state "
              f"{state / 2**20:.0f} MiB")
        daemons["boot"] = Daemon(base, "boot", [], env)
        daemons["pool"] = Daemon(base, "pool", ["--pool", "vm:1"], env)

        def pool_ready():
            return daemons["pool"].health()["pool"]["vm:host"]["ready"] == 1

        kinds = {"boot": ("boot", "vm"), "template": ("template", "vm"), "pool": ("pool", "vm"),
                 "ns": ("boot", "ns")}
        times = {k: [] for k in kinds}
        hits = restores = 0
        for r in range(a.n + 1):  # round 0: warm-up, not counted
            for k, (dn, iso) in kinds.items():
                if k == "pool":
                    wait("the pool's refill", pool_ready)
                sid, took, pooled = daemons[dn].create_and_exec(iso)
                if k == "template" and r:
                    q = qemu_of(sid)
                    restores += b"-incoming" in Path(f"/proc/{q}/cmdline").read_bytes().split(b"\0")
                daemons[dn].delete(sid)
                if r:
                    times[k].append(took)
                    hits += k == "pool" and pooled == "hit"
        print("cold create + first exec (`true`), as a client of sandlotd sees them:")
        row("boot", times["boot"], "   vm, booted")
        row("template", times["template"], f"   vm, restored from the template ({restores} restores)")
        row("pool", times["pool"], f"   vm, handed out by the pool ({hits} hits)")
        row("ns", times["ns"], "   baseline")

        print(f"idle vm sandbox (default memory, {a.idle:g} s after its first exec):")
        wait("the pool's refill", pool_ready)
        held = []
        for k in ("boot", "template", "pool"):
            sid, _, _ = daemons[k].create_and_exec("vm")
            held.append((k, sid))
        time.sleep(a.idle)  # a measurement of the idle state, not a synchronization
        for k, sid in held:
            q = qemu_of(sid)
            rss = vmbench.kib(f"/proc/{q}/status", "VmRSS")
            pss = vmbench.kib(f"/proc/{q}/smaps_rollup", "Pss")
            how = "restored" if b"-incoming" in Path(f"/proc/{q}/cmdline").read_bytes().split(b"\0") \
                else "booted"
            print(f"  {k:<9} QEMU VmRSS {rss >> 10} MiB, Pss {pss >> 10} MiB ({how})")
        for k, sid in held:
            daemons[k].delete(sid)
        print("load after: ", Path("/proc/loadavg").read_text().strip())
    finally:
        for d in daemons.values():
            d.stop()
        # The boot daemon's ns sandboxes leave the storage pool mounted.
        for d in daemons.values():
            subprocess.run(["umount", str(d.data / "storage" / "mnt")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
