"""Egress by policy (docs/network.md), against a fake internet the tests
build in network namespaces (fakenet.py): sandlotd runs in a "host"
namespace, dnsmasq and TLS/HTTP/UDP servers in an "internet" one, and every
case checks both what the sandbox saw and what reached (or did not reach)
the servers and the upstream resolver.
"""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SANDLOT, wait_until
import fakenet
import hostscan

HERE = Path(__file__).resolve().parent
ALLOWED, BLOCKED, CDN = "198.51.100.10", "198.51.100.11", "198.51.100.12"
HOST_ADDR = "198.51.100.1"


@pytest.fixture(scope="module")
def net(tmp_path_factory, session_dirs):
    why = fakenet.available()
    if why:
        pytest.skip(f"the fake internet cannot be built here: {why}")
    n = fakenet.FakeNet(tmp_path_factory.mktemp("fakenet")).start()
    yield n
    problems = n.stop()
    assert not problems, "left by the fake internet:\n  " + "\n  ".join(problems)


@pytest.fixture(scope="module")
def d(net, session_dirs, tmp_path_factory):
    """sandlotd in the fake internet's host namespace."""
    from daemon import Daemon
    base = tmp_path_factory.mktemp("netd")
    dm = Daemon(base, data_dir=session_dirs["data_dir"] / "netd",
                extra_args=["--resolver", "198.51.100.53", "--egress-max-connections", "8",
                            "--pip-index", "https://pypi.test/simple",
                            "--npm-registry", "https://npm.test/", "--package-ca", str(net.ca)],
                prefix=net.daemon_prefix()).start()
    yield dm
    rc = dm.stop()
    assert rc == 0, f"sandlotd exited with {rc}:\n{dm.logs()}"


class Box:
    """A sandbox of the fake-internet daemon with the probe and the CA."""

    def __init__(self, d, net, network=None, **opts):
        self.d, self.net = d, net
        body = dict(opts)
        if network is not None:
            body["network"] = network
        r = d.post("/v1/sandboxes", json_body=body)
        assert r.status == 201, r
        self.record = r.json()
        self.id = self.record["id"]
        for name, data in (("netprobe.py", (HERE / "netprobe.py").read_bytes()),
                           ("ca.pem", net.ca.read_bytes())):
            r = d.put(f"/v1/sandboxes/{self.id}/files?path=/home/user/{name}", data)
            assert r.status in (200, 201, 204), r

    def probe(self, *args, timeout=60):
        r = self.d.post(f"/v1/sandboxes/{self.id}/exec",
                        json_body={"argv": ["python3", "netprobe.py", *map(str, args)],
                                   "timeout_ms": timeout * 1000}, timeout=timeout + 10)
        assert r.status == 200, r
        res = r.json()
        assert res["exit_code"] == 0, res
        return json.loads(res["stdout"].strip().splitlines()[-1])

    def sh(self, command, timeout=60):
        r = self.d.post(f"/v1/sandboxes/{self.id}/exec",
                        json_body={"command": command, "timeout_ms": timeout * 1000})
        assert r.status == 200, r
        return r.json()

    def set_network(self, network):
        r = self.d.put(f"/v1/sandboxes/{self.id}/network", json.dumps(network).encode(),
                       headers={"Content-Type": "application/json"})
        return r

    def log(self, after=0):
        r = self.d.get(f"/v1/sandboxes/{self.id}/network/log?after={after}")
        assert r.status == 200, r
        return r.json()["events"]

    def close(self):
        self.d.delete(f"/v1/sandboxes/{self.id}")


@pytest.fixture
def box(d, net):
    made = []

    def make(network=None, **opts):
        b = Box(d, net, network, **opts)
        made.append(b)
        return b
    yield make
    for b in made:
        b.close()


ALLOW = {"mode": "allowlist", "allow": ["allowed.test"]}


def refused(r):
    """A probe's connection was refused: at connect (ECONNREFUSED), or
    reset once the proxy had a look (ECONNRESET, during or after the
    connect), or closed by it before any byte came back."""
    return r.get("error") in ("ECONNREFUSED", "ECONNRESET") or r.get("eof") is True


# ---- allowed traffic ---------------------------------------------------------------

