"""A fleet on one machine: sandlotd nodes in network namespaces, HAProxy
(deploy/haproxy/sandlot.cfg) and sandlot-gateway in an "edge" namespace
(fleet.py).  Every call goes through the edge, as a client's would; the
nodes are also asked directly, over their unix sockets, to see where a
sandbox really is.

    /usr/bin/python3 -m pytest -q tests/fleet        (root; make first)
"""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from fleet import Fleet, wait_for

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="HAProxy is not installed (Makefile TEST_DEPS: haproxy)")

SMALL = {"memory": "64M", "disk": "16M"}


def make_fleet(session_dirs, tmp_path_factory, name, **kw):
    base = tmp_path_factory.mktemp(name, numbered=True)
    return Fleet(base, session_dirs["data_dir"] / "fleet" / base.name, **kw).start()


@pytest.fixture(scope="module")
def fleet(session_dirs, tmp_path_factory):
    """Three nodes, shared by the tests that put every node back as it was."""
    f = make_fleet(session_dirs, tmp_path_factory, "fleet",
                   node_args={i: ["--e2b-domain", "fleet.test"] for i in (1, 2, 3)})
    yield f
    f.stop()


def create(ep, **opts):
    r = ep.post("/v1/sandboxes", json_body={**SMALL, **opts})
    assert r.status == 201, r
    return r.json()["id"]


def node_in(sid):
    m = re.fullmatch(r"sb-([a-z0-9]+)-[a-z2-7]+", sid)
    assert m, sid
    return m.group(1)


def exec_ok(ep, sid, command):
    r = ep.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": command})
    assert r.status == 200, r
    assert r.json()["exit_code"] == 0, r
    return r.json()["stdout"]


def delete_all(fleet, sids):
    for sid in sids:
        n = fleet.node(node_in(sid))
        if n.daemon.proc is not None:
            n.daemon.delete(f"/v1/sandboxes/{sid}")


# ---- placement -------------------------------------------------------------------

def test_creates_spread_by_capacity(session_dirs, tmp_path_factory):
    """Equal nodes share the creates; a node with more room gets more."""
    f = make_fleet(session_dirs, tmp_path_factory, "spread",
                   node_args={1: ["--max-sandboxes", "6"], 2: ["--max-sandboxes", "6"],
                              3: ["--max-sandboxes", "18"]})
    sids = []
    try:
        for _ in range(12):
            r = f.edge.post("/v1/sandboxes", json_body=SMALL)
            assert r.status == 201, r
            sid = r.json()["id"]
            sids.append(sid)
            # The gateway says where it put it, and the id says the same.
            assert r.headers["sandlot-node"] == node_in(sid)
        count = {n.name: 0 for n in f.nodes}
        for sid in sids:
            assert f.node_of(sid) == [node_in(sid)]
            count[node_in(sid)] += 1
        # Best-of-3 over free fractions: n3 (18 slots) takes the most; n1
        # and n2 (6 each) stay within a create of each other.
        assert count["n3"] > count["n1"] and count["n3"] > count["n2"], count
        assert abs(count["n1"] - count["n2"]) <= 1, count
        assert count["n1"] <= 6 and count["n2"] <= 6, count
        # The fleet-wide list has them all, and no node is unreachable.
        r = f.edge.get("/v1/sandboxes")
        assert r.status == 200, r
        listed = {s["id"] for s in r.json()["sandboxes"]}
        assert set(sids) <= listed
        assert r.json()["unreachable_nodes"] == []
    finally:
        delete_all(f, sids)
        f.stop()


def test_a_full_node_is_refused_and_the_create_retried_elsewhere(session_dirs, tmp_path_factory):
    """n2 is full, but the gateway does not know yet (it polls once a
    minute here): its create there gets 503 node_full before anything is
    allocated, and the gateway places it on another node."""
    f = make_fleet(session_dirs, tmp_path_factory, "full",
                   node_args={2: ["--max-sandboxes", "1"]},
                   gateway_args=["--poll-interval", "60000"])
    sids = []
    try:
        n2 = f.node("n2")
        r = n2.daemon.post("/v1/sandboxes", json_body=SMALL)
        assert r.status == 201, r
        filler = r.json()["id"]
        # Directly, the full node says so, with the code the gateway retries on.
        r = n2.http.post("/v1/sandboxes", json_body=SMALL)
        assert r.status == 503 and r.error_code() == "node_full", r
        for _ in range(5):
            sids.append(create(f.edge))
        assert all(node_in(s) != "n2" for s in sids), sids
        listed = [s["id"] for s in n2.daemon.get("/v1/sandboxes").json()["sandboxes"]
                  if s["state"] == "running"]
        assert listed == [filler]
        log = f.gateway_log_path.read_text()
        assert re.search(r"event=create_retry node=n2 reason=\"503\"", log), log[-2000:]
        sids.append(filler)
    finally:
        delete_all(f, sids)
        f.stop()


