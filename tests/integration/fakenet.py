"""A fake internet for the network tests, built from network namespaces the
test makes itself (no real network is touched, nothing is left behind).

    HOST ("sle<pid>h")                     NET ("sle<pid>n"): the internet
    sandlotd runs here                     dnsmasq on 198.51.100.53 (query log)
    198.51.100.1/24 --------- veth -------- 198.51.100.2/24
    default via .2                          .10 allowed.test    .11 blocked.test
    127.0.0.1:8080 and .1:8080: a           .12 cdn.allowed.test .20 pypi.test
      "host service" that must never        .21 npm.test
      see a connection                      10.0.0.5, 169.254.169.254, 100.64.0.5:
                                              "private", "metadata", "CGNAT" hosts
                                            TLS on 443 and 8443, HTTP on 80, UDP
                                            echo on 7 and 443, on every address,
                                            each connection logged with the
                                            address it reached and its SNI/Host

The daemon under test runs in HOST (`nsenter --net`, so it keeps the host's
mounts and cgroups), with --resolver 198.51.100.53.  A test CA signs one
certificate for every test name; sandboxes get the CA file uploaded.

Nothing outlives the tests: every name carries the test process's pid
(hostscan.fakenet_tag()); stop() ends the processes and removes the
namespaces (and with them the veth pair), and says what is left; the
processes are killed (the daemon gets SIGTERM) if the test process dies
first (setpriv --pdeathsig, nsrun()), and the namespaces of a test process
that is gone are removed by the next fake internet that starts.  The check
is hostscan.fakenet_leftovers().
"""
import base64
import hashlib
import io
import ipaddress
import json
import os
import tarfile
import zipfile
import shutil
import signal
import subprocess
import time
from pathlib import Path

from conftest import read_line_with_deadline, wait_until
import hostscan

HERE = Path(__file__).resolve().parent
NAMES = {
    "allowed.test": "198.51.100.10",
    "blocked.test": "198.51.100.11",
    "cdn.allowed.test": "198.51.100.12",
    "rebind.allowed.test": "10.0.0.5",
    "meta.allowed.test": "169.254.169.254",
    "lo.allowed.test": "127.0.0.1",
    "zero.allowed.test": "0.0.0.0",
    "cgnat.allowed.test": "100.64.0.5",
    "hostself.allowed.test": "198.51.100.1",
    "pypi.test": "198.51.100.20",
    "files.pypi.test": "198.51.100.20",
    "npm.test": "198.51.100.21",
}
INSIDE = ("10.0.0.5", "169.254.169.254", "100.64.0.5")


def sh(*argv, check=True, **kw):
    return subprocess.run([str(a) for a in argv], check=check, capture_output=True, text=True,
                          **kw)