def test_allowed_name_over_tls_and_http(box, net):
    b = box(ALLOW)
    t0 = time.time()
    r = b.probe("https", "allowed.test")
    assert r["status"] == 200 and r["body"] == {"host": "allowed.test", "addr": ALLOWED}, r
    r = b.probe("http", "allowed.test")
    assert r["status"] == 200 and r["body"]["addr"] == ALLOWED, r
    # The server saw the SNI at the name's own address, and nothing else.
    snis = [(e["addr"], e["sni"]) for e in net.arrivals(t0) if e["kind"] == "sni"]
    assert snis == [(ALLOWED, "allowed.test")], net.arrivals(t0)
    ev = b.log()
    assert any(e["layer"] == "tls" and e["verdict"] == "allowed" and e["name"] == "allowed.test"
               and e["addr"] == ALLOWED and e["port"] == 443 for e in ev), ev
    assert any(e["layer"] == "http" and e["verdict"] == "allowed" for e in ev), ev
    assert any(e["layer"] == "dns" and e["verdict"] == "allowed" and e["qtype"] == 1
               and e["answers"] == 1 for e in ev), ev


def test_the_record_shows_the_policy_normalised(box):
    b = box({"allow": ["Allowed.TEST.", "*.Allowed.test", "203.0.113.7", "198.51.100.0/24"],
             "deny": ["cdn.allowed.test"]})
    net = b.record["options"]["network"]
    assert net == {"mode": "allowlist",
                   "allow": ["allowed.test", "*.allowed.test", "203.0.113.7/32",
                             "198.51.100.0/24"],
                   "deny": ["cdn.allowed.test"]}, net
    r = b.d.get(f"/v1/sandboxes/{b.id}/network")
    assert r.status == 200 and r.json() == net, r


def test_default_is_no_network(box, net):
    b = box()
    assert b.record["options"]["network"] == {"mode": "none", "allow": [], "deny": []}
    r = b.probe("https", "allowed.test")
    assert r.get("error") == "gaierror", r
    r = b.probe("tcp", ALLOWED, 443)
    assert r.get("error") == "ENETUNREACH", r
    r = b.probe("udp", ALLOWED, 7)
    assert r.get("error") == "ENETUNREACH", r
    assert b.log() == []


# ---- DNS ------------------------------------------------------------------------------

def test_blocked_name_gets_nxdomain_and_never_reaches_upstream(box, net):
    b = box(ALLOW)
    r = b.probe("resolve", "blocked.test")
    assert r.get("error") == "gaierror", r
    # Even asked of an outside resolver directly, and over TCP: sandlot answers.
    for extra in ([], ["--tcp"]):
        r = b.probe("dns", "198.51.100.53", "blocked.test", "A", *extra)
        assert r["rcode"] == 3 and r["answers"] == [] and r["id_ok"], r
        r = b.probe("dns", "8.8.8.8", "exfil-1234.blocked.test", "TXT", *extra)
        assert r["rcode"] == 3, r
    assert not [q for q in net.dns_queries() if "blocked.test" in q], net.dns_queries()
    reasons = {e["reason"] for e in b.log() if e["layer"] == "dns" and e["name"].endswith("blocked.test")}
    assert reasons == {"not_allowed"}, b.log()


def test_dns_types(box, net):
    b = box(ALLOW)
    r = b.probe("dns", "1.1.1.1", "allowed.test", "A")
    assert r == {"rcode": 0, "answers": [ALLOWED], "id_ok": True}, r
    r = b.probe("dns", "1.1.1.1", "allowed.test", "AAAA")
    assert r["rcode"] == 0 and r["answers"] == [], r   # no IPv6: no data
    r = b.probe("dns", "1.1.1.1", "allowed.test", "HTTPS")
    assert r["rcode"] == 5, r                            # REFUSED: no ECH keys, no h3 hints
    r = b.probe("dns", "1.1.1.1", "allowed.test", "TXT")
    assert r["rcode"] == 0 and r["answers"] == [], r
    # Only A queries of allowed names went upstream.
    assert set(net.dns_queries()) <= set(fakenet.NAMES), net.dns_queries()


# ---- refused connections --------------------------------------------------------------

