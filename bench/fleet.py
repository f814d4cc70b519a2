#!/usr/bin/python3
"""A fleet's front door against calling a node directly (docs/fleet.md).

    sudo /usr/bin/python3 bench/fleet.py [-n 60] [--burst 200]

Starts the one-machine fleet of tests/fleet/fleet.py: three sandlotd nodes
(build/bin, or SANDLOT_TEST_BIN_DIR) in network namespaces, HAProxy
(deploy/haproxy/sandlot.cfg) and sandlot-gateway in an "edge" namespace.
Every client below runs in the edge namespace, so "direct" and "proxy"
cross the same veth and bridge; "proxy" adds HAProxy and, for creates,
the gateway (placement) too.

0. one call without sandbox work, GET /v1/sandboxes/ID, --hop rounds
   (default 300) direct and through HAProxy, interleaved: the proxy hop
   alone, which the creates' own variance hides on a busy machine.

1. create + first exec, sequentially, N rounds (default 60, after 5 warm-up
   rounds), each round once direct to a node (round-robin over the three,
   kept-alive connection) and once through the edge, interleaved so that
   drift in the machine's load hits both alike.  Timed with perf_counter
   around POST /v1/sandboxes and POST .../exec {"argv": ["true"]}; the
   DELETE is not timed.  Rows: create, exec, create+exec; the overhead row
   is p50(proxy) - p50(direct).  Goal: overhead <= 1 ms.

2. a burst of B (default 200) creates at once, one thread and connection
   each: through the edge (the gateway places them), and direct, spread
   round-robin by the client over the three nodes (the baseline: perfect
   spreading at no cost).  Wall time, p50/p99 per create, failures, and
   how many landed on each node.  Each twice, in the order direct, proxy,
   proxy, direct.

Prints `uptime` with the numbers (a shared machine's load skews them).
Exit status 0 whatever the numbers: a measurement, not a test.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "fleet"))
import hostscan  # noqa: E402
from fleet import Endpoint, Fleet, NODE_PORT  # noqa: E402

BODY = {"memory": "64M", "disk": "16M"}
GOAL_MS = 1.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one_round(ep):
    """(create ms, exec ms, id) on endpoint ep."""
    t0 = time.perf_counter()
    r = ep.post("/v1/sandboxes", json_body=BODY)
    t1 = time.perf_counter()
    assert r.status == 201, r
    sid = r.json()["id"]
    r = ep.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["true"]})
    t2 = time.perf_counter()
    assert r.status == 200 and r.json()["exit_code"] == 0, r
    return (t1 - t0) * 1000, (t2 - t1) * 1000, sid


def sequential(fleet, n, warmup):
    direct = [Endpoint(fleet.edge_ns, node.ip, NODE_PORT, fleet.token) for node in fleet.nodes]
    rows = {k: {"create": [], "exec": [], "both": []} for k in ("direct", "proxy")}
    for i in range(warmup + n):
        for kind in (("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")):
            ep = direct[i % len(direct)] if kind == "direct" else fleet.edge
            c, e, sid = one_round(ep)
            # Deleted where it is, outside the timing.
            r = fleet.edge.delete(f"/v1/sandboxes/{sid}")
            assert r.status == 204, r
            if i >= warmup:
                rows[kind]["create"].append(c)
                rows[kind]["exec"].append(e)
                rows[kind]["both"].append(c + e)
    for ep in direct:
        ep.close()
    return rows


def hop(fleet, n):
    """GET /v1/sandboxes/ID (no sandbox work) direct and through HAProxy,
    interleaved: the proxy hop alone, with less of the creates' noise."""
    node = fleet.nodes[0]
    direct = Endpoint(fleet.edge_ns, node.ip, NODE_PORT, fleet.token)
    r = direct.post("/v1/sandboxes", json_body=BODY)
    assert r.status == 201, r
    sid = r.json()["id"]
    out = {"direct": [], "proxy": []}
    try:
        for i in range(n + 20):
            for kind in (("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")):
                ep = direct if kind == "direct" else fleet.edge
                t0 = time.perf_counter()
                r = ep.get(f"/v1/sandboxes/{sid}")
                dt = (time.perf_counter() - t0) * 1000
                assert r.status == 200, r
                if i >= 20:
                    out[kind].append(dt)
    finally:
        direct.delete(f"/v1/sandboxes/{sid}")
        direct.close()
    return out