def test_a_draining_node_gets_no_creates(fleet):
    """POST /v1/node/drain on n1: the gateway sees it draining at its next
    poll and places nothing there; its sandboxes still answer."""
    n1 = fleet.node("n1")
    kept = create(n1.daemon)
    made = []
    try:
        r = n1.daemon.post("/v1/node/drain", json_body={"draining": True})
        assert r.status == 200, r
        fleet.wait_nodes(lambda ns: {x["node_id"]: x["state"] for x in ns}["n1"] == "draining", "n1 draining")
        for _ in range(6):
            sid = create(fleet.edge)
            made.append(sid)
            assert node_in(sid) != "n1", made
        assert exec_ok(fleet.edge, kept, "echo draining-but-here") == "draining-but-here\n"
    finally:
        n1.daemon.post("/v1/node/drain", json_body={"draining": False})
        fleet.wait_nodes(lambda ns: {x["node_id"]: x["state"] for x in ns}["n1"] == "ready", "n1 ready")
        delete_all(fleet, [kept] + made)


def test_concurrent_creates_fill_the_fleet_exactly(session_dirs, tmp_path_factory):
    """30 creates at once through the edge onto three nodes of 6 slots each:
    every slot is used (a create refused by a full node is retried on
    another), none is used twice, and the rest get 503 no_capacity."""
    f = make_fleet(session_dirs, tmp_path_factory, "burst",
                   node_args={i: ["--max-sandboxes", "6"] for i in (1, 2, 3)})
    results = [None] * 30
    try:
        def one(i):
            try:
                results[i] = f.edge.request("POST", "/v1/sandboxes", json_body=SMALL, fresh=True, timeout=300)
            except Exception as e:  # reported below
                results[i] = e
        threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [r for r in results if not hasattr(r, "status") or r.status not in (201, 503)]
        assert not bad, bad
        made = [r.json()["id"] for r in results if r.status == 201]
        refused = [r for r in results if r.status == 503]
        assert all(r.error_code() == "no_capacity" for r in refused), refused
        per_node = {n.name: [s["id"] for s in n.daemon.get("/v1/sandboxes").json()["sandboxes"]]
                    for n in f.nodes}
        assert {k: len(v) for k, v in per_node.items()} == {"n1": 6, "n2": 6, "n3": 6}, per_node
        assert sorted(made) == sorted(sum(per_node.values(), []))
        assert len(refused) == 12
    finally:
        delete_all(f, [r.json()["id"] for r in results if hasattr(r, "status") and r.status == 201])
        f.stop()


def test_no_node_can_take_it(session_dirs, tmp_path_factory):
    f = make_fleet(session_dirs, tmp_path_factory, "none", nodes=2,
                   node_args={1: ["--max-sandboxes", "1"], 2: ["--max-sandboxes", "1"]})
    sids = []
    try:
        sids = [create(f.edge), create(f.edge)]
        assert sorted(node_in(s) for s in sids) == ["n1", "n2"]
        f.wait_nodes(lambda ns: all(x["state"] == "full" for x in ns), "both nodes full")
        r = f.edge.post("/v1/sandboxes", json_body=SMALL)
        assert r.status == 503, r
        assert r.error_code() == "no_capacity", r
        assert "n1: full" in r.json()["error"]["message"] and "n2: full" in r.json()["error"]["message"], r
        assert r.headers.get("retry-after"), r.headers
    finally:
        delete_all(f, sids)
        f.stop()


# ---- routing -----------------------------------------------------------------------

