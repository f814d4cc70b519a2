#!/usr/bin/python3
"""Request latency to a server inside a sandbox, through an exposed port,
side by side with the same server reached directly on the host.

    make && sudo /usr/bin/python3 bench/ports.py [-n 2000] [--warmup 200]

One small HTTP/1.1 server (standard library, 200 with a 2-byte body) runs
twice: on the host's 127.0.0.1 (the baseline: no sandlot at all) and inside
a sandbox on port 8000.  Rows, each N requests with a new TCP connection
per request (what a browser's first request or a CLI tool does), then the
same with one kept-alive connection where that applies:

  host           the host's server, directly
  url            the sandbox's server at the port's URL (sandlotd's relay:
                 accept, a connector thread that enters the sandbox's
                 network namespace, then bytes spliced both ways)
  proxy          through the API's proxy route on the unix socket
                 (/v1/sandboxes/ID/ports/8000/...: HTTP parsed, one upstream
                 connection per request)
  host-keepalive, url-keepalive
                 one connection, N requests: the relay's per-byte cost only

Prints p50, p90, p99 and mean in milliseconds, the ratio of each row's p50
to the host's, and the load average (other work on the machine skews it).
"""
import argparse
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import UnixConn, percentile, request, start_daemon

SERVER = r'''
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body are two writes
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
class S(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
s = S(("127.0.0.1", int(sys.argv[1])), H)
print("ready", s.server_address[1], flush=True)
s.serve_forever()
'''


def timed_new_connections(open_conn, path, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = open_conn()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        out.append((time.perf_counter() - t0) * 1000)
        if r.status != 200 or body != b"ok":
            sys.exit(f"unexpected answer {r.status} {body[:200]!r}")
    return out


def timed_keepalive(conn, path, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        out.append((time.perf_counter() - t0) * 1000)
        if r.status != 200 or body != b"ok":
            sys.exit(f"unexpected answer {r.status} {body[:200]!r}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=int(os.environ.get("N", 2000)))
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandlotd creates sandboxes)")
    base = Path(tempfile.mkdtemp(prefix="sandlot-bench-ports-", dir="/var/tmp"))
    proc = host_srv = None
    try:
        proc, sock = start_daemon(base)
        api = UnixConn(sock)
        st, rec, _ = request(api, "POST", "/v1/sandboxes", {"ports": [8000], "memory": "256M"})
        if st != 201:
            sys.exit(f"create failed: {st} {rec}")
        sid = rec["id"]
        url_port = int(rec["ports"][0]["url"].rsplit(":", 1)[1])
        api.request("PUT", f"/v1/sandboxes/{sid}/files?path=srv.py", body=SERVER.encode())
        api.getresponse().read()
        st, ex, _ = request(api, "POST", f"/v1/sandboxes/{sid}/exec",
                            {"command": "exec python3 srv.py 8000", "background": True})
        follow = UnixConn(sock)
        follow.request("GET", f"/v1/sandboxes/{sid}/execs/{ex['exec_id']}?follow=1")
        resp = follow.getresponse()
        while b"ready" not in resp.readline():
            pass
        follow.close()
        # the same server on the host
        host_srv = subprocess.Popen([sys.executable, "-c", SERVER, "0"], stdout=subprocess.PIPE)
        host_port = int(host_srv.stdout.readline().split()[1])

        def host_conn():
            return http.client.HTTPConnection("127.0.0.1", host_port, timeout=30)

        def url_conn():
            return http.client.HTTPConnection("127.0.0.1", url_port, timeout=30)

        def proxy_conn():
            return UnixConn(sock, 30)

        proxy_path = f"/v1/sandboxes/{sid}/ports/8000/"
        rows = {}
        for name, opener, path in (("host", host_conn, "/"), ("url", url_conn, "/"),
                                   ("proxy", proxy_conn, proxy_path)):
            timed_new_connections(opener, path, args.warmup)
        # interleaved in rounds so that drift in the machine's load hits
        # every row alike
        rounds = 10
        per = max(1, args.n // rounds)
        for _ in range(rounds):
            for name, opener, path in (("host", host_conn, "/"), ("url", url_conn, "/"),
                                       ("proxy", proxy_conn, proxy_path)):
                rows.setdefault(name, []).extend(timed_new_connections(opener, path, per))
            for name, opener in (("host-keepalive", host_conn), ("url-keepalive", url_conn)):
                c = opener()
                rows.setdefault(name, []).extend(timed_keepalive(c, "/", per))
                c.close()
        load = open("/proc/loadavg").read().split()[:3]
        print(f"requests per row: {per * rounds}, new connection each (keepalive rows: one "
              f"connection); load average {' '.join(load)}; {os.cpu_count()} CPUs")
        print(f"{'row':16} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'mean ms':>8} "
              f"{'p50/host':>9}")
        base_p50 = {"host": percentile(rows["host"], 0.5),
                    "keep": percentile(rows["host-keepalive"], 0.5)}
        for name, xs in rows.items():
            p50 = percentile(xs, 0.5)
            ref = base_p50["keep"] if name.endswith("keepalive") else base_p50["host"]
            print(f"{name:16} {p50:8.3f} {percentile(xs, 0.9):8.3f} {percentile(xs, 0.99):8.3f} "
                  f"{sum(xs) / len(xs):8.3f} {p50 / ref:9.2f}")
        request(api, "DELETE", f"/v1/sandboxes/{sid}")
    finally:
        if host_srv:
            host_srv.kill()
            host_srv.wait()
        if proc:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