def test_direct_ip_connect_is_refused(box, net):
    b = box(ALLOW)
    t0 = time.time()
    # TLS without a name (an IP as server_hostname sends no SNI).
    r = b.probe("https", ALLOWED, "--sni", ALLOWED)
    assert r.get("error") in ("ECONNRESET", "ssl"), r
    # HTTP to the address, Host an address.
    r = b.probe("http", ALLOWED)
    assert r.get("error") == "ECONNRESET" or r.get("status") is None, r
    # To an address no allowed name has.
    r = b.probe("https", "blocked.test", "--ip", BLOCKED)
    assert r.get("error") in ("ECONNRESET", "ssl"), r
    assert net.arrivals(t0) == [], net.arrivals(t0)
    reasons = [e["reason"] for e in b.log() if e["layer"] != "dns"]
    assert "no_name" in reasons and "ip_literal" in reasons and "not_allowed" in reasons, reasons


def test_allowed_sni_to_a_foreign_address_is_refused(box, net):
    b = box(ALLOW)
    t0 = time.time()
    r = b.probe("https", "allowed.test", "--ip", BLOCKED)
    assert r.get("error") in ("ECONNRESET", "ssl"), r
    r = b.probe("hello", BLOCKED, "allowed.test", "records2")
    assert r.get("error") == "ECONNRESET" or r.get("reply_type") is None, r
    assert net.arrivals(t0) == [], net.arrivals(t0)
    assert [e["reason"] for e in b.log() if e["layer"] == "tls"] == ["address_mismatch"] * 2


def test_allowed_sni_to_its_own_address_without_dns_works(box, net):
    """A client that skipped sandlot's DNS (an address in /etc/hosts, curl
    --resolve) still gets through when the address is the name's."""
    b = box(ALLOW)
    r = b.probe("https", "allowed.test", "--ip", ALLOWED)
    assert r["status"] == 200, r


@pytest.mark.parametrize("name,addr", [
    ("rebind.allowed.test", "10.0.0.5"),
    ("meta.allowed.test", "169.254.169.254"),
    ("lo.allowed.test", "127.0.0.1"),
    ("zero.allowed.test", "0.0.0.0"),
    ("cgnat.allowed.test", "100.64.0.5"),
    ("hostself.allowed.test", HOST_ADDR),
])
def test_allowed_wildcard_pointing_inside_is_refused(box, net, name, addr):
    b = box({"mode": "allowlist", "allow": ["*.allowed.test"]})
    t0 = time.time()
    r = b.probe("resolve", name)
    assert r.get("error") == "gaierror", r
    dns = [e for e in b.log() if e["layer"] == "dns" and e["name"] == name and e["qtype"] == 1]
    assert dns and dns[-1]["reason"] == "closed_address", dns
    # Straight to the address, with the name as SNI (curl --resolve).
    r = b.probe("https", name, "--ip", addr)
    assert r.get("error") in ("ECONNRESET", "ECONNREFUSED", "ssl"), r
    assert net.arrivals(t0) == [], net.arrivals(t0)
    assert net.host_service_hits() == []


def test_udp_icmp_ipv6_dot_quic_fail_fast(box, net):
    b = box(ALLOW)
    t0 = time.time()
    for ip, port in ((ALLOWED, 443), (ALLOWED, 7), ("8.8.8.8", 123)):   # QUIC, echo, NTP
        r = b.probe("udp", ip, port)
        assert r.get("error") == "EPERM", (ip, port, r)
    r = b.probe("tcp", "198.51.100.53", 853)                           # DNS over TLS
    assert r.get("error") == "ECONNREFUSED", r
    r = b.probe("icmp")
    assert r.get("error") in ("EACCES", "EPERM"), r
    r = b.probe("ipv6")
    assert r.get("error") in ("ENETUNREACH", "EHOSTUNREACH"), r
    assert [e for e in net.arrivals(t0) if e["kind"] == "udp"] == []
    assert time.time() - t0 < 20