def test_every_route_reaches_the_right_node(fleet):
    """A sandbox on each node (made on that node directly); every call
    through the edge must reach its node: a misrouted one would get 404
    from a node that does not have it."""
    sids = []
    try:
        for n in fleet.nodes:
            r = n.daemon.post("/v1/sandboxes", json_body=SMALL)
            assert r.status == 201, r
            sids.append(r.json()["id"])
        for n, sid in zip(fleet.nodes, sids):
            assert node_in(sid) == n.name
            ep = fleet.edge
            assert ep.get(f"/v1/sandboxes/{sid}").json()["id"] == sid
            assert exec_ok(ep, sid, f"echo {n.name} > /tmp/who; cat /tmp/who") == f"{n.name}\n"
            r = ep.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/up.txt", body=b"uploaded " + n.name.encode())
            assert r.status in (200, 201, 204), r
            r = ep.get(f"/v1/sandboxes/{sid}/files?path=/tmp/up.txt")
            assert (r.status, r.body) == (200, b"uploaded " + n.name.encode()), r
            r = ep.get(f"/v1/sandboxes/{sid}/execs")
            assert r.status == 200, r
            # The node itself saw those calls.
            assert n.daemon.get(f"/v1/sandboxes/{sid}/files?path=/tmp/who").body == f"{n.name}\n".encode()
        # Kept-alive client connections switch nodes call by call.
        for _ in range(2):
            for n, sid in zip(fleet.nodes, sids):
                assert exec_ok(fleet.edge, sid, "cat /tmp/who") == f"{n.name}\n"
        for sid in sids:
            assert fleet.edge.delete(f"/v1/sandboxes/{sid}").status == 204
        for n, sid in zip(fleet.nodes, sids):
            assert n.daemon.get(f"/v1/sandboxes/{sid}").json()["state"] == "deleted"
    finally:
        delete_all(fleet, sids)


def test_ids_of_no_node(fleet):
    """An id whose node is not in the fleet, or a single-node id: 404
    unknown_node, from HAProxy, without bothering a node."""
    for sid in ("sb-n9-" + "a" * 23, "sb-" + "b" * 26):
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert r.status == 404, r
        assert r.error_code() == "unknown_node", r


def test_e2b_api_through_the_front_door(fleet):
    """E2B's control plane (create and list through the gateway, the rest
    by the id in the path) and envd's calls (by E2b-Sandbox-Id), and a
    sandbox's port by its host name, all through the edge."""
    key = {"X-API-KEY": fleet.token}
    r = fleet.edge.post("/e2b/v2/sandboxes", json_body={"templateID": "base", "timeout": 120},
                        headers=key, auth=False)
    assert r.status == 201, r
    sb = r.json()
    sid = sb["sandboxID"]
    n = fleet.node(node_in(sid))
    try:
        assert fleet.node_of(sid) == [n.name]
        r = fleet.edge.get(f"/e2b/sandboxes/{sid}", headers=key, auth=False)
        assert r.status == 200 and r.json()["sandboxID"] == sid, r
        r = fleet.edge.get("/e2b/v2/sandboxes", headers=key, auth=False)
        assert r.status == 200 and sid in [x["sandboxID"] for x in r.json()], r
        # envd, as the SDK calls it with sandboxUrl set: the sandbox in a header.
        exec_ok(n.daemon, sid, "printf hello-from-e2b > /tmp/e2b.txt")
        env = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb["envdAccessToken"]}
        r = fleet.edge.get("/e2b/files?path=/tmp/e2b.txt", headers=env, auth=False)
        assert (r.status, r.body) == (200, b"hello-from-e2b"), r
        # A port of the sandbox by its host (getHost): PORT-ID.DOMAIN.
        exec_ok(n.daemon, sid, "mkdir -p site && printf port-by-host > site/index.html")
        r = n.daemon.post(f"/v1/sandboxes/{sid}/exec",
                          json_body={"command": "exec python3 -m http.server 8000 -d site", "background": True})
        assert r.status in (200, 201, 202), r

        def served():
            r = fleet.edge.get("/", headers={"Host": f"8000-{sid}.fleet.test", "X-Access-Token": sb["trafficAccessToken"]},
                               auth=False, fresh=True)
            return r if r.status == 200 else None
        r = wait_for(served, 30, "the sandbox's server through its host name")
        assert r.body == b"port-by-host", r
        r = fleet.edge.delete(f"/e2b/sandboxes/{sid}", headers=key, auth=False)
        assert r.status in (200, 204), r
    finally:
        delete_all(fleet, [sid])


