"""Network for vm sandboxes (docs/vm.md, "Network"): the same policies,
egress engine and exposed ports as ns sandboxes, against the fake internet
of the network tests (fakenet.py).  sandlotd runs in the fake internet's
host namespace; the guest's traffic leaves through QEMU's user-mode network
inside the sandbox's network namespace, where the egress rules meet it.

One VM serves the module (a boot under TCG costs seconds): each test sets
the policy it needs through PUT .../network first, which is itself what
these tests are about.  Its root is a busybox erofs (wget, nslookup, nc,
httpd), as in test_vm.py.
"""
import json
import os
import subprocess
import time

import pytest

from conftest import wait_until
import fakenet
import hostscan
from vmguest import VM_DIR, busybox_root, missing

BOOT = 120
ALLOWED, BLOCKED = "198.51.100.10", "198.51.100.11"
METADATA = "169.254.169.254"
ALLOW = {"mode": "allowlist", "allow": ["allowed.test"]}
APPLETS = ("sh", "cat", "echo", "wget", "nslookup", "nc", "httpd", "sleep", "mkdir", "ip",
           "grep", "true", "id")


def _missing():
    return missing() or fakenet.available()


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


@pytest.fixture(scope="module")
def vm_root(tmp_path_factory):
    return busybox_root(tmp_path_factory.mktemp("vmnetroot"), APPLETS)


@pytest.fixture(scope="module")
def net(tmp_path_factory, session_dirs):
    n = fakenet.FakeNet(tmp_path_factory.mktemp("vmfakenet")).start()
    yield n
    problems = n.stop()
    assert not problems, "left by the fake internet:\n  " + "\n  ".join(problems)


@pytest.fixture(scope="module")
def d(net, vm_root, session_dirs, tmp_path_factory):
    from daemon import Daemon
    base = tmp_path_factory.mktemp("vmnetd")
    dm = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / "vmnetd",
                env={"SANDLOT_VM_DIR": str(VM_DIR), "SANDLOT_VM_ROOT": str(vm_root)},
                extra_args=["--resolver", "198.51.100.53"],
                prefix=net.daemon_prefix()).start()
    yield dm
    rc = dm.stop()
    assert rc == 0, f"sandlotd exited with {rc}:\n{dm.logs()}"


@pytest.fixture(scope="module")
def vm(d):
    """One vm sandbox, created without a network (the default)."""
    r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "memory": "256M"}, timeout=BOOT)
    assert r.status == 201, r
    rec = r.json()
    yield rec
    r = d.delete(f"/v1/sandboxes/{rec['id']}")
    assert r.status in (200, 204), r
    assert not [p for p, s in hostscan.qemu_guests().items() if s == rec["id"]]


def sh(d, sid, command, timeout=60):
    r = d.post(f"/v1/sandboxes/{sid}/exec",
               json_body={"command": command, "timeout_ms": timeout * 1000}, timeout=timeout + 30)
    assert r.status == 200, r
    return r.json()


