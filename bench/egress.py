#!/usr/bin/python3
"""Egress through sandlot against going direct, in the fake internet of the
network tests (tests/integration/fakenet.py: network namespaces, dnsmasq,
TLS/HTTP servers; nothing real is touched).  Root needed.

  1. connect latency: a new TCP connection, one HTTP request and its
     answer, N times, p50/p90 - from a sandbox with an allowlist (through
     sandlot's DNS and proxy) and directly from the "host" namespace sandlotd
     runs in (the baseline);
  2. a 100 MiB HTTPS download (curl) through sandlot and directly;
  3. POST /v1/sandboxes with an allowlist against without one (create and
     delete, interleaved, N times), p50/p90.

    sudo /usr/bin/python3 bench/egress.py [-n 200] [--mib 100] [--creates 40]

Goals (docs/network.md): connect +0.3 ms p50 at most; download at least 80 %
of direct; create with an allowlist +1 ms at most.  Prints `uptime` with the
numbers: the machine's load changes them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
import fakenet  # noqa: E402
from daemon import Daemon  # noqa: E402

CONNECT = r"""
import json, socket, sys, time
n, ip = int(sys.argv[1]), socket.gethostbyname(sys.argv[2])   # resolved once, as a client
                                    # with a DNS cache would (the sandbox's DNS budget is 100/s)
req = b"GET /echo-host HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
out = []
for i in range(n + 10):
    t0 = time.perf_counter()
    s = socket.create_connection((ip, 80))
    s.sendall(req)
    data = b""
    while not data.endswith(b"}"):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    if i >= 10:   # warm-up
        out.append((time.perf_counter() - t0) * 1000)
print(json.dumps(out))
"""


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def row(name, xs):
    return f"  {name:<28} p50 {pct(xs, .5):7.3f} ms   p90 {pct(xs, .9):7.3f} ms   (n={len(xs)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="connections per side")
    ap.add_argument("--mib", type=int, default=100, help="download size")
    ap.add_argument("--creates", type=int, default=40, help="creates per side")
    ap.add_argument("--only", choices=("connect", "download", "create"),
                    help="run one of the three")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    why = fakenet.available()
    if why:
        sys.exit(f"cannot build the fake internet: {why}")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-egress-", dir="/var/tmp"))
    net = fakenet.FakeNet(base / "net").start()
    d = None
    try:
        d = Daemon(base / "d", extra_args=["--resolver", "198.51.100.53"],
                   prefix=net.daemon_prefix()).start(timeout=30)
        host = ["nsenter", f"--net=/run/netns/{net.host_ns}"]
        r = d.post("/v1/sandboxes", json_body={"network": {"allow": ["allowed.test"]}})
        sid = r.json()["id"]
        d.put(f"/v1/sandboxes/{sid}/files?path=/home/user/ca.pem", net.ca.read_bytes())

        # 1. connect latency, interleaved in rounds of 50 so that load
        # changes hit both sides alike.
        via, direct = [], []
        for _ in range(max(1, a.n // 50) if a.only in (None, "connect") else 0):
            res = d.exec(sid, argv=["python3", "-c", CONNECT, "50", "allowed.test"],
                         timeout_ms=300000)
            if res["exit_code"] != 0:
                log = d.get(f"/v1/sandboxes/{sid}/network/log").body
                sys.exit(f"the probe failed: {res}\nnetwork log: {log!r}")
            via += json.loads(res["stdout"])
            out = subprocess.run([*host, "/usr/bin/python3", "-c", CONNECT, "50",
                                  "198.51.100.10"], capture_output=True, text=True, check=True)
            direct += json.loads(out.stdout)
        if via:
            report_connect(via, direct)
        if a.only in (None, "download"):
            download(a, d, sid, net, host)
        d.delete(f"/v1/sandboxes/{sid}")
        if a.only in (None, "create"):
            create(a, d)
        print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    finally:
        if d:
            d.stop()
        net.stop()
        subprocess.run(["rm", "-rf", str(base)])


def report_connect(via, direct):
    print("connect + one HTTP request (new connection each time):")
    print(row("direct (host namespace)", direct))
    print(row("through sandlot (allowlist)", via))
    print(f"  overhead p50: {pct(via, .5) - pct(direct, .5):+.3f} ms  (goal: +0.3 ms at most)")


def download(a, d, sid, net, host):
    size = a.mib << 20
    curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", "--cacert"]
    speeds_via, speeds_direct = [], []
    for _ in range(5):
        res = d.exec(sid, argv=curl + ["ca.pem", f"https://allowed.test/big/{size}"],
                     timeout_ms=600000)
        speeds_via.append(float(res["stdout"]) / (1 << 20))
        out = subprocess.run([*host, *curl, str(net.ca), "--resolve",
                              "allowed.test:443:198.51.100.10",
                              f"https://allowed.test/big/{size}"],
                             capture_output=True, text=True, check=True)
        speeds_direct.append(float(out.stdout) / (1 << 20))
    sv, sd = statistics.median(speeds_via), statistics.median(speeds_direct)
    print(f"{a.mib} MiB over HTTPS (curl, median of 5):")
    print(f"  direct (host namespace)      {sd:8.1f} MiB/s")
    print(f"  through sandlot (allowlist)  {sv:8.1f} MiB/s   {100 * sv / sd:.0f} % of direct "
          f"(goal: 80 % at least)")


def create(a, d):
    plain, allow = [], []
    body_allow = {"network": {"mode": "allowlist", "allow": ["allowed.test", "*.pypi.test"]}}
    for i in range(a.creates):
        for body, xs in (({}, plain), (body_allow, allow)) if i % 2 else \
                ((body_allow, allow), ({}, plain)):
            t0 = time.perf_counter()
            r = d.post("/v1/sandboxes", json_body=body)
            xs.append((time.perf_counter() - t0) * 1000)
            assert r.status == 201, r
            d.delete(f"/v1/sandboxes/{r.json()['id']}")
    print("POST /v1/sandboxes (create, then delete):")
    print(row("no network", plain))
    print(row("allowlist", allow))
    print(f"  overhead p50: {pct(allow, .5) - pct(plain, .5):+.3f} ms  (goal: +1 ms at most)")


if __name__ == "__main__":
    main()