def burst(fleet, b, proxy):
    direct = [Endpoint(fleet.edge_ns, node.ip, NODE_PORT, fleet.token) for node in fleet.nodes]
    lat, ids, errors = [None] * b, [None] * b, []
    go = threading.Event()

    def run(i):
        ep = fleet.edge if proxy else direct[i % len(direct)]
        conn = ep.conn(fresh=True, timeout=300)
        conn.connect()  # connected before the start: the burst is the creates
        go.wait()
        t0 = time.perf_counter()
        try:
            import json
            conn.request("POST", "/v1/sandboxes", body=json.dumps(BODY).encode(),
                         headers={"Authorization": f"Bearer {fleet.token}", "Content-Type": "application/json"})
            r = conn.getresponse()
            body = r.read()
            lat[i] = (time.perf_counter() - t0) * 1000
            if r.status == 201:
                ids[i] = json.loads(body)["id"]
            else:
                errors.append(f"{r.status} {body[:200]!r}")
        except Exception as e:  # counted, shown
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(b)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    wall = (time.perf_counter() - t0) * 1000
    made = [x for x in ids if x]
    per_node = {}
    for sid in made:
        node = re.fullmatch(r"sb-([a-z0-9]+)-.*", sid).group(1)
        per_node[node] = per_node.get(node, 0) + 1
    # Cleanup (untimed), a few at a time.
    for sid in made:
        fleet.edge.delete(f"/v1/sandboxes/{sid}", timeout=120)
    return {"wall": wall, "lat": [x for x in lat if x is not None], "errors": errors,
            "per_node": per_node, "made": len(made)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-n", type=int, default=int(os.environ.get("N", 60)))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--hop", type=int, default=300, help="rounds of the cheap call (0.)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/fleet.py needs root (network namespaces, sandboxes)")
    if not shutil.which("haproxy"):
        sys.exit("bench/fleet.py needs HAProxy (apt-get install haproxy)")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-fleet-", dir="/var/tmp"))
    hostscan.owner()
    fleet = Fleet(base / "fleet", base / "data", nodes=3)
    try:
        fleet.start()
        print(f"fleet: 3 nodes, HAProxy {subprocess.run(['haproxy', '-v'], capture_output=True, text=True).stdout.split()[2]}, "
              f"sandlotd {fleet.nodes[0].daemon.binary}")
        print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        h = hop(fleet, args.hop)
        print(f"\n0. one call without sandbox work (GET /v1/sandboxes/ID), {args.hop} rounds each (ms)")
        print(f"{'':18}{'p50':>9}{'p90':>9}{'mean':>9}")
        for kind in ("direct", "proxy"):
            xs = h[kind]
            print(f"{'get ' + kind:18}{pct(xs, 50):9.3f}{pct(xs, 90):9.3f}{statistics.mean(xs):9.3f}")
        print(f"HAProxy hop p50: {pct(h['proxy'], 50) - pct(h['direct'], 50):+.3f} ms")
        rows = sequential(fleet, args.n, args.warmup)
        print(f"\n1. create + first exec, sequential, {args.n} rounds each (ms)")
        print(f"{'':18}{'p50':>9}{'p90':>9}{'mean':>9}")
        for what in ("create", "exec", "both"):
            for kind in ("direct", "proxy"):
                xs = rows[kind][what]
                print(f"{what + ' ' + kind:18}{pct(xs, 50):9.2f}{pct(xs, 90):9.2f}{statistics.mean(xs):9.2f}")
        over = {w: pct(rows["proxy"][w], 50) - pct(rows["direct"][w], 50) for w in ("create", "exec", "both")}
        print(f"overhead p50: create {over['create']:+.2f} ms, exec {over['exec']:+.2f} ms, "
              f"create+exec {over['both']:+.2f} ms (goal <= {GOAL_MS:.1f} ms: "
              f"{'met' if over['both'] <= GOAL_MS else 'NOT met'})")
        print(f"load: {os.getloadavg()[0]:.2f}")

        print(f"\n2. burst: {args.burst} creates at once (ms)")
        print(f"{'':18}{'wall':>9}{'p50':>9}{'p99':>9}{'made':>6}{'fail':>6}  per node")
        # Twice each, in the order A B B A: the first burst on a node also
        # warms what stays warm (its storage pool, the page cache).
        for kind, proxy in (("direct (rr)", False), ("proxy", True), ("proxy", True), ("direct (rr)", False)):
            b = burst(fleet, args.burst, proxy)
            lat = b["lat"] or [0]
            print(f"{kind:18}{b['wall']:9.0f}{pct(lat, 50):9.0f}{pct(lat, 99):9.0f}{b['made']:6}"
                  f"{len(b['errors']):6}  {dict(sorted(b['per_node'].items()))}")
            for e in b["errors"][:5]:
                print(f"    {e}")
        print(f"\nuptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    finally:
        fleet.stop(check=False)
        hostscan.unmount_pools(base)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