def set_network(d, sid, network):
    r = d.put(f"/v1/sandboxes/{sid}/network", json.dumps(network).encode(),
              headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    return r.json()


def log(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}/network/log?after=0")
    assert r.status == 200, r
    return r.json()["events"]


def fetch(d, sid, url):
    """wget's exit status and output, for what must work (busybox's wget
    crashes on a failed connection: raw() is for what must fail)."""
    out = sh(d, sid, f"wget -q -O- {url} 2>&1; echo \"rc=$?\"")
    text = out["stdout"]
    rc = int(text.rsplit("rc=", 1)[1].strip())
    return rc, text.rsplit("rc=", 1)[0]


def raw(d, sid, addr, host, port=80):
    """An HTTP request to addr naming host, over nc: (response, nc's stderr)."""
    req = f"GET /echo-host HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n"
    out = sh(d, sid, f"printf '{req}' | nc -w 10 {addr} {port}")
    return out["stdout"], out["stderr"]


def test_the_guest_has_its_nic_and_no_network_by_default(d, vm):
    sid = vm["id"]
    assert vm["options"]["network"] == {"mode": "none", "allow": [], "deny": []}
    out = sh(d, sid, "cat /etc/resolv.conf; ip -4 addr show; ip route")
    assert "nameserver 10.0.2.3" in out["stdout"], out
    assert "10.0.2.15/24" in out["stdout"] and "default via 10.0.2.2" in out["stdout"], out
    # Loopback only: names do not resolve, connections fail at once.
    t0 = time.time()
    out = sh(d, sid, "nslookup allowed.test; echo rc=$?")
    assert "rc=0" not in out["stdout"], out
    resp, err = raw(d, sid, ALLOWED, "allowed.test")
    assert resp == "" and "Network is unreachable" in err, (resp, err)
    assert time.time() - t0 < 25, "a sandbox without a network must fail fast"
    assert log(d, sid) == []


def test_allowlist_dns_and_http(d, vm, net):
    sid = vm["id"]
    rec = set_network(d, sid, ALLOW)
    assert rec["options"]["network"] == {**ALLOW, "deny": []}, rec
    t0 = time.time()
    out = sh(d, sid, "nslookup -type=a allowed.test")
    assert out["exit_code"] == 0 and ALLOWED in out["stdout"], (out, log(d, sid))
    rc, text = fetch(d, sid, "http://allowed.test/echo-host")
    assert rc == 0, text
    assert json.loads(text) == {"host": "allowed.test", "addr": ALLOWED}, text
    arrived = [(e["kind"], e["addr"], e.get("host")) for e in net.arrivals(t0) if e["kind"] != "tcp"]
    assert arrived == [("http", ALLOWED, "allowed.test")], net.arrivals(t0)
    ev = log(d, sid)
    assert any(e["layer"] == "http" and e["verdict"] == "allowed" and e["addr"] == ALLOWED
               for e in ev), ev
    assert any(e["layer"] == "dns" and e["verdict"] == "allowed" and e["name"] == "allowed.test"
               for e in ev), ev


def test_denied_names_addresses_and_metadata_are_refused(d, vm, net):
    sid = vm["id"]
    set_network(d, sid, ALLOW)
    t0 = time.time()
    # A name the policy does not allow: NXDOMAIN, never asked upstream.
    out = sh(d, sid, "nslookup blocked.test; echo rc=$?")
    assert "rc=0" not in out["stdout"] and BLOCKED not in out["stdout"], out
    # Even asked of an outside resolver directly.
    out = sh(d, sid, "nslookup exfil-1.blocked.test 198.51.100.53; echo rc=$?")
    assert "rc=0" not in out["stdout"], out
    assert not [q for q in net.dns_queries() if "blocked.test" in q], net.dns_queries()
    # An address without an allowed name, the metadata address, and an
    # allowed name whose address is closed.
    for addr, host in ((BLOCKED, "blocked.test"), (ALLOWED, ALLOWED), (METADATA, METADATA),
                       (METADATA, "allowed.test")):
        resp, err = raw(d, sid, addr, host)
        assert "HTTP/1" not in resp, (addr, host, resp, err)
    out = sh(d, sid, "nslookup meta.allowed.test; echo rc=$?")
    assert "rc=0" not in out["stdout"] and METADATA not in out["stdout"], out
    assert net.arrivals(t0) == [], net.arrivals(t0)
    reasons = {e["reason"] for e in log(d, sid) if e["verdict"] != "allowed"}
    assert "not_allowed" in reasons, log(d, sid)
    assert reasons & {"closed_address", "no_name", "ip_literal"}, log(d, sid)


def test_open_mode_and_back_to_none(d, vm, net):
    sid = vm["id"]
    set_network(d, sid, {"mode": "open"})
    rc, text = fetch(d, sid, "http://blocked.test/echo-host")
    assert rc == 0 and json.loads(text)["addr"] == BLOCKED, text
    t0 = time.time()
    resp, err = raw(d, sid, METADATA, METADATA)
    assert "HTTP/1" not in resp, (resp, err)
    assert net.arrivals(t0) == [], net.arrivals(t0)
    # Back to none: the rules drop everything again (refused at once).
    set_network(d, sid, {"mode": "none"})
    resp, err = raw(d, sid, ALLOWED, "allowed.test")
    assert resp == "" and "Connection refused" in err, (resp, err)


def test_the_jail_runs_qemu_in_the_sandboxs_namespace(d, vm):
    """QEMU's sockets (slirp's) live in the namespace sandlotd made, with its
    egress listeners: not the daemon's own."""
    sid = vm["id"]
    set_network(d, sid, ALLOW)
    pids = [p for p, s in hostscan.qemu_guests().items() if s == sid]
    assert len(pids) == 1, pids
    qemu_net = os.readlink(f"/proc/{pids[0]}/ns/net")
    assert qemu_net != os.readlink(f"/proc/{d.pid}/ns/net")
    # The namespace holds the DNS and proxy listeners (owned by sandlotd)
    # and the relay forward (QEMU's) on 127.0.0.1.
    listening = subprocess.run(["nsenter", f"--net=/proc/{pids[0]}/ns/net", "ss", "-Htln"],
                               capture_output=True, text=True, check=True).stdout
    assert "127.0.0.1:1 " in listening and "127.0.0.1:53 " in listening, listening
    assert "127.0.0.1:1024 " in listening, listening


def test_ports_reach_a_server_on_the_guests_loopback(d, vm):
    sid = vm["id"]
    set_network(d, sid, {"mode": "none"})  # ports do not need a network
    out = sh(d, sid, "mkdir -p www && echo hello-from-the-guest > www/index.html && "
                     "httpd -p 127.0.0.1:8000 -h www && echo started")
    assert out["exit_code"] == 0, out
    r = d.post(f"/v1/sandboxes/{sid}/ports", json_body={"port": 8000})
    assert r.status in (200, 201), r
    r = d.get(f"/v1/sandboxes/{sid}/ports/8000/index.html")
    assert r.status == 200 and r.body == b"hello-from-the-guest\n", r
    # Nothing listens on 8001: a clear error, not a hang.
    r = d.post(f"/v1/sandboxes/{sid}/ports", json_body={"port": 8001})
    assert r.status in (200, 201), r
    r = d.get(f"/v1/sandboxes/{sid}/ports/8001/")
    assert r.status == 502 and r.json()["error"]["code"] == "bad_gateway", r
    assert "nothing is listening on port 8001" in r.json()["error"]["message"], r
    for port in (8000, 8001):
        assert d.delete(f"/v1/sandboxes/{sid}/ports/{port}").status in (200, 204)


def test_ports_given_at_create(d):
    r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "memory": "256M", "ports": [8000]},
               timeout=BOOT)
    assert r.status == 201, r
    sid = r.json()["id"]
    try:
        out = sh(d, sid, "mkdir -p www && echo made-with-its-port > www/index.html && "
                         "httpd -p 127.0.0.1:8000 -h www && echo started")
        assert out["exit_code"] == 0, out
        r = d.get(f"/v1/sandboxes/{sid}/ports/8000/index.html")
        assert r.status == 200 and r.body == b"made-with-its-port\n", r
    finally:
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    assert not [p for p, s in hostscan.qemu_guests().items() if s == sid]
