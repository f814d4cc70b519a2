"""Network probes run inside a sandbox by the network tests (uploaded with the
test CA as ca.pem).  Each prints one JSON object: what happened, or the
errno name of what failed ("ECONNRESET", "EPERM", ...).

    python3 netprobe.py resolve NAME
    python3 netprobe.py https HOST [PATH] [--ip IP] [--sni NAME] [--port N]
    python3 netprobe.py http HOST [PATH] [--ip IP] [--port N]
    python3 netprobe.py tcp IP PORT
    python3 netprobe.py udp IP PORT
    python3 netprobe.py dns SERVER NAME [TYPE] [--tcp]
    python3 netprobe.py hello IP NAME VARIANT     (split1, padded, records2, oversized)
    python3 netprobe.py hold HOST SECONDS         (a kept-alive HTTPS connection)
    python3 netprobe.py conns IP N                (N HTTPS connections held open at once)
    python3 netprobe.py icmp | ipv6 | vsock
"""
import errno
import json
import socket
import ssl
import struct
import sys
import time

CA = "ca.pem"


def err(e):
    if isinstance(e, socket.gaierror):
        return {"error": "gaierror", "detail": str(e)}
    if isinstance(e, ssl.SSLError):
        return {"error": "ssl", "detail": str(e)[:200]}
    if isinstance(e, socket.timeout):
        return {"error": "timeout"}
    n = getattr(e, "errno", None)
    return {"error": errno.errorcode.get(n, str(e)) if n else type(e).__name__,
            "detail": str(e)[:200]}


def opt(args, name, default=None):
    if name in args:
        i = args.index(name)
        v = args[i + 1]
        del args[i:i + 2]
        return v
    return default


def request(host, path, ip, sni, port, tls):
    s = socket.create_connection((ip or host, port), timeout=10)
    if tls:
        ctx = ssl.create_default_context(cafile=CA)
        if sni is not None and sni != host:
            ctx.check_hostname = False
        s = ctx.wrap_socket(s, server_hostname=sni if sni is not None else host)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else None
    out = {"status": status}
    try:
        out["body"] = json.loads(body)
    except ValueError:
        out["len"] = len(body)
    return out


def client_hello(name):
    """A real ClientHello for `name`, from the ssl module."""
    ctx = ssl.create_default_context(cafile=CA)
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outg, server_hostname=name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outg.read()


def padded(hello, extra):
    """Add `extra` bytes of extension before the others: as big as the
    hellos with post-quantum key shares, with the server_name further in."""
    rec_hdr, hs = hello[:5], hello[5:]
    assert rec_hdr[0] == 22 and hs[0] == 1
    body = hs[4:]
    off = 2 + 32
    off += 1 + body[off]
    off += 2 + struct.unpack(">H", body[off:off + 2])[0]
    off += 1 + body[off]
    ext_len = struct.unpack(">H", body[off:off + 2])[0]
    # An extension the server does not know (a GREASE value): ignored by it,
    # but read past by any parser looking for the server_name.
    exts = struct.pack(">HH", 0x1a1a, extra) + b"\0" * extra + body[off + 2:off + 2 + ext_len]
    body = body[:off] + struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return hs


def records(hs, sizes):
    """Wrap handshake bytes in records of the given sizes (the last takes the rest)."""
    out, i = b"", 0
    for n in sizes + [len(hs)]:
        part = hs[i:i + n]
        if not part:
            break
        out += b"\x16\x03\x01" + struct.pack(">H", len(part)) + part
        i += len(part)
    return out


