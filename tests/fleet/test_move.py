"""Moving a paused sandbox between nodes of a fleet, with fencing
(docs/fleet-move.md), through the front door (fleet.py's HAProxy and
gateway) as a client would, the nodes sharing a file:// archive store.

    /usr/bin/python3 -m pytest -q tests/fleet/test_move.py    (root; make first)
"""
import hashlib
import shutil

import pytest

from fleet import Fleet, wait_for

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="HAProxy is not installed (Makefile TEST_DEPS: haproxy)")

SMALL = {"memory": "64M", "disk": "16M"}


def test_a_move_with_fencing(session_dirs, tmp_path_factory):
    """Pause and archive a sandbox of n1 through the edge, kill -9 n1, take
    it on n2 (same id): the gateway maps the id to n2, the edge serves it
    with its files intact; n1 comes back, finds that n2 holds a newer
    generation, deletes its copy and answers 410 sandbox_moved, and the edge
    still sends the id's calls to n2."""
    base = tmp_path_factory.mktemp("fleet-move", numbered=True)
    store = base / "archive"
    store.mkdir()
    fleet = Fleet(base, session_dirs["data_dir"] / "fleet" / base.name, nodes=2,
                  node_args={i: ["--archive", f"file://{store}"] for i in (1, 2)}).start()
    try:
        n1, n2 = fleet.node("n1"), fleet.node("n2")
        r = n1.daemon.post("/v1/sandboxes", json_body=SMALL)
        assert r.status == 201, r
        sid = r.json()["id"]
        assert sid.startswith("sb-n1-")
        r = fleet.edge.post(f"/v1/sandboxes/{sid}/exec", json_body={
            "command": "head -c 1000000 /dev/urandom > /home/user/data; sha256sum /home/user/data"})
        assert r.status == 200 and r.json()["exit_code"] == 0, r
        digest = r.json()["stdout"].split()[0]
        assert fleet.edge.post(f"/v1/sandboxes/{sid}/pause", json_body={}).status == 200
        r = fleet.edge.post(f"/v1/sandboxes/{sid}/archive", json_body={})
        assert r.status == 200 and r.json()["archive"]["node"] == "n1", r

        fleet.kill9("n1")
        r = fleet.edge.get(f"/v1/sandboxes/{sid}")
        assert r.status == 503 and r.error_code() == "node_unavailable", r

        # n2 takes it from the store, under the same id.
        r = n2.daemon.post(f"/v1/sandboxes/{sid}/resume", json_body={"from_archive": True})
        assert r.status == 200 and r.json()["id"] == sid and r.json()["state"] == "running", r
        wait_for(lambda: fleet.haproxy_map("moved.map").get(sid) == "n2", 30,
                 "the gateway to map the moved sandbox to n2")
        r = fleet.edge.post(f"/v1/sandboxes/{sid}/exec",
                            json_body={"command": "sha256sum /home/user/data"})
        assert r.status == 200 and r.json()["stdout"].split()[0] == digest, r

        # n1 is back: it fences its stale copy at start-up.
        fleet.restart("n1")
        assert f"event=sandbox_moved sandbox={sid}" in n1.daemon.log_text()
        r = n1.daemon.get(f"/v1/sandboxes/{sid}")
        assert r.status == 410 and r.error_code() == "sandbox_moved", r
        assert r.json()["error"]["node"] == "n2", r
        assert not (n1.daemon.data_dir / "storage" / "mnt" / "kept" / sid).exists()
        # The edge still routes the id to n2, which still runs it.
        wait_for(lambda: fleet.state_of("n1") == "ready", 30, "n1 to be ready again")
        r = fleet.edge.post(f"/v1/sandboxes/{sid}/exec",
                            json_body={"command": "sha256sum /home/user/data"})
        assert r.status == 200 and r.json()["stdout"].split()[0] == digest, r
        assert fleet.haproxy_map("moved.map").get(sid) == "n2"
        assert n2.daemon.delete(f"/v1/sandboxes/{sid}").status == 204
    finally:
        fleet.stop()
