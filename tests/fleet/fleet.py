"""A sandlot fleet on one machine, for tests and benchmarks (docs/fleet.md).

    fleet = Fleet(base, data_parent, nodes=3).start()
    r = fleet.edge.post("/v1/sandboxes", json_body={})       # through HAProxy
    fleet.nodes[0].daemon.get(...)                            # one node, directly
    fleet.kill9(2); fleet.restart(2); fleet.hang(1); fleet.partition(0)
    fleet.stop()                                              # everything gone

Layout (RFC 2544 benchmarking addresses, only ever inside namespaces made
here; nothing is added to the host's own network namespace):

    netns TAG-edge   bridge br0 198.18.0.1/24; HAProxy (deploy/haproxy/
                     sandlot.cfg) on 198.18.0.1:8080, sandlot-gateway on
                     198.18.0.1:7000; veth eI to each node
    netns TAG-nI     eth0 198.18.0.(10+I)/24; sandlotd --node-id nI on
                     :7070 (TCP, the fleet's token), its agent port :7071,
                     and its unix socket in the test's directory

Every process is started by us and stopped by pid; the namespaces are
deleted by name at stop().  The test process reaches the edge namespace
without a route into it: a socket made by a thread that entered the
namespace (setns) stays in it (NetnsHTTPConnection).
"""
import ctypes
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from conftest import BIN_DIR, REPO, sanitizer_report_of
from daemon import Daemon, Response

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

HAPROXY_CFG = REPO / "deploy" / "haproxy" / "sandlot.cfg"
EDGE_IP = "198.18.0.1"
EDGE_PORT = 8080
GATEWAY_PORT = 7000
NODE_PORT = 7070
AGENT_PORT = 7071


def gateway_binary():
    for d in (BIN_DIR, REPO / "build" / "bin"):
        if os.access(d / "sandlot-gateway", os.X_OK):
            return d / "sandlot-gateway"
    raise RuntimeError("no sandlot-gateway built (run `make`)")


def netns_socket(ns, family=socket.AF_INET, kind=socket.SOCK_STREAM):
    """A new socket in network namespace `ns` (setns in a short-lived
    thread: the namespace is per thread, the socket keeps it)."""
    out = {}

    def run():
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns {ns}: {os.strerror(e)}")
            finally:
                os.close(fd)
            out["sock"] = socket.socket(family, kind)
        except BaseException as e:  # handed to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["sock"]


class NetnsHTTPConnection(http.client.HTTPConnection):
    def __init__(self, ns, host, port, timeout=60):
        super().__init__(host, port, timeout=timeout)
        self.ns = ns

    def connect(self):
        s = netns_socket(self.ns)
        s.settimeout(self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect((self.host, self.port))
        self.sock = s


class Endpoint:
    """HTTP to host:port inside a namespace, with the fleet's token.  One
    kept-alive connection per thread (a benchmark's loop reuses it)."""

    def __init__(self, ns, host, port, token):
        self.ns, self.host, self.port, self.token = ns, host, port, token
        self.local = threading.local()

    def conn(self, timeout=60, fresh=False):
        if fresh:
            return NetnsHTTPConnection(self.ns, self.host, self.port, timeout)
        c = getattr(self.local, "conn", None)
        if c is None:
            c = self.local.conn = NetnsHTTPConnection(self.ns, self.host, self.port, timeout)
        c.timeout = timeout
        if c.sock is not None:
            c.sock.settimeout(timeout)
        return c

    def request(self, method, path, body=None, json_body=None, headers=None, timeout=60, auth=True,
                fresh=False):
        h = dict(headers or {})
        if auth:
            h.setdefault("Authorization", f"Bearer {self.token}")
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h.setdefault("Content-Type", "application/json")
            headers = h
        c = self.conn(timeout, fresh)
        reused = c.sock is not None
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            resp = Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        except (OSError, http.client.HTTPException) as e:
            c.close()
            if not fresh:
                self.local.conn = None
            # A kept-alive connection the proxy closed while it was idle
            # (timeout http-keep-alive): sent again on a new one, as HTTP
            # clients do.  Nothing reached a node on it.
            if reused and isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError,
                                         ConnectionResetError)):
                return self.request(method, path, body=body, headers=headers, timeout=timeout,
                                    auth=auth, fresh=fresh)
            raise
        if fresh:
            c.close()
        return resp

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json_body=None, **kw):
        return self.request("POST", path, json_body=json_body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def close(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
            self.local.conn = None


def _run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))}: {r.stderr.strip()}")
    return r.stdout


