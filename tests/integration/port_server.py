"""A test server run *inside* sandboxes by test_daemon_ports.py (standard
library only): python3 port_server.py PORT [BIND].

  GET  /big?n=N        N bytes of a fixed pattern, with Content-Length
  GET  /chunked?n=N    the same N bytes, chunked (no Content-Length)
  GET  /stream?n=N     N lines, one every 50 ms, chunked (for disconnects)
  GET  /headers        the request line and headers as JSON
  POST /echo           {"length": N, "sha256": ...} of the body (Content-Length
                       or chunked)
  GET  /close-early    promises 100000 bytes, sends 10, closes the connection
  GET  /ws             a WebSocket (RFC 6455) that echoes every text and binary
                       message and answers a close with a close

Prints "ready PORT" once it listens.
"""
import base64
import hashlib
import http.server
import json
import socketserver
import struct
import sys
import time
import urllib.parse

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


BLOCK = bytes(range(256)) * 256  # 64 KiB


def pattern_pieces(n):
    """N bytes of the pattern, in 64 KiB pieces (the sandbox's memory is
    small; nothing holds the whole body)."""
    while n > 0:
        piece = BLOCK[:min(n, len(BLOCK))]
        n -= len(piece)
        yield piece


def recv_exact(f, n):
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data


def ws_read_frame(f):
    b0, b1 = recv_exact(f, 2)
    opcode = b0 & 0x0F
    masked = b1 & 0x80
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(f, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(f, 8))[0]
    mask = recv_exact(f, 4) if masked else b"\0\0\0\0"
    payload = bytearray(recv_exact(f, n))
    for i in range(n):
        payload[i] ^= mask[i % 4]
    return opcode, bytes(payload)


def ws_frame(opcode, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def query(self):
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)

    def send_json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/big":
            n = int(self.query()["n"][0])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            for piece in pattern_pieces(n):
                self.wfile.write(piece)
        elif path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in pattern_pieces(int(self.query()["n"][0])):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(self.query()["n"][0])):
                line = b"line %d\n" % i
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/headers":
            self.send_json({"method": self.command, "path": self.path,
                            "headers": [[k, v] for k, v in self.headers.items()]})
        elif path == "/close-early":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
        elif path == "/ws":
            self.websocket()
        else:
            self.send_error(404)

    def do_POST(self):
        h = hashlib.sha256()
        total = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data = recv_exact(self.rfile, size)
                self.rfile.readline()
                h.update(data)
                total += size
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                data = self.rfile.read(min(left, 1 << 20))
                if not data:
                    break
                h.update(data)
                total += len(data)
                left -= len(data)
        self.send_json({"length": total, "sha256": h.hexdigest()})

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            self.send_error(400)
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        # A greeting the server sends first: it must arrive too.
        self.wfile.write(ws_frame(1, b"hello from inside"))
        self.wfile.flush()
        try:
            while True:
                opcode, payload = ws_read_frame(self.rfile)
                if opcode == 8:
                    self.wfile.write(ws_frame(8, payload))
                    self.wfile.flush()
                    break
                if opcode in (1, 2):
                    self.wfile.write(ws_frame(opcode, payload))
                    self.wfile.flush()
                elif opcode == 9:
                    self.wfile.write(ws_frame(10, payload))
                    self.wfile.flush()
        except (EOFError, OSError):
            pass
        self.close_connection = True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    port = int(sys.argv[1])
    bind = sys.argv[2] if len(sys.argv) > 2 else "0.0.0.0"
    srv = Server((bind, port), Handler)
    print("ready", port, flush=True)
    srv.serve_forever()