class FakeNet:
    def __init__(self, base):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        tag = hostscan.fakenet_tag()
        self.host_ns, self.net_ns = tag + "h", tag + "n"
        self.veth_h, self.veth_n = tag + "a", tag + "b"
        self.procs = []
        self.server_log = self.base / "servers.log"
        self.dns_log = self.base / "dnsmasq.log"
        self.host_log = self.base / "host-service.log"
        self.docroot = self.base / "www"
        self.docroot.mkdir(exist_ok=True)

    # -- set-up --------------------------------------------------------------
    def start(self):
        sweep_stale()
        try:
            self._netns()
            self._ca()
            self._dnsmasq()
            self._servers()
            self._host_service()
        except BaseException:
            self.stop()
            raise
        return self

    def _netns(self):
        for ns in (self.host_ns, self.net_ns):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", self.veth_h, "netns", self.host_ns, "type", "veth", "peer",
           "name", self.veth_n, "netns", self.net_ns)
        H = ("ip", "-n", self.host_ns)
        N = ("ip", "-n", self.net_ns)
        sh(*H, "addr", "add", "198.51.100.1/24", "dev", self.veth_h)
        sh(*H, "link", "set", self.veth_h, "up")
        sh(*H, "link", "set", "lo", "up")
        sh(*H, "route", "add", "default", "via", "198.51.100.2")
        sh(*N, "addr", "add", "198.51.100.2/24", "dev", self.veth_n)
        sh(*N, "link", "set", self.veth_n, "up")
        sh(*N, "link", "set", "lo", "up")
        for a in ("198.51.100.10", "198.51.100.11", "198.51.100.12", "198.51.100.20",
                  "198.51.100.21", "198.51.100.53") + INSIDE:
            sh(*N, "addr", "add", a + "/32", "dev", self.veth_n)
        for a in INSIDE:
            sh(*H, "route", "add", a + "/32", "via", "198.51.100.2")

    def _ca(self):
        d = self.base
        self.ca = d / "ca.pem"
        self.cert, self.key = d / "server.pem", d / "server.key"
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
           "-subj", "/CN=sandlot test CA", "-keyout", d / "ca.key", "-out", self.ca,
           "-addext", "basicConstraints=critical,CA:TRUE",
           "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test",
           "-keyout", self.key, "-out", d / "server.csr")
        san = ",".join(f"DNS:{n}" for n in ("allowed.test", "*.allowed.test", "blocked.test",
                                             "pypi.test", "*.pypi.test", "npm.test"))
        (d / "ext.cnf").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                   "extendedKeyUsage=serverAuth\n")
        sh("openssl", "x509", "-req", "-in", d / "server.csr", "-CA", self.ca, "-CAkey",
           d / "ca.key", "-CAcreateserial", "-days", "2", "-out", self.cert,
           "-extfile", d / "ext.cnf")

    def nsrun(self, ns, argv, **kw):
        """Start argv in namespace ns, in a process group of its own under a
        small sh that gets SIGTERM if this process dies (setpriv
        --pdeathsig) and then kills it: a parent-death signal set on the
        program itself would not do, as it is cleared when a program
        changes its credentials (dnsmasq does, even as --user=root).
        stop() kills the whole group."""
        guard = 'trap \'kill -9 "$child"; exit 1\' TERM; "$@" & child=$!; wait "$child"'
        p = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "sh", "-c", guard, "sh",
                              "nsenter", f"--net=/run/netns/{ns}", *map(str, argv)],
                             start_new_session=True, **kw)
        hostscan.fakenet_register_process(p.pid)
        return p

    def _dnsmasq(self):
        args = ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                "--no-hosts", "--bind-interfaces", "--listen-address=198.51.100.53",
                "--port=53", "--user=root", "--pid-file=", "--log-queries",
                f"--log-facility={self.dns_log}", "--cache-size=0"]
        args += [f"--address=/{n}/{a}" for n, a in NAMES.items()]
        p = self.nsrun(self.net_ns, args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        self.procs.append(p)
        ok = wait_until(lambda: p.poll() is not None or self.dns_ready(), 10)
        if p.poll() is not None or not ok:
            raise RuntimeError(f"dnsmasq did not start: {self.dns_log.read_text(errors='replace') if self.dns_log.exists() else ''}")

    def dns_ready(self):
        r = subprocess.run(["nsenter", f"--net=/run/netns/{self.net_ns}", "python3", "-c",
                            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                            "s.settimeout(0.5); s.sendto(bytes.fromhex('abcd01000001000000000000"
                            "0570726f626504746573740000010001'), ('198.51.100.53', 53));"
                            "s.recv(512)"], capture_output=True)
        return r.returncode == 0

    def _servers(self):
        p = self.nsrun(self.net_ns, ["/usr/bin/python3", HERE / "fakenet_servers.py", self.cert,
                                     self.key, self.server_log, self.docroot],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(p)
        line = read_line_with_deadline(p.stdout, time.monotonic() + 20)
        if line.strip() != b"ready":
            raise RuntimeError(f"fake internet servers did not start: {line!r} "
                               f"{p.stderr.read1(4000) if p.poll() is not None else b''!r}")

    def _host_service(self):
        code = ("import socket, sys, threading\n"
                "log = open(sys.argv[1], 'a', buffering=1)\n"
                "def serve(addr):\n"
                "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "    s.bind((addr, 8080)); s.listen(16)\n"
                "    while True:\n"
                "        c, peer = s.accept(); log.write(f'{addr} {peer[0]}\\n'); c.close()\n"
                "for a in ('127.0.0.1', '198.51.100.1'):\n"
                "    threading.Thread(target=serve, args=(a,), daemon=True).start()\n"
                "print('ready', flush=True)\n"
                "threading.Event().wait()\n")
        p = self.nsrun(self.host_ns, ["/usr/bin/python3", "-c", code, self.host_log],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        if read_line_with_deadline(p.stdout, time.monotonic() + 10).strip() != b"ready":
            raise RuntimeError("the host service did not start")

    def stop(self):
        """End the processes and remove the namespaces.  Returns problems
        (strings): an nftables table the daemon left in the host namespace
        (its rules belong in each sandbox's own), and anything that is still
        there after the removal."""
        problems = []
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            for s in (p.stdout, p.stderr):
                if s:
                    s.close()
        self.procs = []
        # Nothing else may be left inside (the daemon under test is stopped
        # before this; a process that outlived it would keep the namespace).
        gone = wait_until(lambda: not any(hostscan.processes_in_netns(ns)
                                          for ns in (self.host_ns, self.net_ns)), 10)
        if not gone:
            for ns in (self.host_ns, self.net_ns):
                for pid in hostscan.processes_in_netns(ns):
                    problems.append(f"process {pid} still in {ns}: "
                                    f"{b' '.join(hostscan.cmdline(pid)).decode(errors='replace')}")
        if os.path.exists(f"/run/netns/{self.host_ns}"):
            r = sh("ip", "netns", "exec", self.host_ns, "nft", "list", "tables", check=False)
            if r.stdout.strip():
                problems.append(f"nftables tables in the fake host namespace: {r.stdout.strip()}")
        for ns in (self.host_ns, self.net_ns):
            if os.path.exists(f"/run/netns/{ns}"):
                r = sh("ip", "netns", "del", ns, check=False)
                if r.returncode != 0:
                    problems.append(f"ip netns del {ns}: {r.stderr.strip()}")
        return problems + hostscan.fakenet_leftovers()

    # -- observations ---------------------------------------------------------
    def server_events(self):
        if not self.server_log.exists():
            return []
        return [json.loads(ln) for ln in self.server_log.read_text().splitlines() if ln.strip()]

    def arrivals(self, since=0.0, addr=None):
        """Connections the servers saw after `since` (time.time()), at addr."""
        return [e for e in self.server_events()
                if e["t"] >= since and (addr is None or e.get("addr") == addr)]

    def dns_queries(self):
        """Names dnsmasq was asked for (its query log)."""
        if not self.dns_log.exists():
            return []
        out = []
        for ln in self.dns_log.read_text(errors="replace").splitlines():
            # "... query[A] allowed.test from 198.51.100.1"
            if " query[" in ln:
                name = ln.split(" query[", 1)[1].split("] ", 1)[1].split(" ", 1)[0]
                if name != "probe.test":   # dns_ready()'s
                    out.append(name)
        return out

    def host_service_hits(self):
        return self.host_log.read_text().splitlines() if self.host_log.exists() else []

    # -- package registries ------------------------------------------------------
    def add_wheel(self, name, version, code):
        """A pure-Python wheel of module `name`, listed in the PEP 503 index
        at https://pypi.test/simple/NAME/."""
        dist = f"{name}-{version}.dist-info"
        files = {
            f"{name}/__init__.py": code.encode(),
            f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandlot-tests\n"
                             b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        }
        record = ""
        for path, data in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record += f"{path},sha256={digest},{len(data)}\n"
        files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for path, data in files.items():
                z.writestr(path, data)
        whl = f"{name}-{version}-py3-none-any.whl"
        (self.docroot / "files").mkdir(exist_ok=True)
        (self.docroot / "files" / whl).write_bytes(buf.getvalue())
        sha = hashlib.sha256(buf.getvalue()).hexdigest()
        d = self.docroot / "simple" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "index.html").write_text(
            f'<html><body><a href="../../files/{whl}#sha256={sha}">{whl}</a></body></html>\n')
        (self.docroot / "simple" / "index.html").write_text(
            "".join(f'<a href="{p.name}/">{p.name}</a>\n'
                    for p in (self.docroot / "simple").iterdir() if p.is_dir()))

    def add_npm(self, name, version, index_js, scripts=None):
        """An npm package at https://npm.test/NAME (packument) with its tarball."""
        pkg = {"name": name, "version": version, "main": "index.js"}
        if scripts:
            pkg["scripts"] = scripts
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            for path, data in (("package/package.json", json.dumps(pkg).encode()),
                               ("package/index.js", index_js.encode())):
                info = tarfile.TarInfo(path)
                info.size = len(data)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
        tgz = buf.getvalue()
        d = self.docroot / name
        (d / "-").mkdir(parents=True, exist_ok=True)
        fname = f"{name}-{version}.tgz"
        (d / "-" / fname).write_bytes(tgz)
        packument = {
            "name": name, "dist-tags": {"latest": version},
            "versions": {version: dict(pkg, dist={
                "tarball": f"https://npm.test/{name}/-/{fname}",
                "shasum": hashlib.sha1(tgz).hexdigest(),
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
            })},
        }
        (d / "index.json").write_text(json.dumps(packument))

    def daemon_prefix(self):
        """What runs sandlotd (or the CLI) in HOST: nsenter, with a SIGTERM
        if the test process dies first, so that the daemon ends its
        sandboxes and goes too."""
        return ["setpriv", "--pdeathsig", "TERM", "nsenter", f"--net=/run/netns/{self.host_ns}"]


def sweep_stale():
    """Remove the namespaces of fake internets whose test process is gone
    (killed before it could stop its own): names of the form sle<pid>h and
    sle<pid>n with no process <pid>.  Their processes died with the test
    process (parent-death signal), so nothing is killed here."""
    for name in hostscan.netns_names():
        tag, kind = name[:-1], name[-1:]
        if kind in ("h", "n") and tag.startswith("sle") and tag[3:].isdigit() \
                and not os.path.exists(f"/proc/{tag[3:]}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def available():
    """Why the fake internet cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "nsenter", "setpriv", "dnsmasq", "openssl", "nft"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (make test-deps installs it)"
    return None


def is_inside(addr):
    return ipaddress.ip_address(addr).is_private
