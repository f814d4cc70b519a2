#!/usr/bin/python3
"""File transfer throughput of sandlotd over its unix socket.

    sudo /usr/bin/python3 bench/daemon_files.py [--size-mib 100] [-n 5]
    sudo /usr/bin/python3 bench/daemon_files.py --socket /run/sandlot/sandlot.sock

Starts build/bin/sandlotd on a temporary socket and data dir (or uses the
daemon at --socket), creates one sandbox, and moves a file of --size-mib MiB
(random bytes) N times each way:

    upload    PUT /v1/sandboxes/{id}/files?path=bench.bin   (Content-Length body)
    download  GET /v1/sandboxes/{id}/files?path=bench.bin   (chunked body)

Each transfer is timed from the first byte sent to the last byte received
(the upload's 201 comes after sandlot-init has fsynced and renamed the
file, so the upload time includes getting the data onto the sandbox's
disk).  The client is a raw socket: sendfile(2) of the local file for
uploads, recv_into() of a 4 MiB buffer for downloads with a minimal chunked
decoder, so the client costs little next to the daemon (its CPU time is
printed).  The first download is checked against the SHA-256 of the file.

Local baselines in the same run, on the same file:

    cat       read the file from the page cache into nothing (cat f > /dev/null)
    cp+fsync  copy it into the data dir's filesystem and fsync (what an
              upload must at least do, minus the sandbox's own loop device)

It prints median / min / max MiB/s per row and compares the medians with
the target (500 MiB/s each way).  Exit status 0 whatever the numbers.
"""
import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANDLOTD = REPO / "build" / "bin" / "sandlotd"
MIB = 1 << 20
TARGET_MIBS = 500


def connect(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock_path))
    return s


def read_head(s, buf=b""):
    """Read up to the end of the response headers; returns (status,
    headers dict, bytes already read past them)."""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            raise ConnectionError("connection closed before the response headers")
        buf += b
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def request(sock_path, method, path, body=b""):
    s = connect(sock_path)
    try:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  .encode() + body)
        status, headers, rest = read_head(s)
        while True:
            b = s.recv(65536)
            if not b:
                break
            rest += b
        if headers.get("transfer-encoding") == "chunked":
            out, i = b"", 0
            while True:
                j = rest.index(b"\r\n", i)
                n = int(rest[i:j], 16)
                if n == 0:
                    break
                out += rest[j + 2:j + 2 + n]
                i = j + 4 + n
            rest = out
        return status, rest
    finally:
        s.close()


def upload(sock_path, sid, local, size):
    """Seconds for one PUT of the local file."""
    s = connect(sock_path)
    try:
        with open(local, "rb") as f:
            t0 = time.perf_counter()
            s.sendall(f"PUT /v1/sandboxes/{sid}/files?path=bench.bin HTTP/1.1\r\nHost: bench\r\n"
                      f"Content-Length: {size}\r\nConnection: close\r\n\r\n".encode())
            off = 0
            while off < size:
                off += os.sendfile(s.fileno(), f.fileno(), off, size - off)
            status, _, rest = read_head(s)
            dt = time.perf_counter() - t0
        while True:  # the small JSON answer, up to the server's close
            b = s.recv(65536)
            if not b:
                break
            rest += b
        if status != 201:
            raise RuntimeError(f"upload: HTTP {status}: {rest[:300]!r}")
        return dt
    finally:
        s.close()


def download(sock_path, sid, size, digest=None):
    """Seconds for one GET; checks the SHA-256 if digest is given."""
    s = connect(sock_path)
    buf = bytearray(4 * MIB)
    mv = memoryview(buf)
    h = hashlib.sha256() if digest else None
    got = 0
    try:
        t0 = time.perf_counter()
        s.sendall(f"GET /v1/sandboxes/{sid}/files?path=bench.bin HTTP/1.1\r\nHost: bench\r\n"
                  f"Connection: close\r\n\r\n".encode())
        status, headers, rest = read_head(s)
        if status != 200:
            raise RuntimeError(f"download: HTTP {status}: {rest[:300]!r}")
        if headers.get("transfer-encoding") != "chunked":
            raise RuntimeError(f"download: expected a chunked body, got {headers}")
        # Chunked decoding over a stream: `pending` holds unparsed bytes
        # (a partial chunk-size line); `left` the data bytes of the current
        # chunk still to come, then its CRLF.
        pending = bytes(rest)
        left = 0
        crlf = 0
        done = False
        while not done:
            if pending:
                data = pending
                pending = b""
            else:
                n = s.recv_into(buf)
                if n == 0:
                    raise ConnectionError(f"download: body cut short after {got} bytes")
                data = mv[:n]
            i = 0
            while i < len(data):
                if left:
                    k = min(left, len(data) - i)
                    if h:
                        h.update(data[i:i + k])
                    got += k
                    left -= k
                    i += k
                    if not left:
                        crlf = 2
                elif crlf:
                    k = min(crlf, len(data) - i)
                    crlf -= k
                    i += k
                else:
                    j = bytes(data[i:i + 32]).find(b"\r\n")
                    if j < 0:
                        pending = bytes(data[i:])
                        break
                    left = int(bytes(data[i:i + j]).split(b";")[0], 16)
                    i += j + 2
                    if left == 0:
                        done = True
                        break
        dt = time.perf_counter() - t0
    finally:
        s.close()
    if got != size:
        raise RuntimeError(f"download: {got} bytes, expected {size}")
    if h and h.hexdigest() != digest:
        raise RuntimeError("download: SHA-256 differs from the uploaded file")
    return dt