def test_host_loopback_and_other_sandboxes_are_unreachable(box, net):
    a = box({"mode": "open"})
    other = box({"mode": "open"})
    # `other` serves on every address of its own namespace.
    other.sh("nohup python3 -m http.server 9000 >/dev/null 2>&1 &")
    assert wait_until(lambda: other.probe("tcp", "127.0.0.1", 9000).get("connected"), 10)
    for ip, port in (("127.0.0.1", 8080), (HOST_ADDR, 8080), ("127.0.0.1", 9000),
                     ("10.255.254.1", 9000)):
        r = a.probe("tcp", ip, port)
        assert refused(r), (ip, port, r)
    assert net.host_service_hits() == []
    reasons = [e["reason"] for e in a.log() if e["layer"] == "tcp"]
    assert reasons == ["closed_address"], a.log()


def test_open_mode_reaches_public_hosts_but_not_inside(box, net):
    b = box({"mode": "open", "deny": ["cdn.allowed.test"]})
    r = b.probe("https", "blocked.test")
    assert r["status"] == 200 and r["body"]["addr"] == BLOCKED, r
    r = b.probe("tcp", BLOCKED, 80)   # no name needed
    assert r.get("connected"), r
    r = b.probe("https", "cdn.allowed.test")
    assert r.get("error") == "gaierror", r
    r = b.probe("https", "cdn.allowed.test", "--ip", CDN)
    assert r.get("error") in ("ECONNRESET", "ssl"), r
    t0 = time.time()
    for addr in fakenet.INSIDE + (HOST_ADDR,):
        r = b.probe("tcp", addr, 443)
        assert refused(r), (addr, r)
    assert net.arrivals(t0) == []


def test_deny_wins_over_allow(box, net):
    b = box({"mode": "allowlist", "allow": ["*.allowed.test", "allowed.test"],
             "deny": ["cdn.allowed.test", "198.51.100.10"]})
    r = b.probe("resolve", "cdn.allowed.test")
    assert r.get("error") == "gaierror", r
    r = b.probe("resolve", "allowed.test")
    assert r.get("error") == "gaierror", r   # its only address is denied
    assert {e["reason"] for e in b.log() if e["layer"] == "dns"} >= {"denied", "closed_address"}


def test_allowed_range_needs_no_name(box, net):
    b = box({"mode": "allowlist", "allow": ["198.51.100.11"]})
    r = b.probe("tcp", BLOCKED, 80)
    assert r.get("connected") and r.get("error") == "timeout", r   # the server waits for us
    r = b.probe("https", "blocked.test", "--ip", BLOCKED)
    assert r["status"] == 200, r
    r = b.probe("tcp", ALLOWED, 80, 10)   # not in the range: must name itself, never does
    assert refused(r), r


# ---- policy changes, limits, the log -----------------------------------------------------

def test_live_policy_change(box, net):
    b = box()
    assert b.probe("https", "allowed.test").get("error") == "gaierror"
    r = b.set_network(ALLOW)
    assert r.status == 200 and r.json()["options"]["network"]["mode"] == "allowlist", r
    assert b.probe("https", "allowed.test")["status"] == 200
    # A kept-alive connection, then a policy without its name.
    p = subprocess.Popen(
        ["curl", "-sN", "--unix-socket", str(b.d.sock), "-X", "POST", "-H",
         "Accept: application/x-ndjson", f"http://localhost/v1/sandboxes/{b.id}/exec", "-d",
         json.dumps({"argv": ["python3", "netprobe.py", "hold", "allowed.test", "30"]})],
        stdout=subprocess.PIPE, text=True)
    try:
        seen, first = [], False
        for line in p.stdout:   # until the probe says its first request went through
            seen.append(line)
            ev = json.loads(line)
            if ev.get("type") == "stdout" and '"first": true' in ev.get("data", ""):
                first = True
                break
        assert first, seen
        r = b.set_network({"mode": "allowlist", "allow": ["blocked.test"]})
        assert r.status == 200, r
        out, _ = p.communicate(timeout=20)
        out = "".join(seen) + out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    stdout = "".join(ln.get("data", "") for ln in lines if ln.get("type") == "stdout")
    assert '"first": true' in stdout and '"then"' in stdout, stdout
    assert '"then": "data"' not in stdout, stdout   # closed, not answered
    assert any(e["reason"] == "policy_changed" for e in b.log()), b.log()
    assert b.probe("https", "allowed.test").get("error") == "gaierror"
    assert b.probe("https", "allowed.test", "--ip", ALLOWED).get("error") in ("ECONNRESET", "ssl")
    # Back to none: loopback only again, failing fast.
    assert b.set_network({"mode": "none"}).status == 200
    r = b.probe("tcp", BLOCKED, 443)
    assert r.get("error") == "ECONNREFUSED", r
    r = b.probe("udp", BLOCKED, 7)
    assert r.get("error") == "EPERM", r