def test_mcp_through_the_front_door(fleet):
    """initialize goes to the gateway (it places the session's sandbox);
    every later call carries Mcp-Session-Id, whose node HAProxy routes by."""
    hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    r = fleet.edge.request("POST", "/mcp", body=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "fleet-test", "version": "1"}}}).encode(), headers=hdr)
    assert r.status == 200, r
    session = r.headers["mcp-session-id"]
    node = re.fullmatch(r"mcp-([a-z0-9]+)-[a-z2-7]+", session).group(1)
    assert node == r.headers["sandlot-node"]
    h = dict(hdr, **{"Mcp-Session-Id": session})
    r = fleet.edge.request("POST", "/mcp", body=json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), headers=h)
    assert r.status == 202, r
    r = fleet.edge.request("POST", "/mcp", body=json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "run_command", "arguments": {"command": "echo via-mcp"}}}).encode(), headers=h)
    assert r.status == 200, r
    assert "via-mcp" in json.dumps(r.json()["result"]), r
    # The session's sandbox is on that node and no other.
    on = [n.name for n in fleet.nodes
          if any(s["state"] == "running" for s in
                 n.daemon.get("/v1/sandboxes?label=client=sandlot-mcp-http").json()["sandboxes"])]
    assert on == [node]
    # Sent to the gateway itself by mistake, a session's call is not
    # forwarded: 421, naming the session's node.
    r = fleet.gateway_http.request("POST", "/mcp", body=b"{}", headers=h)
    assert r.status == 421 and r.error_code() == "misdirected" and r.json()["error"]["node"] == node, r
    assert fleet.edge.request("DELETE", "/mcp", headers=h).status == 204