def time_cmd(argv):
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def cp_fsync(src, dst):
    t0 = time.perf_counter()
    with open(src, "rb") as i, open(dst, "wb") as o:
        shutil.copyfileobj(i, o, MIB)
        o.flush()
        os.fsync(o.fileno())
    dt = time.perf_counter() - t0
    os.unlink(dst)
    return dt


def stats(size_mib, times):
    rates = [size_mib / t for t in times]
    return statistics.median(rates), min(rates), max(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=100)
    ap.add_argument("-n", type=int, default=5, help="timed transfers each way")
    ap.add_argument("--socket", help="use the sandlotd at this unix socket instead of starting one")
    ap.add_argument("--sandbox", help="use this existing sandbox (with --socket; kept)")
    args = ap.parse_args()
    if os.geteuid() != 0 and not args.socket:
        sys.exit("needs root (sandlotd creates sandboxes)")

    tmp = Path(tempfile.mkdtemp(prefix="sandlot-bench-files-", dir="/var/tmp"))
    proc = None
    sid = None
    own_sandbox = not args.sandbox
    try:
        if args.socket:
            sock = Path(args.socket)
        else:
            if not os.access(SANDLOTD, os.X_OK):
                sys.exit(f"{SANDLOTD} not built (run make)")
            sock = tmp / "sandlotd.sock"
            log = open(tmp / "sandlotd.log", "wb")
            proc = subprocess.Popen([str(SANDLOTD), "--listen", f"unix:{sock}",
                                     "--data-dir", str(tmp / "data")],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 10
            while True:
                try:
                    if request(sock, "GET", "/v1/health")[0] == 200:
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"sandlotd did not start:\n{(tmp / 'sandlotd.log').read_text()}")
                time.sleep(0.05)

        size = args.size_mib * MIB
        if args.sandbox:
            sid = args.sandbox
        else:
            disk = max(1024, 3 * args.size_mib + 64)
            status, body = request(sock, "POST", "/v1/sandboxes",
                                   json.dumps({"disk": f"{disk}M", "memory": "256M"}).encode())
            if status != 201:
                sys.exit(f"create sandbox: HTTP {status}: {body[:300]!r}")
            sid = json.loads(body)["id"]

        local = tmp / "bench.bin"
        h = hashlib.sha256()
        with open(local, "wb") as f:
            for _ in range(args.size_mib):
                b = os.urandom(MIB)
                h.update(b)
                f.write(b)
        digest = h.hexdigest()
        with open(local, "rb") as f:  # into the page cache
            while f.read(8 * MIB):
                pass

        # Warm-up and check (untimed).
        upload(sock, sid, local, size)
        download(sock, sid, size, digest)

        def cpu():
            ru = resource.getrusage(resource.RUSAGE_SELF)
            return ru.ru_utime + ru.ru_stime

        ups, downs, cats, cps = [], [], [], []
        client_cpu = 0.0
        for _ in range(args.n):  # interleaved, so drift hits every row alike
            c0 = cpu()
            ups.append(upload(sock, sid, local, size))
            downs.append(download(sock, sid, size))
            client_cpu += cpu() - c0
            cats.append(time_cmd(["sh", "-c", f"cat '{local}' > /dev/null"]))
            cps.append(cp_fsync(local, tmp / "copy.bin"))
        xfer_wall = sum(ups) + sum(downs)

        print(f"sandlotd file transfer, {args.size_mib} MiB, {args.n} runs each way "
              f"(unix socket {sock})")
        print(f"{'row':<22}{'median MiB/s':>14}{'min':>10}{'max':>10}   target")
        for name, times, target in (("upload (PUT)", ups, TARGET_MIBS),
                                    ("download (GET)", downs, TARGET_MIBS),
                                    ("local cat > /dev/null", cats, None),
                                    ("local cp + fsync", cps, None)):
            med, lo, hi = stats(args.size_mib, times)
            verdict = ""
            if target:
                verdict = f"{'meets' if med >= target else 'MISSES'} >= {target}"
            print(f"{name:<22}{med:>14.0f}{lo:>10.0f}{hi:>10.0f}   {verdict}")
        print(f"client CPU: {client_cpu:.2f}s over {xfer_wall:.2f}s of timed transfers "
              f"({100 * client_cpu / max(xfer_wall, 1e-9):.0f}% of one core)")
    finally:
        if sid and own_sandbox:
            try:
                request(sock, "DELETE", f"/v1/sandboxes/{sid}")
            except OSError:
                pass
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