def test_bad_policies_are_refused_with_a_reason(d):
    cases = [
        ({"mode": "allowlist", "allow": ["*"]}, "'*' is allowed only as a whole first label"),
        ({"mode": "allowlist", "allow": ["*.com"]}, "too broad"),
        ({"mode": "allowlist", "allow": ["exa mple.com"]}, "not a host name"),
        ({"mode": "allowlist", "allow": ["bücher.de"]}, "punycode"),
        ({"mode": "allowlist", "allow": ["2001:db8::/32"]}, "IPv6"),
        ({"mode": "allowlist", "allow": ["10.0.0.1/8"]}, "bits set"),
        ({"mode": "open", "allow": ["x.com"]}, "allowlist"),
        ({"mode": "sometimes"}, "mode"),
        ({"mode": "allowlist", "allow": "x.com"}, "array"),
        ({"mode": "allowlist", "wat": []}, "unknown field"),
        (5, "object"),
    ]
    for network, want in cases:
        r = d.post("/v1/sandboxes", json_body={"network": network})
        assert r.status == 400 and want in r.json()["error"]["message"], (network, r)


def test_connection_cap(box, net):
    b = box(ALLOW)   # the daemon runs with --egress-max-connections 8
    r = b.probe("conns", "allowed.test", 10)
    assert r["results"][:8] == ["ok"] * 8, r
    assert all(x != "ok" for x in r["results"][8:]), r
    assert any(e["reason"] == "connection_limit" for e in b.log()), b.log()


def test_dns_rate_limit(box):
    b = box(ALLOW)
    r = b.probe("dnsflood", "198.51.100.53", 600)
    # A burst of 200, then 100 a second: most of 600 at once are refused.
    assert r["rcodes"].get("0", 0) >= 200 and r["rcodes"].get("5", 0) >= 100, r
    limited = [e for e in b.log() if e["reason"] == "rate_limit"]
    assert 1 <= len(limited) <= 5, limited   # logged once a second, not per query


def test_pause_and_resume_keep_the_policy(box, net):
    b = box(ALLOW)
    assert b.probe("https", "allowed.test")["status"] == 200
    assert b.set_network({"mode": "allowlist", "allow": ["blocked.test"]}).status == 200
    r = b.d.post(f"/v1/sandboxes/{b.id}/pause")
    assert r.status == 200, r
    r = b.d.post(f"/v1/sandboxes/{b.id}/resume")
    assert r.status == 200 and r.json()["options"]["network"]["allow"] == ["blocked.test"], r
    assert b.probe("https", "blocked.test")["status"] == 200
    assert b.probe("https", "allowed.test").get("error") == "gaierror"


def test_log_paging_and_metrics(box, d):
    b = box(ALLOW)
    b.probe("https", "allowed.test")
    b.probe("resolve", "blocked.test")
    ev = b.log()
    assert [e["seq"] for e in ev] == list(range(1, len(ev) + 1)), ev
    assert b.log(after=ev[-2]["seq"]) == ev[-1:]
    r = d.get(f"/v1/sandboxes/{b.id}/network/log?after=-1")
    assert r.status == 400, r
    m = d.get("/metrics").body.decode()
    for line in ('sandlot_egress_connections_total{verdict="allowed"}',
                 'sandlot_egress_dns_queries_total{verdict="refused"}',
                 'sandlot_egress_refused_total{reason="not_allowed"}',
                 'sandlot_egress_bytes_total{direction="in"}'):
        assert line in m, line
    assert "allowed.test" not in m   # no names as labels


# ---- the TLS parser against real-world and hostile hellos ----------------------------------

@pytest.mark.parametrize("variant", ["split1", "padded", "records2"])
def test_client_hello_shapes_get_through(box, net, variant):
    b = box(ALLOW)
    t0 = time.time()
    r = b.probe("hello", ALLOWED, "allowed.test", variant)
    assert r.get("reply_type") in (21, 22), r   # the server's answer: alert or handshake
    snis = [(e["addr"], e["sni"]) for e in net.arrivals(t0) if e["kind"] == "sni"]
    assert snis == [(ALLOWED, "allowed.test")], net.arrivals(t0)