def test_python_client_unchanged_through_the_front_door(fleet):
    """The stdlib Python client, as shipped, pointed at the edge (run in the
    edge's network namespace): create, run, files, delete."""
    client = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python")
    script = (
        "import sys\n"
        f"sys.path.insert(0, {os.path.abspath(client)!r})\n"
        "import sandlot\n"
        "c = sandlot.Client(sys.argv[1], token=sys.argv[2])\n"
        "sb = c.create(memory='64M', disk='16M')\n"
        "r = sb.exec('echo from-client')\n"
        "print(sb.id, r.stdout.strip())\n"
        "sb.destroy()\n")
    r = subprocess.run(["nsenter", f"--net=/run/netns/{fleet.edge_ns}", "--", "/usr/bin/python3", "-c", script,
                        "http://198.18.0.1:8080", fleet.token], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sid, out = r.stdout.split()
    assert out == "from-client"
    assert fleet.node(node_in(sid)).daemon.get(f"/v1/sandboxes/{sid}").json()["state"] == "deleted"


def test_e2b_sdk_unchanged_through_the_front_door(fleet):
    """E2B's own Python SDK (the version pinned in tests/e2b), pointed at the
    edge as at E2B's cloud (run in the edge's network namespace): create,
    commands, files both ways, kill."""
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    py = subprocess.run([os.path.join(repo, "scripts", "e2b-pyenv.sh")], capture_output=True,
                        text=True, timeout=600, cwd=repo)
    assert py.returncode == 0, py.stderr
    script = (
        "import sys\n"
        "from e2b import Sandbox\n"
        "url = sys.argv[1] + '/e2b'\n"
        "s = Sandbox.create(timeout=120, api_key=sys.argv[2], api_url=url, sandbox_url=url)\n"
        "r = s.commands.run('echo from-e2b-sdk; printf made-inside > /tmp/in.txt')\n"
        "s.files.write('/tmp/up.txt', 'sent-by-sdk')\n"
        "print(s.sandbox_id, r.stdout.strip(), s.files.read('/tmp/in.txt'),\n"
        "      s.commands.run('cat /tmp/up.txt').stdout.strip())\n"
        "s.kill()\n")
    r = subprocess.run(["nsenter", f"--net=/run/netns/{fleet.edge_ns}", "--", py.stdout.strip(), "-c",
                        script, "http://198.18.0.1:8080", fleet.token], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    sid, out, made, sent = r.stdout.split()
    assert (out, made, sent) == ("from-e2b-sdk", "made-inside", "sent-by-sdk")
    # It ran on the node its id names, and the SDK's kill reached it.
    assert fleet.node(node_in(sid)).daemon.get(f"/v1/sandboxes/{sid}").json()["state"] == "deleted"


# ---- node loss ----------------------------------------------------------------------

def unavailable(r, node):
    return r.status == 503 and r.error_code() == "node_unavailable" and r.json()["error"]["node"] == node


def test_a_killed_node(fleet):
    """kill -9 n3: its sandboxes answer 503 node_unavailable (never 404),
    the list names it, creates go elsewhere, the others carry on; back
    with its state dir, it is routed to again."""
    mine = {n.name: create(n.daemon) for n in fleet.nodes}
    made = []
    try:
        fleet.kill9("n3")
        # At once (HAProxy cannot connect), and after the gateway marks it.
        r = fleet.edge.get(f"/v1/sandboxes/{mine['n3']}")
        assert unavailable(r, "n3"), r
        fleet.wait_state("n3", "unreachable")
        r = fleet.edge.post(f"/v1/sandboxes/{mine['n3']}/exec", json_body={"command": "true"})
        assert unavailable(r, "n3"), r
        r = fleet.edge.get("/v1/sandboxes")
        assert r.status == 200 and r.json()["unreachable_nodes"] == ["n3"], r
        assert {mine["n1"], mine["n2"]} <= {s["id"] for s in r.json()["sandboxes"]}
        for _ in range(4):
            sid = create(fleet.edge)
            made.append(sid)
            assert node_in(sid) != "n3"
        assert exec_ok(fleet.edge, mine["n1"], "echo still") == "still\n"
        assert fleet.haproxy_map("down.map").keys() == {"n3"}
        # Back: routed to again, the sandbox reported as the node recorded it.
        fleet.restart("n3")
        fleet.wait_state("n3", "ready")
        r = fleet.edge.get(f"/v1/sandboxes/{mine['n3']}")
        assert r.status == 200 and r.json()["id"] == mine["n3"], r
        assert fleet.haproxy_map("down.map") == {}
    finally:
        delete_all(fleet, list(mine.values()) + made)


def test_a_hung_node(fleet):
    """SIGSTOP n2: once the gateway's polls time out it is unreachable and
    its sandboxes get 503 at once, not a hung call; the others carry on."""
    sid = create(fleet.node("n2").daemon)
    other = create(fleet.node("n1").daemon)
    try:
        fleet.hang("n2")
        fleet.wait_state("n2", "unreachable", timeout=20)
        t0 = time.monotonic()
        r = fleet.edge.get(f"/v1/sandboxes/{sid}", timeout=10)
        assert unavailable(r, "n2"), r
        assert time.monotonic() - t0 < 5
        r = fleet.edge.get("/v1/sandboxes", timeout=20)
        assert r.json()["unreachable_nodes"] == ["n2"], r
        assert exec_ok(fleet.edge, other, "echo fine") == "fine\n"
        fleet.unhang("n2")
        fleet.wait_state("n2", "ready")
        assert exec_ok(fleet.edge, sid, "echo back") == "back\n"
    finally:
        fleet.unhang("n2")
        delete_all(fleet, [sid, other])


def test_a_partition(fleet):
    """n1's link to the edge goes down: the same as a crash from outside
    (503 node_unavailable, named in lists); healed, all is as before."""
    sid = create(fleet.node("n1").daemon)
    try:
        fleet.partition("n1")
        fleet.wait_state("n1", "unreachable", timeout=20)
        r = fleet.edge.get(f"/v1/sandboxes/{sid}", timeout=10)
        assert unavailable(r, "n1"), r
        r = fleet.edge.get("/v1/sandboxes", timeout=20)
        assert r.json()["unreachable_nodes"] == ["n1"], r
        # The node itself is fine, and still has the sandbox.
        assert fleet.node("n1").daemon.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        fleet.partition("n1", cut=False)
        fleet.wait_state("n1", "ready")
        assert exec_ok(fleet.edge, sid, "echo healed") == "healed\n"
    finally:
        fleet.partition("n1", cut=False)
        delete_all(fleet, [sid])


def test_a_gateway_restart(fleet):
    """The gateway holds nothing: while it is down, calls for existing
    sandboxes still go (HAProxy keeps the maps), and a new gateway rebuilds
    the same maps from the nodes."""
    sids = [create(fleet.edge) for _ in range(3)]
    try:
        before = {m: fleet.haproxy_map(m) for m in ("nodes.map", "down.map", "moved.map")}
        files = {m: (fleet.map_dir / m).read_text() for m in before}
        assert set(before["nodes.map"]) == {"n1", "n2", "n3"}
        assert fleet.stop_gateway(signal.SIGKILL) == -signal.SIGKILL
        for sid in sids:
            assert exec_ok(fleet.edge, sid, "echo no-gateway") == "no-gateway\n"
        r = fleet.edge.post("/v1/sandboxes", json_body=SMALL)
        assert r.status == 503, r  # no gateway: no placement, and nothing made
        fleet.start_gateway()
        after = {m: fleet.haproxy_map(m) for m in before}
        assert after == before
        assert {m: (fleet.map_dir / m).read_text() for m in before} == files
        r = fleet.edge.get("/v1/sandboxes")
        assert set(sids) <= {s["id"] for s in r.json()["sandboxes"]}
        sids.append(create(fleet.edge))
    finally:
        delete_all(fleet, sids)


def test_gateway_refuses_a_wrong_token(fleet):
    for path in ("/v1/nodes", "/v1/sandboxes"):
        r = fleet.gateway_http.get(path, headers={"Authorization": "Bearer wrong"}, auth=False)
        assert r.status == 401 and r.error_code() == "unauthorized", r


def test_moved_map_routes_and_the_gateway_keeps_it_true(fleet):
    """A moved.map entry sends a sandbox's calls to the node it names, ahead
    of the node in the id; the gateway, which rebuilds the map from where
    the nodes say their sandboxes are, removes an entry no node backs."""
    sid = create(fleet.node("n1").daemon)
    try:
        fleet.stop_gateway()
        path = f"{fleet.map_dir}/moved.map"
        assert fleet.admin(f"add map {path} {sid} n2").strip() == ""
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        # n2 answered: it has no such sandbox.
        assert r.status == 404 and r.error_code() == "not_found", r
        fleet.start_gateway()
        wait_for(lambda: sid not in fleet.haproxy_map("moved.map"), 30, "the gateway to drop the stale entry")
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert r.status == 200 and r.json()["id"] == sid, r
    finally:
        if fleet.gateway is None:
            fleet.start_gateway()
        delete_all(fleet, [sid])


def test_nodes_from_a_file_read_at_every_poll(fleet):
    """--nodes-file (what Nomad's template writes) is read at every poll. A
    node that leaves it is not forgotten (discovery also drops nodes that
    are only unwell): its sandboxes get 503 node_unavailable, never 404,
    also after a gateway restart (the gateway starts from the nodes.map it
    left); listed again, it is routed to again."""
    listing = fleet.base / "nodes.txt"
    n1, n2, n3 = fleet.nodes
    listing.write_text(f"# the fleet\n{n1.url}\n  {n2.url}  \n{n3.url}\n")
    sid = create(n3.daemon)
    try:
        fleet.stop_gateway()
        fleet.start_gateway(nodes_file=listing)
        assert set(fleet.haproxy_map("nodes.map")) == {"n1", "n2", "n3"}
        listing.write_text(f"{n1.url}\n{n2.url}\n")
        fleet.wait_state("n3", "unreachable")
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert unavailable(r, "n3"), r
        assert set(fleet.haproxy_map("nodes.map")) == {"n1", "n2", "n3"}
        fleet.stop_gateway()
        fleet.start_gateway(wait=False, nodes_file=listing)
        fleet.wait_nodes(lambda ns: {x["node_id"]: x["state"] for x in ns} ==
                         {"n1": "ready", "n2": "ready", "n3": "unreachable"}, "n3 remembered as unreachable")
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert unavailable(r, "n3"), r
        listing.write_text(f"{n1.url}\n{n2.url}\n{n3.url}\n")
        fleet.wait_state("n3", "ready")
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert r.status == 200 and r.json()["id"] == sid, r
    finally:
        fleet.stop_gateway()
        fleet.start_gateway()
        delete_all(fleet, [sid])
