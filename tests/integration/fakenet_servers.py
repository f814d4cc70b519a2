"""The servers of the fake internet (fakenet.py), run inside its "internet"
namespace: TLS on 443 and 8443, HTTP on 80, a UDP echo on 7 and 443, all on
every address of the namespace.  Each connection is recorded, as one JSON
line in the log file, with the address it arrived at and the name it asked
for (SNI or Host), so tests can prove where a connection went or that it
never arrived.  Prints "ready" once every socket listens.

    python3 fakenet_servers.py CERT KEY LOG DOCROOT

HTTPS serves DOCROOT (GET, HEAD; a package index for the pip and npm tests),
plus /big/N (N bytes of zeros, for the throughput benchmark) and /echo-host.
"""
import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CERT, KEY, LOG, DOCROOT = sys.argv[1:5]
log_lock = threading.Lock()


def record(**kw):
    kw["t"] = time.time()
    with log_lock, open(LOG, "a") as f:
        f.write(json.dumps(kw) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        local = self.connection.getsockname()[0]
        record(kind="http", tls=self.server.tls, addr=local, port=self.server.server_port,
               host=self.headers.get("Host"), path=self.path,
               sni=getattr(self.connection, "sni", None))
        if self.path.startswith("/big/"):
            n = int(self.path[5:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            if head:
                return
            chunk = b"\0" * 65536
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
            return
        if self.path == "/echo-host":
            body = json.dumps({"host": self.headers.get("Host"), "addr": local}).encode()
            ctype = "application/json"
        else:
            path = os.path.normpath(os.path.join(DOCROOT, self.path.split("?")[0].lstrip("/")))
            if not path.startswith(os.path.abspath(DOCROOT)):
                self.send_error(404)
                return
            if os.path.isdir(path):
                # a package index page, or an npm packument
                json_index = os.path.join(path, "index.json")
                path = json_index if os.path.exists(json_index) else os.path.join(path, "index.html")
            try:
                with open(path, "rb") as f:
                    body = f.read()
            except OSError:
                self.send_error(404)
                return
            ctype = "application/json" if path.endswith(".json") else (
                "text/html" if path.endswith(".html") else "application/octet-stream")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, port, tls):
        self.tls = tls
        super().__init__(("0.0.0.0", port), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(CERT, KEY)

            def on_sni(sock, name, _ctx):
                sock.sni = name
                record(kind="sni", addr=sock.getsockname()[0], port=port, sni=name)
            ctx.sni_callback = on_sni
            self.ctx = ctx

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.tls:
            record(kind="tcp", addr=sock.getsockname()[0], port=self.server_port)
            sock = self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        else:
            record(kind="tcp", addr=sock.getsockname()[0], port=self.server_port)
        return sock, addr

    def finish_request(self, request, client_address):
        if self.tls:
            try:
                request.settimeout(10)
                request.do_handshake()
            except (OSError, ssl.SSLError) as e:
                record(kind="tls_error", addr=request.getsockname()[0], error=str(e)[:200])
                return
        super().finish_request(request, client_address)


def udp_echo(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))

    def loop():
        while True:
            data, peer = s.recvfrom(4096)
            record(kind="udp", port=port, peer=peer[0])
            s.sendto(data, peer)
    threading.Thread(target=loop, daemon=True).start()


servers = [Server(443, True), Server(8443, True), Server(80, False)]
for srv in servers:
    threading.Thread(target=srv.serve_forever, daemon=True).start()
udp_echo(7)
udp_echo(443)
print("ready", flush=True)
threading.Event().wait()