def test_oversized_client_hello_is_refused(box, net):
    b = box(ALLOW)
    t0 = time.time()
    r = b.probe("hello", ALLOWED, "allowed.test", "oversized")
    assert r.get("error") == "ECONNRESET" or r.get("reply_type") is None, r
    assert net.arrivals(t0) == []
    assert [e["reason"] for e in b.log() if e["layer"] == "tls"] == ["too_big"]


def test_silent_client_is_dropped_after_the_deadline(box, net):
    b = box(ALLOW)
    t0 = time.monotonic()
    r = b.probe("tcp", ALLOWED, 443, 20)   # connects, sends nothing, waits to read
    assert r.get("connected") and refused(r), r
    assert 4 <= time.monotonic() - t0 < 15
    assert [e["reason"] for e in b.log() if e["layer"] != "dns"] == ["timeout"]


# ---- the sandbox cannot undo it ---------------------------------------------------------------

def sandbox_pid(b, marker):
    b.sh(f"nohup sleep {marker} >/dev/null 2>&1 &")
    pids = wait_until(lambda: hostscan.find_pids(["sleep", str(marker)]), 10)
    assert pids, "the marker process did not start"
    return pids[0]


def test_sandbox_root_cannot_change_the_rules(box, net):
    b = box(ALLOW)
    pid = sandbox_pid(b, 987.654)
    # Root of the sandbox's user namespace, in its network namespace.
    as_root = ["nsenter", "-t", str(pid), "-n", "--", "nsenter", "-t", str(pid), "-U", "--"]
    for argv in (["nft", "flush", "ruleset"], ["ip", "route", "add", "198.51.100.0/24", "dev", "lo"],
                 ["ip", "link", "set", "lo", "down"], ["sysctl", "-w", "net.ipv4.ip_forward=1"]):
        r = subprocess.run(as_root + argv, capture_output=True, text=True)
        assert r.returncode != 0, (argv, r)
        assert "not permitted" in (r.stderr + r.stdout).lower() or "permission denied" in (
            r.stderr + r.stdout).lower(), (argv, r)
    # The sandbox's "root" really is root there: it can do what its own
    # namespace allows (so the refusals above are about ownership).
    r = subprocess.run(as_root + ["id", "-u"], capture_output=True, text=True)
    assert r.stdout.strip() == "0", r
    # Still enforced.
    assert b.probe("https", "allowed.test", "--ip", BLOCKED).get("error") in ("ECONNRESET", "ssl")
    r = subprocess.run(["nsenter", "-t", str(pid), "-n", "nft", "list", "ruleset"],
                       capture_output=True, text=True)
    assert "redirect to :1" in r.stdout, r


def fd_targets(pid):
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass   # closed meanwhile
    return out


def test_deleted_sandboxes_release_their_network_namespaces(box, d, net):
    """A sandbox's namespace lives as long as the sandbox: the daemon's
    descriptor of it, its listeners and its nftables socket go with the
    sandbox, and then no process is left in it."""
    sockets = lambda: sum(t.startswith("socket:") for t in fd_targets(d.pid))  # noqa: E731
    before = sockets()
    made = [box(ALLOW), box(), box({"mode": "open"})]
    inodes = []
    for i, b in enumerate(made):
        pid = sandbox_pid(b, 876.5 + i)
        ino = hostscan.net_ns_inode(pid)
        assert ino and ino != hostscan.net_ns_inode(d.pid), (ino, d.pid)
        inodes.append(ino)
    assert len(set(inodes)) == 3, inodes
    held = fd_targets(d.pid)
    for ino in inodes:
        assert f"net:[{ino}]" in held, (ino, held)
    assert sockets() > before
    for b in made:
        b.close()

    def released():
        targets = fd_targets(d.pid)
        return (not any(f"net:[{ino}]" in targets for ino in inodes)
                and not [p for p in hostscan.pids() if hostscan.net_ns_inode(p) in inodes]
                and sockets() <= before)
    assert wait_until(released, 15), (
        [t for t in fd_targets(d.pid) if t.startswith("net:")], sockets(), before,
        [p for p in hostscan.pids() if hostscan.net_ns_inode(p) in inodes])