def hello(ip, name, variant):
    h = client_hello(name)
    if variant == "split1":
        data = h
    elif variant == "padded":
        data = records(padded(h, 1500), [])
        assert len(data) > 1600
    elif variant == "records2":
        hs = h[5:]
        data = records(hs, [len(hs) // 2])
    elif variant == "oversized":
        hs = b"\x01" + struct.pack(">I", 70000)[1:] + b"\0" * 100
        data = b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs
    else:
        raise SystemExit("unknown variant " + variant)
    s = socket.create_connection((ip, 443), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if variant == "split1":
        for b in data:
            s.send(bytes([b]))
            time.sleep(0.001)
    else:
        s.sendall(data)
    reply = s.recv(5)
    # A TLS record from the server (a ServerHello or an alert) means the
    # hello got through; a reset or EOF means it did not.
    return {"reply_type": reply[0] if reply else None}


def dns(server, name, qtype, tcp):
    types = {"A": 1, "AAAA": 28, "TXT": 16, "HTTPS": 65, "MX": 15}
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", types[qtype], 1)
    if tcp:
        s = socket.create_connection((server, 53), timeout=5)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]
        r = b""
        while len(r) < n:
            r += s.recv(n - len(r))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.sendto(q, (server, 53))
        r = s.recv(4096)
    rcode = r[3] & 15
    an = struct.unpack(">H", r[6:8])[0]
    addrs = []
    off = 12 + len(q) - 12
    for _ in range(an):
        off += 2
        t, _c, _ttl, ln = struct.unpack(">HHIH", r[off:off + 10])
        off += 10
        if t == 1:
            addrs.append(socket.inet_ntoa(r[off:off + 4]))
        off += ln
    return {"rcode": rcode, "answers": addrs, "id_ok": r[:2] == b"\x42\x42"}


def main(argv):
    args = list(argv)
    cmd = args.pop(0)
    try:
        if cmd == "resolve":
            return {"addrs": sorted({a[4][0] for a in socket.getaddrinfo(args[0], 443,
                                                                          socket.AF_INET)})}
        if cmd in ("https", "http"):
            ip, sni, port = opt(args, "--ip"), opt(args, "--sni"), opt(args, "--port")
            host = args[0]
            path = args[1] if len(args) > 1 else "/echo-host"
            tls = cmd == "https"
            return request(host, path, ip, sni, int(port or (443 if tls else 80)), tls)
        if cmd == "tcp":
            s = socket.create_connection((args[0], int(args[1])), timeout=5)
            s.settimeout(float(args[2]) if len(args) > 2 else 3)
            try:
                d = s.recv(1)
                return {"connected": True, "eof": d == b""}
            except OSError as e:
                return dict(err(e), connected=True)
        if cmd == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.sendto(b"ping", (args[0], int(args[1])))
            return {"reply": s.recv(64).decode()}
        if cmd == "dns":
            tcp = "--tcp" in args
            args = [a for a in args if a != "--tcp"]
            return dns(args[0], args[1], args[2] if len(args) > 2 else "A", tcp)
        if cmd == "dnsflood":
            import threading
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect((args[0], 53))
            n = int(args[1])
            rcodes = {}

            def receive():   # while sending, so that no reply waits in a full buffer
                s.settimeout(2)
                try:
                    for _ in range(n):
                        r = s.recv(512)
                        rcodes[r[3] & 15] = rcodes.get(r[3] & 15, 0) + 1
                except socket.timeout:
                    pass
            t = threading.Thread(target=receive)
            t.start()
            for i in range(n):
                s.send(struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) +
                       b"\x07allowed\x04test\x00" + struct.pack(">HH", 28, 1))
                if i % 20 == 19:
                    time.sleep(0.001)
            t.join()
            return {"rcodes": {str(k): v for k, v in rcodes.items()}}
        if cmd == "hello":
            return hello(args[0], args[1], args[2])
        if cmd == "hold":
            ctx = ssl.create_default_context(cafile=CA)
            s = ctx.wrap_socket(socket.create_connection((args[0], 443), timeout=10),
                                server_hostname=args[0])
            req = f"GET /echo-host HTTP/1.1\r\nHost: {args[0]}\r\n\r\n".encode()
            s.sendall(req)
            first = b""
            while b"\r\n\r\n" not in first:
                first += s.recv(65536)
            head, _, body = first.partition(b"\r\n\r\n")
            clen = int([h.split(b":")[1] for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length:")][0])
            while len(body) < clen:
                body += s.recv(65536)
            print(json.dumps({"first": first.startswith(b"HTTP/1.1 200")}), flush=True)
            s.settimeout(float(args[1]))
            try:
                more = s.recv(65536)
                return {"then": "eof" if not more else "data"}
            except OSError as e:
                return {"then": err(e)}
        if cmd == "conns":
            ctx = ssl.create_default_context(cafile=CA)
            held, results = [], []
            for _ in range(int(args[1])):
                try:
                    s = ctx.wrap_socket(socket.create_connection((args[0], 443), timeout=10),
                                        server_hostname=args[0])
                    held.append(s)
                    results.append("ok")
                except OSError as e:
                    results.append(err(e)["error"])
            return {"results": results}
        if cmd == "icmp":
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            return {"made": True}
        if cmd == "ipv6":
            socket.create_connection(("2001:db8::1", 443), timeout=5)
            return {"connected": True}
        if cmd == "vsock":
            socket.socket(40, socket.SOCK_STREAM)
            return {"made": True}
        raise SystemExit("unknown probe " + cmd)
    except OSError as e:
        return err(e)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