def wait_for(cond, timeout, what):
    """Poll cond() until true (a condition, not a sleep: bounded, checked
    often); raise saying what did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


class Node:
    def __init__(self, fleet, index, data_dir, extra_args):
        self.fleet = fleet
        self.index = index
        self.name = f"n{index}"
        self.ns = f"{fleet.tag}-n{index}"
        self.ip = f"198.18.0.{10 + index}"
        self.url = f"http://{self.ip}:{NODE_PORT}"
        self.base = fleet.base / self.name
        self.daemon = Daemon(
            self.base, data_dir=data_dir,
            extra_args=["--listen", f"tcp:{self.ip}:{NODE_PORT}", "--token-file", str(fleet.token_file),
                        "--node-id", self.name, "--agent-port", f"{self.ip}:{AGENT_PORT}", *extra_args],
            prefix=["nsenter", f"--net=/run/netns/{self.ns}", "--"])
        self.http = Endpoint(self.ns, self.ip, NODE_PORT, fleet.token)


class Fleet:
    def __init__(self, base, data_parent, nodes=3, node_args=None, gateway_args=()):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        # Names of our own: a short tag per fleet (netns names are global).
        self.tag = f"sfl{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.edge_ns = f"{self.tag}-edge"
        self.token = secrets.token_hex(16)
        self.token_file = self.base / "token"
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o600)
        self.map_dir = self.base / "maps"
        self.admin_socket = self.base / "haproxy.sock"
        self.gateway_args = list(gateway_args)
        node_args = node_args or {}
        self.nodes = [Node(self, i, Path(data_parent) / f"{self.tag}-n{i}", node_args.get(i, ()))
                      for i in range(1, nodes + 1)]
        self.edge = Endpoint(self.edge_ns, EDGE_IP, EDGE_PORT, self.token)
        self.gateway_http = Endpoint(self.edge_ns, EDGE_IP, GATEWAY_PORT, self.token)
        self.haproxy = None
        self.gateway = None
        self.namespaces = []

    # -- set-up --------------------------------------------------------------
    def start(self):
        try:
            self._network()
            for n in self.nodes:
                n.daemon.start(timeout=60)
            self._start_haproxy()
            self.start_gateway()
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def _network(self):
        _run("ip", "netns", "add", self.edge_ns)
        self.namespaces.append(self.edge_ns)
        e = ("ip", "-n", self.edge_ns)
        _run(*e, "link", "set", "lo", "up")
        _run(*e, "link", "add", "br0", "type", "bridge")
        _run(*e, "addr", "add", f"{EDGE_IP}/24", "dev", "br0")
        _run(*e, "link", "set", "br0", "up")
        for n in self.nodes:
            _run("ip", "netns", "add", n.ns)
            self.namespaces.append(n.ns)
            _run("ip", "link", "add", f"e{n.index}", "netns", self.edge_ns, "type", "veth",
                 "peer", "name", "eth0", "netns", n.ns)
            _run(*e, "link", "set", f"e{n.index}", "master", "br0", "up")
            _run("ip", "-n", n.ns, "addr", "add", f"{n.ip}/24", "dev", "eth0")
            _run("ip", "-n", n.ns, "link", "set", "eth0", "up")
            _run("ip", "-n", n.ns, "link", "set", "lo", "up")

    def _start_haproxy(self):
        self.map_dir.mkdir(exist_ok=True)
        for m in ("nodes.map", "down.map", "moved.map"):
            (self.map_dir / m).touch()
        env = dict(os.environ, SANDLOT_EDGE_BIND=f"{EDGE_IP}:{EDGE_PORT}",
                   SANDLOT_GATEWAY=f"{EDGE_IP}:{GATEWAY_PORT}", SANDLOT_MAP_DIR=str(self.map_dir),
                   SANDLOT_HAPROXY_SOCKET=str(self.admin_socket))
        self.haproxy_log = open(self.base / "haproxy.log", "ab")
        self.haproxy = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.edge_ns}", "--", "haproxy", "-db", "-f", str(HAPROXY_CFG)],
            stdin=subprocess.DEVNULL, stdout=self.haproxy_log, stderr=subprocess.STDOUT, env=env)

        def up():
            if self.haproxy.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.haproxy.returncode}: "
                                   f"{(self.base / 'haproxy.log').read_text()[-3000:]}")
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(str(self.admin_socket))
                s.close()
                return True
            except OSError:
                return False
        wait_for(up, 20, "HAProxy's admin socket")

    def start_gateway(self, wait=True, nodes_file=None):
        """The gateway, told of every node with --node, or with
        --nodes-file nodes_file (which the caller writes)."""
        self.gateway_log_path = self.base / "gateway.log"
        self.gateway_log = open(self.gateway_log_path, "ab")
        args = ["--listen", f"{EDGE_IP}:{GATEWAY_PORT}", "--token-file", str(self.token_file),
                "--map-dir", str(self.map_dir), "--haproxy-socket", str(self.admin_socket),
                "--poll-interval", "200", "--node-timeout", "1000", "--down-after", "2"]
        if nodes_file:
            args += ["--nodes-file", str(nodes_file)]
        else:
            for n in self.nodes:
                args += ["--node", n.url]
        self.gateway = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.edge_ns}", "--", str(gateway_binary()), *args,
             *self.gateway_args],
            stdin=subprocess.DEVNULL, stdout=self.gateway_log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_nodes(lambda ns: all(x["state"] == "ready" for x in ns), "every node ready")
        return self.gateway

    def stop_gateway(self, sig=signal.SIGTERM):
        if self.gateway is None:
            return None
        if self.gateway.poll() is None:
            self.gateway.send_signal(sig)
            self.gateway.wait(timeout=20)
        rc = self.gateway.returncode
        self.gateway = None
        self.gateway_log.close()
        self.gateway_http.close()
        return rc

    # -- views ---------------------------------------------------------------
    def node_states(self):
        r = self.gateway_http.get("/v1/nodes", timeout=10)
        assert r.status == 200, r
        return r.json()["nodes"]

    def wait_nodes(self, cond, what, timeout=30):
        def check():
            if self.gateway is not None and self.gateway.poll() is not None:
                raise RuntimeError(f"sandlot-gateway exited with {self.gateway.returncode}:\n"
                                   f"{self.gateway_log_path.read_text()[-3000:]}")
            try:
                return cond(self.node_states())
            except OSError:
                return False
        return wait_for(check, timeout, what)

    def wait_state(self, name, state, timeout=30):
        """Until the gateway reports node `name` in `state` and HAProxy's
        down.map agrees (the gateway changes the map after its table)."""
        self.wait_nodes(lambda ns: {x["node_id"]: x["state"] for x in ns}.get(name) == state,
                        f"{name} {state}", timeout)
        wait_for(lambda: (name in self.haproxy_map("down.map")) == (state == "unreachable"), timeout,
                 f"HAProxy's down.map to agree that {name} is {state}")

    def state_of(self, name):
        return {x["node_id"]: x["state"] for x in self.node_states()}.get(name)

    def admin(self, command):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(self.admin_socket))
        s.sendall(command.encode() + b"\n")
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
        return out.decode()

    def haproxy_map(self, name):
        out = {}
        for line in self.admin(f"show map {self.map_dir}/{name}").splitlines():
            parts = line.split()
            if len(parts) == 3:
                out[parts[1]] = parts[2]
        return out

    def node_of(self, sid):
        """The nodes whose own registry holds sid (asked directly)."""
        return [n.name for n in self.nodes
                if n.daemon.proc is not None and n.daemon.get(f"/v1/sandboxes/{sid}", timeout=10).status == 200]

    # -- trouble -------------------------------------------------------------
    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def kill9(self, name):
        self.node(name).daemon.kill9()

    def restart(self, name):
        self.node(name).daemon.start(timeout=60)

    def hang(self, name):
        os.kill(self.node(name).daemon.proc.pid, signal.SIGSTOP)

    def unhang(self, name):
        os.kill(self.node(name).daemon.proc.pid, signal.SIGCONT)

    def partition(self, name, cut=True):
        n = self.node(name)
        _run("ip", "-n", self.edge_ns, "link", "set", f"e{n.index}", "down" if cut else "up")

    # -- tear-down -----------------------------------------------------------
    def stop(self, check=True):
        """Stop everything we started, by pid, and delete our namespaces.
        With check, a daemon that does not exit 0 on SIGTERM fails."""
        problems = []
        self.edge.close()
        try:
            rc = self.stop_gateway()
            if check and rc not in (0, None):
                problems.append(f"sandlot-gateway exited with {rc}")
        except Exception as e:  # keep tearing down
            problems.append(f"gateway: {e}")
        if self.haproxy is not None:
            if self.haproxy.poll() is None:
                self.haproxy.terminate()
                try:
                    self.haproxy.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.haproxy.kill()
                    self.haproxy.wait()
            self.haproxy = None
            self.haproxy_log.close()
        for n in self.nodes:
            if n.daemon.proc is None:
                continue
            try:
                os.kill(n.daemon.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            try:
                rc = n.daemon.stop(timeout=60)
                if check and rc != 0:
                    problems.append(f"{n.name}: sandlotd exited with {rc}:\n{n.daemon.logs()}")
            except AssertionError as e:
                problems.append(str(e))
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces = []
        left = [ns for ns in _run("ip", "netns", "list").split() if ns.startswith(self.tag)]
        if left:
            problems.append(f"network namespaces left: {left}")
        if check and problems:
            raise AssertionError("fleet tear-down: " + "\n".join(problems))