def test_vsock_is_denied(sandlot):
    r = sandlot.py("import socket, errno\n"
                   "try:\n    socket.socket(40, socket.SOCK_STREAM); print('made')\n"
                   "except OSError as e:\n    print(errno.errorcode[e.errno])")
    assert r.rc == 0 and r.stdout.strip() == "EPERM", r


# ---- sandlot run (no daemon) ---------------------------------------------------------------------

def test_run_with_allow_host(net, sandlot, tmp_path):
    (tmp_path / "ca.pem").write_bytes(net.ca.read_bytes())
    env = dict(sandlot.env, SANDLOT_RESOLVER="198.51.100.53")
    argv = [*net.daemon_prefix(), str(SANDLOT), "run", "-u", f"{tmp_path / 'ca.pem'}:ca.pem",
            "-u", f"{HERE / 'netprobe.py'}:netprobe.py"]
    r = subprocess.run(argv + ["--allow-host", "allowed.test", "--", "python3", "netprobe.py",
                               "https", "allowed.test"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == 200, r
    r = subprocess.run(argv + ["--allow-host", "allowed.test", "--", "python3", "netprobe.py",
                               "https", "blocked.test"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert json.loads(r.stdout).get("error") == "gaierror", r
    r = subprocess.run(argv + ["--net", "open", "--allow-host", "x.test", "--", "true"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "--allow-host cannot be used with --net open" in r.stderr, r


# ---- packages ---------------------------------------------------------------------------------

def registry_hits(net, since, addr):
    return [e for e in net.arrivals(since, addr) if e["kind"] == "http"]


def install(b, **packages):
    return b.d.post(f"/v1/sandboxes/{b.id}/packages", json_body=packages, timeout=300)


def test_pip_install_from_the_registry_then_from_the_cache(box, net):
    net.add_wheel("sltestpkg", "1.0", "VALUE = 42\n")
    a = box()   # no network of its own
    t0 = time.time()
    r = install(a, pip=["sltestpkg==1.0"])
    assert r.status == 200, r
    res = r.json()
    assert res["from_cache"] is False and "Successfully installed sltestpkg-1.0" in res["output"], res
    assert res["packages"] == {"pip": ["sltestpkg==1.0"], "npm": []}, res
    assert registry_hits(net, t0, "198.51.100.20"), "nothing was downloaded from pypi.test"
    out = a.sh("python3 -c 'import sltestpkg; print(sltestpkg.VALUE, sltestpkg.__file__)'")
    assert out["stdout"].startswith("42 /home/user/.local/lib/python3"), out
    # The registry was open for the download only, and not to this sandbox.
    assert a.probe("https", "pypi.test", "/simple/").get("error") == "gaierror"
    assert not [e for e in a.log() if e["name"] and "pypi.test" in e["name"]], a.log()
    assert a.d.get(f"/v1/sandboxes/{a.id}").json()["options"]["packages"]["pip"] == ["sltestpkg==1.0"]

    # This sandbox's copy is its own: changing it changes nobody else's.
    a.sh("f=$(python3 -c 'import sltestpkg; print(sltestpkg.__file__)'); echo 'VALUE = 666' > $f")
    b = box()
    t1 = time.time()
    r = install(b, pip=["sltestpkg==1.0"])
    assert r.status == 200 and r.json()["from_cache"] is True, r
    assert registry_hits(net, t1, "198.51.100.20") == [], "the second install downloaded"
    out = b.sh("python3 -c 'import sltestpkg; print(sltestpkg.VALUE)'")
    assert out["stdout"] == "42\n", out


def test_npm_install_on_create_then_from_the_cache(box, net):
    net.add_npm("sltest-left", "1.0.0", "module.exports = (s, n) => String(s).padStart(n);\n",
                scripts={"postinstall": "node -e \"require('fs').writeFileSync('ran', 'yes')\""})
    t0 = time.time()
    a = box(packages={"npm": ["sltest-left@1.0.0"]})
    assert a.record["packages_install"]["from_cache"] is False, a.record
    assert a.record["options"]["packages"] == {"pip": [], "npm": ["sltest-left@1.0.0"]}, a.record
    assert registry_hits(net, t0, "198.51.100.21"), "nothing was downloaded from npm.test"
    out = a.sh("node -e \"console.log(require('sltest-left')('x', 3))\"; "
               "cat node_modules/sltest-left/ran")
    assert out["stdout"] == "  x\nyes", out   # its install script ran here, in the sandbox
    b = box()
    t1 = time.time()
    r = install(b, npm=["sltest-left@1.0.0"])
    assert r.status == 200 and r.json()["from_cache"] is True, r
    assert registry_hits(net, t1, "198.51.100.21") == []
    out = b.sh("node -e \"console.log(require('sltest-left')('y', 2))\"")
    assert out["stdout"] == " y\n", out


def test_failed_install_says_why_and_leaves_the_sandbox_usable(box, net, d):
    b = box(ALLOW)
    r = install(b, pip=["sltest-missing==9.9"])
    assert r.status == 422, r
    e = r.json()["error"]
    assert e["code"] == "package_install_failed", e
    assert "pip download failed" in e["message"], e
    assert "No matching distribution found for sltest-missing==9.9" in e["output"], e
    assert b.sh("echo alive")["stdout"] == "alive\n"
    # Its own policy is as it was.
    assert b.d.get(f"/v1/sandboxes/{b.id}/network").json()["allow"] == ["allowed.test"]
    # A create whose packages fail is a failed create, with the output.
    r = d.post("/v1/sandboxes", json_body={"packages": {"npm": ["sltest-missing@1.0.0"]}},
               timeout=300)
    assert r.status == 422 and "npm download failed" in r.json()["error"]["message"], r
    assert "404" in r.json()["error"]["output"], r


@pytest.mark.parametrize("packages,want", [
    ({"pip": ["--index-url=https://evil.example/simple"]}, "invalid pip package"),
    ({"pip": ["pkg @ https://evil.example/pkg.whl"]}, "invalid pip package"),
    ({"pip": ["../../etc"]}, "invalid pip package"),
    ({"pip": ["pkg; python_version>'3'"]}, "invalid pip package"),
    ({"npm": ["git+https://github.com/x/y.git"]}, "invalid npm package"),
    ({"npm": ["x@npm:evil@1"]}, "invalid npm package"),
    ({"npm": ["file:../x"]}, "invalid npm package"),
    ({"cargo": ["serde"]}, "unknown field"),
    ({"pip": "pandas"}, "array"),
])
def test_bad_package_specifiers_are_refused(box, packages, want):
    b = box()
    r = install(b, **packages)
    assert r.status == 400 and want in r.json()["error"]["message"], r


def test_the_cache_is_out_of_every_sandbox(box, d):
    cache = Path(d.data_dir) / "cache" / "packages"
    assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700 and cache.stat().st_uid == 0
    b = box()
    out = b.sh("ls -a / /tmp /var/lib 2>&1; find / -xdev -name 'KEY' 2>/dev/null | head")
    assert "sandlot-packages" not in out["stdout"] and "cache" not in out["stdout"], out


# ---- the real registries (optional) ---------------------------------------------------------------

def reachable(host):
    import socket
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return None
    except OSError as e:
        return f"{host}:443 is not reachable from this machine ({e})"


@pytest.mark.parametrize("manager,spec,check", [
    ("pip", "tomli==2.0.1", "python3 -c 'import tomli; print(tomli.loads(\"a = 1\")[\"a\"])'"),
    ("npm", "left-pad@1.3.0", "node -e \"console.log(require('left-pad')('1', 2, '0'))\""),
])
def test_real_registry_through_the_allowlist(sandlot, manager, spec, check):
    host = "pypi.org" if manager == "pip" else "registry.npmjs.org"
    why = reachable(host)
    if why:
        pytest.skip(why)
    # The host's CA bundle: node trusts only its own otherwise, which is
    # not what this host's operator chose.
    env = {"SANDLOT_PACKAGE_CA": "/etc/ssl/certs/ca-certificates.crt"}
    r = sandlot.run([f"--{manager}", spec, "--", "sh", "-c", check], extra_env=env, timeout=300)
    assert r.rc == 0 and r.stdout in ("1\n", "01\n"), r
