"""sandlotd file routes: streamed binary uploads and downloads, stat / list /
mkdir / delete, tar archives in and out, the disk quota, and paths, symlinks
and archive entries that try to reach outside the sandbox (or outside the
extraction directory).

Everything goes through a real sandlotd on a temporary unix socket (the
`sandlotd` fixture).  Host files the hostile inputs aim at are unique
per-test markers under /var/tmp and /etc, so "the host was not touched" is
checked exactly, not guessed.
"""
import hashlib
import io
import os
import socket
import tarfile
import time
import uuid

import pytest

from conftest import sandbox_host_pids, wait_until
from daemon import Response

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends

MIB = 1 << 20
BIG = 50 * MIB


# ---- helpers -------------------------------------------------------------------

def files_url(sid, route="files", **query):
    from urllib.parse import urlencode
    q = urlencode(query)
    return f"/v1/sandboxes/{sid}/{route}" + (f"?{q}" if q else "")


def put_stream(d, url, chunks, length=None, timeout=180):
    """PUT a body sent piece by piece (Content-Length if given, else
    chunked), never held whole in memory.  A daemon that answers early and
    stops reading is fine: the answer is read anyway."""
    c = d.conn(timeout)
    try:
        c.putrequest("PUT", url)
        if length is None:
            c.putheader("Transfer-Encoding", "chunked")
        else:
            c.putheader("Content-Length", str(length))
        c.putheader("Content-Type", "application/octet-stream")
        c.endheaders()
        try:
            for ch in chunks:
                if length is None:
                    c.send(b"%x\r\n" % len(ch))
                    c.send(ch)
                    c.send(b"\r\n")
                else:
                    c.send(ch)
            if length is None:
                c.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = c.getresponse()
        return Response(r.status, dict(r.getheaders()), r.read())
    finally:
        c.close()


def file_chunks(path, size=MIB):
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(size), b""):
            yield chunk


def zero_chunks(total, size=MIB):
    block = b"\0" * size
    left = total
    while left > 0:
        n = min(size, left)
        yield block[:n]
        left -= n


def get_digest(d, url, timeout=180):
    """GET streamed into SHA-256: (status, hexdigest, size, raw body if small)."""
    c = d.conn(timeout)
    try:
        c.request("GET", url)
        r = c.getresponse()
        h = hashlib.sha256()
        n = 0
        head = b""
        while True:
            b = r.read(MIB)
            if not b:
                break
            h.update(b)
            n += len(b)
            if len(head) < 4096:
                head += b[:4096 - len(head)]
        return r.status, h.hexdigest(), n, head, dict(r.getheaders())
    finally:
        c.close()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(MIB), b""):
            h.update(chunk)
    return h.hexdigest()


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def check_rss_growth(pid, hwm_before, what):
    """The daemon's peak RSS grew by far less than the data it moved.
    Meaningless under AddressSanitizer, whose quarantine keeps freed
    buffers: then only reported."""
    grown = (vm_kib(pid, "VmHWM") - hwm_before) / 1024
    with open(f"/proc/{pid}/maps") as f:
        if "libasan" in f.read():
            print(f"sanitizer build: peak RSS grew by {grown:.1f} MiB {what} (not checked)")
            return
    assert grown < 20, f"sandlotd peak RSS grew by {grown:.1f} MiB {what}"


def names(d, sid, path):
    r = d.get(files_url(sid, "files/list", path=path))
    assert r.status == 200, r
    return sorted(e["name"] for e in r.json()["entries"])


def sh(d, sid, script):
    res = d.exec(sid, argv=["sh", "-c", script])
    assert res["exit_code"] == 0, res
    return res["stdout"]


def tar_bytes(entries, fmt=tarfile.PAX_FORMAT, mode="w"):
    """entries: (name, kind, data_or_target, mode)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as t:
        for name, kind, payload, perm in entries:
            ti = tarfile.TarInfo(name)
            ti.mode = perm
            ti.mtime = 1_700_000_000
            if kind == "file":
                ti.size = len(payload)
                t.addfile(ti, io.BytesIO(payload))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                       "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE,
                       "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                ti.linkname = payload
            if kind in ("chr", "blk"):
                ti.devmajor, ti.devminor = 1, 3
            t.addfile(ti)
    return buf.getvalue()


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("daemon-big") / "big.bin"
    with open(p, "wb") as f:
        for _ in range(BIG // MIB):
            f.write(os.urandom(MIB))
    return p, sha256_file(p)


@pytest.fixture
def host_marker():
    """A unique host path under /var/tmp, removed afterwards; tests assert
    that hostile requests neither read nor create it."""
    token = uuid.uuid4().hex
    paths = [f"/var/tmp/sandlot-marker-{token}", f"/etc/sandlot-marker-{token}",
             f"/var/tmp/sandlot-escape-{token}", f"/sandlot-escape-{token}",
             f"/tmp/sandlot-escape-{token}"]
    secret = f"host secret {token}\n".encode()
    with open(paths[0], "wb") as f:
        f.write(secret)
    yield token, paths[0], secret
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            os.rmdir(p)


def assert_host_untouched(token):
    for p in (f"/etc/sandlot-marker-{token}", f"/var/tmp/sandlot-escape-{token}",
              f"/sandlot-escape-{token}", f"/tmp/sandlot-escape-{token}",
              f"/etc/sandlot-escape-{token}"):
        assert not os.path.lexists(p), f"a sandbox request created {p} on the host"


# ---- single files ------------------------------------------------------------------

def test_upload_download_50mib_binary_streamed(sandlotd, big_file):
    path, digest = big_file
    sid = sandlotd.create()
    pid = sandlotd.proc.pid
    hwm_before = vm_kib(pid, "VmHWM")

    r = put_stream(sandlotd, files_url(sid, path="big.bin"), file_chunks(path), length=BIG)
    assert r.status == 201, r
    assert r.json() == {"path": "/home/user/big.bin", "size": BIG}

    out = sh(sandlotd, sid, "sha256sum /home/user/big.bin")
    assert out.split()[0] == digest

    status, got, n, _, headers = get_digest(sandlotd, files_url(sid, path="/home/user/big.bin"))
    assert status == 200
    assert headers.get("Content-Type") == "application/octet-stream"
    assert (n, got) == (BIG, digest)

    # Streamed, not buffered: the daemon's peak RSS grew by far less than
    # the 50 MiB that went through it each way.
    check_rss_growth(pid, hwm_before, "moving a 50 MiB file")


def test_chunked_upload_and_empty_file(sandlotd):
    sid = sandlotd.create()
    data = [os.urandom(n) for n in (1, 7, 65536, 65537, 300_000, 3)]
    r = put_stream(sandlotd, files_url(sid, path="chunked.bin"), iter(data))
    assert r.status == 201, r
    assert r.json()["size"] == sum(map(len, data))
    assert sandlotd.get(files_url(sid, path="chunked.bin")).body == b"".join(data)

    r = sandlotd.put(files_url(sid, path="empty"), b"")
    assert r.status == 201, r
    assert r.json()["size"] == 0
    g = sandlotd.get(files_url(sid, path="empty"))
    assert (g.status, g.body) == (200, b"")


def test_upload_creates_parents_and_applies_mode(sandlotd):
    sid = sandlotd.create()
    r = sandlotd.put(files_url(sid, path="a/b/c/run.sh", mode="0750"), b"#!/bin/sh\necho ran\n")
    assert r.status == 201, r
    assert r.json()["path"] == "/home/user/a/b/c/run.sh"
    st = sandlotd.get(files_url(sid, "files/stat", path="a/b/c/run.sh")).json()
    assert st["type"] == "file" and st["mode"] == "0750" and st["size"] == 19
    assert st["name"] == "run.sh" and st["path"] == "/home/user/a/b/c/run.sh"
    assert st["modified_at"].endswith("Z")
    assert sh(sandlotd, sid, "a/b/c/run.sh") == "ran\n"
    # Default mode, and an overwrite replaces content and mode.
    assert sandlotd.put(files_url(sid, path="a/plain"), b"x").status == 201
    assert sandlotd.get(files_url(sid, "files/stat", path="a/plain")).json()["mode"] == "0644"
    assert sandlotd.put(files_url(sid, path="a/plain", mode="600"), b"yy").status == 201
    st = sandlotd.get(files_url(sid, "files/stat", path="/home/user/a/plain")).json()
    assert (st["mode"], st["size"]) == ("0600", 2)
    # Absolute paths outside the workspace (the sandbox's /tmp).
    assert sandlotd.put(files_url(sid, path="/tmp/t/x"), b"tmp").status == 201
    assert sh(sandlotd, sid, "cat /tmp/t/x") == "tmp"


@pytest.mark.parametrize("query,why", [
    ({}, "missing path"),
    ({"path": ""}, "empty path"),
    ({"path": "x" * 5000}, "path too long"),
    ({"path": "f", "mode": "0888"}, "not octal"),
    ({"path": "f", "mode": "17777"}, "over 07777"),
    ({"path": "f", "mode": "rwx"}, "not digits"),
    ({"path": "f", "mode": ""}, "empty mode"),
    ({"path": "f", "mode": "-644"}, "sign"),
])
def test_upload_bad_parameters_400(sandlotd, query, why):
    sid = sandlotd.create()
    r = sandlotd.put(files_url(sid, **query), b"data")
    assert r.status == 400, (why, r)
    assert r.error_code() == "bad_request"
    assert "f" not in names(sandlotd, sid, "/home/user")


def test_errors_are_json(sandlotd):
    sid = sandlotd.create()
    r = sandlotd.get(files_url(sid, path="missing.txt"))
    assert r.status == 404 and r.error_code() == "not_found", r
    assert r.headers.get("Content-Type") == "application/json"
    sh(sandlotd, sid, "mkdir -p d && mkfifo fifo")
    r = sandlotd.get(files_url(sid, path="d"))
    assert r.status == 400 and r.error_code() == "bad_request", r
    r = sandlotd.get(files_url(sid, path="fifo"))  # never blocks init
    assert r.status == 400 and r.error_code() == "bad_request", r
    r = sandlotd.get(files_url(sid))
    assert r.status == 400, r
    assert sandlotd.get(files_url(sid, "files/stat", path="nope")).status == 404
    assert sandlotd.get(files_url(sid, "files/list", path="nope")).status == 404
    r = sandlotd.get(files_url(sid, "files/list", path="d/../fifo"))
    assert r.status == 400, r
    # Writing over a directory.
    r = sandlotd.put(files_url(sid, path="d"), b"x")
    assert r.status == 400, r
    # Unknown sandbox.
    bogus = "sb-" + "a" * 26
    for r in (sandlotd.get(files_url(bogus, path="x")),
              sandlotd.put(files_url(bogus, path="x"), b"x"),
              sandlotd.get(files_url(bogus, "files/archive"))):
        assert r.status == 404 and r.error_code() == "not_found", r


def test_stat_list_mkdir_delete(sandlotd):
    sid = sandlotd.create()
    r = sandlotd.post(files_url(sid, "files/mkdir", path="p/q/r"))
    assert r.status == 201, r
    assert r.json()["path"] == "/home/user/p/q/r"
    assert sandlotd.post(files_url(sid, "files/mkdir", path="p/q/r")).status == 201  # exists: fine
    r = sandlotd.post(files_url(sid, "files/mkdir", path="p/private", mode="0700"))
    assert r.status == 201, r
    sandlotd.put(files_url(sid, path="p/q/f.txt"), b"12345")
    sh(sandlotd, sid, "ln -s q/f.txt p/link")

    st = sandlotd.get(files_url(sid, "files/stat", path="p/private")).json()
    assert (st["type"], st["mode"]) == ("directory", "0700")
    st = sandlotd.get(files_url(sid, "files/stat", path="p/link")).json()
    assert st["type"] == "symlink"  # not followed

    r = sandlotd.get(files_url(sid, "files/list", path="p"))
    assert r.status == 200, r
    body = r.json()
    assert body["path"] == "/home/user/p"
    ents = {e["name"]: e for e in body["entries"]}
    assert [e["name"] for e in body["entries"]] == ["link", "private", "q"]  # sorted
    assert ents["q"]["type"] == "directory" and ents["q"]["path"] == "/home/user/p/q"
    assert ents["link"]["type"] == "symlink"
    assert names(sandlotd, sid, "p/q") == ["f.txt", "r"]
    f = [e for e in sandlotd.get(files_url(sid, "files/list", path="p/q")).json()["entries"]
         if e["name"] == "f.txt"][0]
    assert (f["type"], f["size"], f["mode"]) == ("file", 5, "0644")

    # Delete: a file, an empty dir, a non-empty dir (409 without recursive).
    assert sandlotd.delete(files_url(sid, path="p/q/f.txt")).status == 204
    assert sandlotd.get(files_url(sid, path="p/q/f.txt")).status == 404
    assert sandlotd.delete(files_url(sid, path="p/private")).status == 204
    r = sandlotd.delete(files_url(sid, path="p"))
    assert r.status == 409 and r.error_code() == "conflict", r
    assert "p" in names(sandlotd, sid, "/home/user")
    r = sandlotd.delete(files_url(sid, path="p", recursive="2"))
    assert r.status == 400, r
    assert sandlotd.delete(files_url(sid, path="p", recursive="1")).status == 204
    assert "p" not in names(sandlotd, sid, "/home/user")
    r = sandlotd.delete(files_url(sid, path="p"))
    assert r.status == 404 and r.error_code() == "not_found", r
    # The sandbox's read-only root.
    r = sandlotd.put(files_url(sid, path="/usr/evil"), b"x")
    assert r.status in (400, 403), r
    r = sandlotd.delete(files_url(sid, path="/usr/bin/env"))
    assert r.status in (400, 403), r


@pytest.mark.backends(check=True)
def test_upload_over_disk_quota_507_leaves_nothing(sandlotd):
    sid = sandlotd.create(disk="32M")
    assert sandlotd.post(files_url(sid, "files/mkdir", path="up")).status == 201
    t0 = time.monotonic()
    r = put_stream(sandlotd, files_url(sid, path="up/huge.bin"), zero_chunks(64 * MIB),
                   length=64 * MIB)
    assert r.status == 507, r
    assert r.error_code() == "insufficient_storage"
    assert time.monotonic() - t0 < 60
    # Neither the target nor init's temporary file is left.
    assert names(sandlotd, sid, "up") == []
    assert sandlotd.get(files_url(sid, "files/stat", path="up/huge.bin")).status == 404
    assert ".sandlot-tmp" not in sh(sandlotd, sid, "ls -A /home/user/up")
    # The space came back: a file of 20 MiB fits.
    r = put_stream(sandlotd, files_url(sid, path="up/fits.bin"), zero_chunks(20 * MIB),
                   length=20 * MIB)
    assert r.status == 201, r
    # Chunked uploads fail the same way.
    r = put_stream(sandlotd, files_url(sid, path="up/huge2.bin"), zero_chunks(40 * MIB))
    assert r.status == 507, r
    assert names(sandlotd, sid, "up") == ["fits.bin"]


def test_concurrent_chunked_uploads_keep_their_byte_order(sandlotd):
    """Many uploads at once, each in small chunks, so that the daemon reads
    ahead while chunk() works on the previous piece: every file arrives
    byte for byte in order.  (A hand-over race between the reading thread
    and the worker once put a later piece before an earlier one: found
    under ThreadSanitizer's timing, 1 upload in 60.)"""
    import threading
    d = sandlotd
    sid = d.create()
    bad, errors = [], []

    def worker(k):
        try:
            for i in range(8):
                data = os.urandom(2 * MIB)
                c = d.conn()
                c.putrequest("PUT", files_url(sid, path=f"up/{k}-{i}"))
                c.putheader("Transfer-Encoding", "chunked")
                c.endheaders()
                for off in range(0, len(data), 7919):
                    piece = data[off:off + 7919]
                    c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                c.send(b"0\r\n\r\n")
                r = c.getresponse()
                r.read()
                c.close()
                assert r.status == 201, r.status
                got = d.get(files_url(sid, path=f"up/{k}-{i}")).body
                if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
                    bad.append((k, i, len(got)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert not bad, f"uploads that arrived out of order: {bad}"


def test_client_gone_mid_upload_leaves_no_partial_file(sandlotd):
    sid = sandlotd.create()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sandlotd.sock))
    url = files_url(sid, path="gone/partial.bin")
    s.sendall(f"PUT {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {20 * MIB}\r\n\r\n".encode())
    for _ in range(3):
        s.sendall(os.urandom(MIB))

    def uploaded():
        for line in sandlotd.get("/metrics").body.decode().splitlines():
            if line.startswith("sandlot_bytes_uploaded_total "):
                return float(line.split()[1])
        return 0
    # The daemon is writing the file (it has taken bytes of it) when the
    # client goes.
    assert wait_until(lambda: uploaded() >= MIB, 10)
    s.close()

    def clean():
        r = sandlotd.get(files_url(sid, "files/list", path="gone"))
        return r.status == 404 or (r.status == 200 and r.json()["entries"] == [])
    assert wait_until(clean, 10), sandlotd.get(files_url(sid, "files/list", path="gone"))
    # The sandbox is still fine.
    assert sandlotd.put(files_url(sid, path="gone/ok"), b"ok").status == 201


def test_client_gone_mid_download(sandlotd, big_file):
    path, digest = big_file
    sid = sandlotd.create()
    assert put_stream(sandlotd, files_url(sid, path="big"), file_chunks(path),
                      length=BIG).status == 201
    for _ in range(3):
        c = sandlotd.conn()
        c.request("GET", files_url(sid, path="big"))
        r = c.getresponse()
        assert r.status == 200
        r.read(MIB)
        c.close()
    # The transfers were aborted inside the sandbox; everything still works,
    # including deleting the sandbox promptly.
    status, got, n, _, _ = get_digest(sandlotd, files_url(sid, path="big"))
    assert (status, n, got) == (200, BIG, digest)
    t0 = time.monotonic()
    assert sandlotd.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    assert time.monotonic() - t0 < 10


# ---- paths and symlinks never reach the host ------------------------------------------

def test_dotdot_paths_stay_inside(sandlotd, host_marker):
    token, marker, secret = host_marker
    sid = sandlotd.create()
    up = "../" * 12
    r = sandlotd.get(files_url(sid, path=f"{up}var/tmp/sandlot-marker-{token}"))
    assert r.status == 404, r
    assert secret not in r.body
    # Writes with .. land inside the sandbox (its /tmp), not on the host.
    r = sandlotd.put(files_url(sid, path=f"{up}tmp/sandlot-escape-{token}"), b"in the sandbox")
    assert r.status == 201, r
    assert sh(sandlotd, sid, f"cat /tmp/sandlot-escape-{token}") == "in the sandbox"
    r = sandlotd.put(files_url(sid, path=f"{up}sandlot-escape-{token}"), b"x")
    assert r.status in (400, 403), r  # the sandbox's read-only /
    r = sandlotd.put(files_url(sid, path=f"{up}var/tmp/sandlot-escape-{token}"), b"x")
    assert r.status != 201 or sh(sandlotd, sid, f"cat /var/tmp/sandlot-escape-{token}") == "x"
    r = sandlotd.get(files_url(sid, "files/list", path=f"{up}var/tmp"))
    assert f"sandlot-marker-{token}" not in r.body.decode(errors="replace")
    assert_host_untouched(token)
    with open(marker, "rb") as f:
        assert f.read() == secret


def test_planted_symlinks_never_reach_host(sandlotd, host_marker):
    token, marker, secret = host_marker
    sid = sandlotd.create()
    sh(sandlotd, sid, f"ln -s /etc/shadow shadow && ln -s / root && ln -s {marker} marker"
                      f" && ln -s /var/tmp vartmp && ln -s /etc etc")
    with open("/etc/shadow", "rb") as f:
        host_shadow = f.read()
    for p in ("shadow", "root/etc/shadow", "marker", f"vartmp/sandlot-marker-{token}",
              f"root{marker}"):
        r = sandlotd.get(files_url(sid, path=p))
        assert r.status != 200 or (r.body != host_shadow and secret not in r.body), (p, r)
        assert secret not in r.body
        if host_shadow:
            assert host_shadow not in r.body
    # Archives of a tree holding those links carry no host content.
    status, _, _, body, _ = get_digest(sandlotd, files_url(sid, "files/archive", path="/home/user"))
    assert status == 200
    assert secret not in body
    # Writing through the links stays in the sandbox (whose / and /etc are
    # read-only; /var/tmp may not exist there).
    for p in (f"etc/sandlot-marker-{token}", f"vartmp/sandlot-escape-{token}",
              f"root/sandlot-escape-{token}"):
        r = sandlotd.put(files_url(sid, path=p), b"pwned")
        assert r.status != 201 or "pwned" in sh(sandlotd, sid, f"cat /home/user/{p}"), (p, r)
    # Uploading over the link replaces the link, it does not follow it.
    assert sandlotd.put(files_url(sid, path="marker"), b"replaced").status == 201
    assert sandlotd.get(files_url(sid, "files/stat", path="marker")).json()["type"] == "file"
    assert_host_untouched(token)
    with open(marker, "rb") as f:
        assert f.read() == secret


# ---- archives ------------------------------------------------------------------------

def test_archive_in_hostile_entries(sandlotd, host_marker):
    token, marker, secret = host_marker
    sid = sandlotd.create()
    body = tar_bytes([
        ("./", "dir", None, 0o755),
        ("ok", "dir", None, 0o750),
        ("ok/a.txt", "file", b"alpha\n", 0o640),
        ("ok/run.sh", "file", b"#!/bin/sh\necho extracted\n", 0o755),
        ("ok/empty", "file", b"", 0o600),
        (f"/etc/sandlot-escape-{token}", "file", b"abs", 0o644),
        (f"/var/tmp/sandlot-escape-{token}", "file", b"abs", 0o644),
        (f"../../../../../../var/tmp/sandlot-escape-{token}", "file", b"up", 0o644),
        (f"ok/../../sandlot-escape-{token}", "file", b"up", 0o644),
        ("etc-link", "symlink", "/etc", 0o777),
        (f"etc-link/sandlot-escape-{token}", "file", b"through the link", 0o644),
        ("tmp-link", "symlink", "../../../../tmp", 0o777),
        (f"tmp-link/sandlot-escape-{token}", "file", b"through the link", 0o644),
        ("passwd", "hardlink", "/etc/passwd", 0o644),
        ("marker", "hardlink", marker, 0o644),
        ("null", "chr", None, 0o666),
        ("disk", "blk", None, 0o666),
        ("fifo", "fifo", None, 0o644),
        ("later/deep/file.bin", "file", bytes(range(256)) * 100, 0o604),
    ])
    r = sandlotd.post(files_url(sid, "files/archive", path="x"), body=body)
    assert r.status == 200, r
    res = r.json()
    assert res["files"] == 6, res  # a.txt, run.sh, empty, 2 under the links' names, file.bin
    assert res["directories"] == 1, res
    assert res["bytes"] == 6 + 25 + 0 + 16 * 2 + 25600, res
    skipped = "\n".join(res["skipped"])
    for name in (f"/etc/sandlot-escape-{token}", f"/var/tmp/sandlot-escape-{token}",
                 f"../../../../../../var/tmp/sandlot-escape-{token}",
                 f"ok/../../sandlot-escape-{token}", "etc-link", "tmp-link", "passwd",
                 "marker", "null", "disk", "fifo"):
        assert name + ": " in skipped, (name, res["skipped"])
    assert len(res["skipped"]) == 11 and res.get("skipped_count", 11) == 11

    # Modes applied; links became plain directories holding the files.
    ls = sh(sandlotd, sid, "cd /home/user/x && find . | sort && stat -c '%n %a %F' ok ok/a.txt "
                           "ok/run.sh ok/empty later/deep/file.bin etc-link")
    assert "./passwd" not in ls and "./null" not in ls and "./fifo" not in ls, ls
    assert "ok 750 directory" in ls and "ok/a.txt 640 regular file" in ls, ls
    assert "ok/run.sh 755 regular file" in ls and "ok/empty 600 regular empty file" in ls, ls
    assert "later/deep/file.bin 604 regular file" in ls, ls
    assert "etc-link 755 directory" in ls, ls
    assert sh(sandlotd, sid, "/home/user/x/ok/run.sh") == "extracted\n"
    # Nothing outside x, neither in the sandbox nor on the host.
    found = sh(sandlotd, sid, f"find / -xdev -name '*{token}*' 2>/dev/null; "
                              f"find /tmp /home -name '*{token}*' 2>/dev/null; true")
    assert sorted(set(found.split())) == [
        f"/home/user/x/etc-link/sandlot-escape-{token}",
        f"/home/user/x/tmp-link/sandlot-escape-{token}"], found
    assert_host_untouched(token)
    with open(marker, "rb") as f:
        assert f.read() == secret
    with open("/etc/passwd") as f:
        assert "through the link" not in f.read()


def test_archive_in_gzip_default_dir_and_errors(sandlotd):
    sid = sandlotd.create()
    gz = tar_bytes([("g/one.txt", "file", b"1", 0o644), ("two.txt", "file", b"22", 0o644)],
                   mode="w:gz")
    r = sandlotd.post(files_url(sid, "files/archive"), body=gz)  # default: /home/user
    assert r.status == 200, r
    assert (r.json()["files"], r.json()["bytes"]) == (2, 3)
    assert sh(sandlotd, sid, "cat /home/user/g/one.txt /home/user/two.txt") == "122"

    r = sandlotd.post(files_url(sid, "files/archive", path="junk"), body=b"not a tar " * 200)
    assert r.status == 400 and r.error_code() == "bad_request", r
    # Empty body: an empty archive.
    r = sandlotd.post(files_url(sid, "files/archive", path="empty"), body=b"")
    assert r.status == 200 and r.json()["files"] == 0, r
    # Truncated in the middle of a file: 400, and no partial file.
    body = tar_bytes([("t/whole", "file", b"w" * 100, 0o644),
                      ("t/cut", "file", os.urandom(200_000), 0o644)], fmt=tarfile.USTAR_FORMAT)
    r = sandlotd.post(files_url(sid, "files/archive", path="trunc"), body=body[:100_000])
    assert r.status == 400, r
    assert names(sandlotd, sid, "trunc/t") == ["whole"]
    # DIR is a file.
    r = sandlotd.post(files_url(sid, "files/archive", path="two.txt"), body=gz)
    assert r.status in (400, 409), r
    # Entries the sandbox refuses are skipped, not fatal: a file where a
    # directory is.
    sh(sandlotd, sid, "mkdir -p /home/user/c/isdir")
    r = sandlotd.post(files_url(sid, "files/archive", path="c"),
                      body=tar_bytes([("isdir", "file", b"x", 0o644),
                                      ("fine", "file", b"y", 0o644)]))
    assert r.status == 200, r
    assert r.json()["files"] == 1 and r.json()["skipped"][0].startswith("isdir: "), r


def test_archive_in_over_quota_507(sandlotd):
    sid = sandlotd.create(disk="32M")
    entries = [(f"f{i}.bin", "file", os.urandom(6 * MIB), 0o644) for i in range(8)]
    r = sandlotd.post(files_url(sid, "files/archive", path="q"), body=tar_bytes(entries))
    assert r.status == 507 and r.error_code() == "insufficient_storage", r
    # Whole files only: each one left has its full size, and no temp file.
    listing = sandlotd.get(files_url(sid, "files/list", path="q")).json()["entries"]
    assert listing, "expected the first files to be extracted"
    for e in listing:
        assert not e["name"].startswith(".sandlot-tmp"), listing
        assert e["size"] == 6 * MIB, listing


@pytest.mark.backends(check=True)
def test_archive_out_round_trip(sandlotd, tmp_path):
    sid = sandlotd.create()
    sh(sandlotd, sid, "cd /home/user && mkdir -p t/sub/deeper t/empty && "
                      "printf hello > t/a.txt && head -c 1500000 /dev/urandom > t/sub/b.bin && "
                      ": > t/sub/deeper/zero && printf '#!/bin/sh\\n' > t/run.sh && "
                      "chmod 755 t/run.sh && chmod 600 t/a.txt && "
                      "printf u > 't/sub/name with spaces & ünï' && "
                      "X=$(printf 'x%.0s' $(seq 1 120)) && Y=$(printf 'y%.0s' $(seq 1 120)) && "
                      "mkdir -p t/l/$X/$Y && printf long > t/l/$X/$Y/f && "
                      "ln -s /etc/passwd t/link && mkfifo t/fifo")
    want = {}
    for line in sh(sandlotd, sid, "cd /home/user/t && find . -type f -exec sha256sum {} +"
                   ).splitlines():
        h, name = line.split(None, 1)
        want[name[2:]] = h
    c = sandlotd.conn()
    c.request("GET", files_url(sid, "files/archive", path="t"))
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "application/x-tar"
    raw = r.read()
    c.close()
    got, dirs = {}, set()
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        for m in t.getmembers():
            assert not m.name.startswith("/") and ".." not in m.name.split("/")
            if m.isdir():
                dirs.add(m.name)
            else:
                assert m.isfile(), m.name  # no links or fifos
                got[m.name] = hashlib.sha256(t.extractfile(m).read()).hexdigest()
                if m.name == "run.sh":
                    assert m.mode & 0o777 == 0o755
                if m.name == "a.txt":
                    assert m.mode & 0o777 == 0o600
    assert got == want
    assert {"sub", "sub/deeper", "empty", "l"} <= dirs
    # Python's extractor agrees.
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        t.extractall(tmp_path / "out", filter="data") if hasattr(tarfile, "data_filter") \
            else t.extractall(tmp_path / "out")
    assert (tmp_path / "out" / "sub" / "name with spaces & ünï").read_text() == "u"
    assert (tmp_path / "out" / "empty").is_dir()
    # And the archive goes back in unchanged.
    r = sandlotd.post(files_url(sid, "files/archive", path="copy"), body=raw)
    assert r.status == 200 and r.json()["skipped"] == [], r
    assert sh(sandlotd, sid, "cd /home/user && diff -r t copy 2>&1 | grep -v -e link -e fifo; true") == ""

    for path, status in (("nope", 404), ("t/a.txt", 400)):
        r = sandlotd.get(files_url(sid, "files/archive", path=path))
        assert r.status == status and r.json()["error"]["code"], r


def test_archive_out_file_growing_while_read(sandlotd):
    """A file appended to while it is archived ends at the size in its
    header: the archive is finite and well-formed."""
    sid = sandlotd.create()
    sh(sandlotd, sid, "mkdir -p /home/user/g && head -c 3000000 /dev/zero > /home/user/g/log")
    r = sandlotd.post(f"/v1/sandboxes/{sid}/exec", json_body={
        "command": "while :; do head -c 65536 /dev/zero; done >> /home/user/g/log",
        "background": True, "timeout_ms": 60000})
    assert r.status in (200, 201, 202), r
    # The writer is appending when the archive is read.
    assert wait_until(lambda: int(sh(sandlotd, sid, "stat -c %s /home/user/g/log")) > 3000000, 10)
    c = sandlotd.conn(60)
    c.request("GET", files_url(sid, "files/archive", path="g"))
    resp = c.getresponse()
    assert resp.status == 200
    raw = resp.read()  # must end
    c.close()
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        m = t.getmember("log")
        assert m.size >= 3000000
        assert len(t.extractfile(m).read()) == m.size


def test_archive_in_long_hostile_names_echoed_short(sandlotd):
    sid = sandlotd.create()
    long_abs = "/" + "a/" * 40000 + "x"  # 80 KB name in a pax header
    r = sandlotd.post(files_url(sid, "files/archive", path="ln"),
                      body=tar_bytes([(long_abs, "file", b"x", 0o644)] * 3
                                     + [("ok.txt", "file", b"ok", 0o644)]))
    assert r.status == 200, r
    res = r.json()
    assert res["files"] == 1 and res["skipped_count"] == 3
    assert all(len(line) < 400 for line in res["skipped"]), res


def test_archive_out_large_streamed(sandlotd, big_file):
    path, digest = big_file
    sid = sandlotd.create()
    assert put_stream(sandlotd, files_url(sid, path="arch/big.bin"), file_chunks(path),
                      length=BIG).status == 201
    pid = sandlotd.proc.pid
    hwm_before = vm_kib(pid, "VmHWM")
    c = sandlotd.conn(180)
    c.request("GET", files_url(sid, "files/archive", path="arch"))
    r = c.getresponse()
    assert r.status == 200
    with tarfile.open(fileobj=r, mode="r|") as t:
        m = t.next()
        assert (m.name, m.size) == ("big.bin", BIG)
        h = hashlib.sha256()
        f = t.extractfile(m)
        for chunk in iter(lambda: f.read(MIB), b""):
            h.update(chunk)
        assert h.hexdigest() == digest
    c.close()
    check_rss_growth(pid, hwm_before, "sending a 50 MiB tar")


def read_chunked(sock):
    """Read a chunked body from sock until the connection closes: (data,
    whether the terminating zero-length chunk came)."""
    buf = b""
    while True:
        try:
            more = sock.recv(1 << 16)
        except ConnectionResetError:
            more = b""
        if not more:
            break
        buf += more
    data = b""
    while True:
        line, sep, rest = buf.partition(b"\r\n")
        if not sep:
            return data, False
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return data, rest.startswith(b"\r\n")
        if len(rest) < size + 2:
            return data + rest[:size], False
        data += rest[:size]
        buf = rest[size + 2:]


def test_archive_cut_mid_stream_ends_without_its_last_chunk(sandlotd):
    """A tar whose production fails after the 200 (here: the sandbox's init
    dies mid-way) ends without the terminating chunk and without the tar's
    end-of-archive, and the connection closes: no client can take the part
    for the whole."""
    d = sandlotd
    sid = d.create()
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={
        "command": "mkdir arch && echo small > arch/a.txt && head -c 48M /dev/urandom > arch/b.bin"})
    assert r.status == 200 and r.json()["exit_code"] == 0, r
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(d.sock))
    s.settimeout(30)
    s.sendall(f"GET {files_url(sid, 'files/archive', path='arch')} HTTP/1.1\r\nHost: x\r\n\r\n"
              .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    head, _, body_start = head.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Transfer-Encoding: chunked" in head, head
    got = body_start
    while len(got) < 2 * MIB:
        got += s.recv(1 << 16)
    # The archive is far larger than every buffer on the way: most of it
    # is still to be read from the sandbox when its init dies (with a vm
    # sandbox's QEMU, its whole guest).
    pids = sandbox_host_pids(d)
    assert len(pids) == 1, pids
    os.kill(pids[0], 9)
    rest_data, terminated = read_chunked_from(got, s)
    s.close()
    assert not terminated, "a cut archive ended with the terminating chunk"
    assert len(rest_data) < 40 * MIB
    with pytest.raises(tarfile.ReadError):
        with tarfile.open(fileobj=io.BytesIO(rest_data), mode="r|") as t:
            for m in t:
                if m.isfile():
                    t.extractfile(m).read()
    assert "archive_download_failed" in d.logs()


def read_chunked_from(prefix, sock):
    class _Sock:
        def __init__(self):
            self.first = prefix

        def recv(self, n):
            if self.first:
                out, self.first = self.first, b""
                return out
            return sock.recv(n)
    return read_chunked(_Sock())


# ---- changes log -----------------------------------------------------------------------

def test_uploads_are_logged_with_source_api(sandlotd):
    sid = sandlotd.create()
    assert sandlotd.put(files_url(sid, path="up/one.txt"), b"1").status == 201
    assert sandlotd.post(files_url(sid, "files/mkdir", path="made")).status == 201
    assert sandlotd.post(files_url(sid, "files/archive", path="arc"),
                         body=tar_bytes([("in.txt", "file", b"t", 0o644)])).status == 200
    res = sandlotd.exec(sid, command="echo gen > generated.txt")
    paths = {c["path"] for c in res["changes"]}
    assert "/home/user/generated.txt" in paths
    assert not paths & {"/home/user/up/one.txt", "/home/user/made", "/home/user/arc/in.txt"}, res

    r = sandlotd.get(f"/v1/sandboxes/{sid}/changes?since=0")
    assert r.status == 200, r
    log = {(c["path"], c["kind"]): c for c in r.json()["changes"]}
    for p in ("/home/user/up", "/home/user/up/one.txt", "/home/user/made", "/home/user/arc",
              "/home/user/arc/in.txt"):
        assert log[(p, "created")]["source"] == "api", (p, log)
    assert log[("/home/user/generated.txt", "created")]["source"] == res["exec_id"]

    cursor = r.json()["cursor"]
    assert sandlotd.delete(files_url(sid, path="up", recursive="1")).status == 204
    later = sandlotd.get(f"/v1/sandboxes/{sid}/changes?since={cursor}").json()["changes"]
    assert {(c["path"], c["kind"], c["source"]) for c in later} == {
        ("/home/user/up", "deleted", "api"), ("/home/user/up/one.txt", "deleted", "api")}


def test_metrics_count_file_bytes(sandlotd):
    sid = sandlotd.create()

    def metric(name):
        text = sandlotd.get("/metrics").body.decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} missing from /metrics")
    up0, down0 = metric("sandlot_bytes_uploaded_total"), metric("sandlot_bytes_downloaded_total")
    sandlotd.put(files_url(sid, path="m.bin"), b"m" * 10000)
    sandlotd.get(files_url(sid, path="m.bin"))
    assert metric("sandlot_bytes_uploaded_total") - up0 == 10000
    assert metric("sandlot_bytes_downloaded_total") - down0 == 10000


def test_ended_sandbox_410(sandlotd):
    sid = sandlotd.create()
    assert sandlotd.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    for r in (sandlotd.get(files_url(sid, path="x")), sandlotd.put(files_url(sid, path="x"), b"x"),
              sandlotd.post(files_url(sid, "files/archive"), body=b"")):
        assert r.status == 410, r


# ---- the file API has the sandbox user's rights, no more ---------------------------

def init_pid_of(d, sid):
    """Host pid of sandbox sid's init, from the daemon's "created" log line."""
    import re
    m = re.search(rf"event=created sandbox={sid} .*?init_pid=(\d+)",
                  d.log_path.read_text(errors="replace"))
    assert m, f"no created line for {sid} in the daemon log"
    return int(m.group(1))


def sandbox_root_sh(d, sid, script):
    """Run script as the sandbox's root (uid 0 of its user namespace, in its
    mount namespace): files only init could make."""
    import subprocess
    r = subprocess.run(["nsenter", "-t", str(init_pid_of(d, sid)), "-U", "-m", "--",
                        "/bin/sh", "-c", script], capture_output=True, timeout=30)
    assert r.returncode == 0, r


def test_file_api_cannot_read_inits_files_through_a_planted_link(sandlotd):
    """Every file route acts with the sandbox user's credentials (uid/gid
    1000, no capabilities): init's memory map and environment (root's),
    reached through links the user's code planted or named directly, are
    refused with 403 naming the path, as the user's own code is refused,
    while the user's own files work as before."""
    d = sandlotd
    sid = d.create()
    sh(d, sid, "ln -s /proc/1/maps maps && ln -s /proc/1/environ environ && echo mine > own.txt")
    out = sh(d, sid, "cat /proc/1/maps 2>&1; cat /proc/1/environ 2>&1; true")
    assert out.count("Permission denied") == 2, out
    for path in ("maps", "environ", "/proc/1/maps", "/proc/1/environ"):
        r = d.get(files_url(sid, path=path))
        assert r.status == 403, (path, r)
        assert r.error_code() == "forbidden", r
        assert path.lstrip("/") in r.json()["error"]["message"], r
        assert b"sandlot-init" not in r.body
    assert d.get(files_url(sid, path="own.txt")).body == b"mine\n"


@pytest.mark.ns_only(reason="makes root's files in the sandbox by entering its init's user and "
                     "mount namespaces from the host (nsenter); a vm sandbox's init runs in its "
                     "guest, with no host process to enter, and nothing in the API runs as root")
def test_file_api_has_only_the_sandbox_users_rights(sandlotd):
    """Every file route acts with the sandbox user's credentials (uid/gid
    1000, no capabilities): what the user's code cannot read or write, the
    API cannot either — a root-only file, a directory only root may write
    — each refused with 403 naming the path, while the user's own files
    work as before (init's own files: the test above)."""
    d = sandlotd
    sid = d.create()
    sh(d, sid, "echo mine > own.txt")
    sandbox_root_sh(d, sid, "mkdir /tmp/rootdir && chmod 755 /tmp/rootdir"
                            " && echo xyzzy > /tmp/rootdir/secret && chmod 600 /tmp/rootdir/secret"
                            " && echo keep > /tmp/rootfile && chmod 644 /tmp/rootfile")
    # What the user itself sees: no access.
    out = sh(d, sid, "cat /tmp/rootdir/secret 2>&1; "
                     "touch /tmp/rootdir/new 2>&1; rm -f /tmp/rootfile 2>&1; true")
    assert out.count("Permission denied") >= 2 or "Operation not permitted" in out, out

    r = d.get(files_url(sid, path="/tmp/rootdir/secret"))
    assert r.status == 403, r
    assert r.error_code() == "forbidden", r
    assert "tmp/rootdir/secret" in r.json()["error"]["message"], r
    assert b"xyzzy" not in r.body
    for method, url in (("PUT", files_url(sid, path="/tmp/rootdir/new")),
                        ("POST", files_url(sid, "files/mkdir", path="/tmp/rootdir/sub")),
                        ("DELETE", files_url(sid, path="/tmp/rootdir/secret")),
                        ("DELETE", files_url(sid, path="/tmp/rootfile"))):  # sticky /tmp
        r = d.request(method, url, body=b"x" if method == "PUT" else None)
        assert r.status == 403, (method, url, r)
        assert r.error_code() == "forbidden", r
    tar = tar_bytes([("a.txt", "file", b"a", 0o644)])
    r = d.request("POST", files_url(sid, "files/archive", path="/tmp/rootdir"), body=tar)
    assert r.status == 403 and "/tmp/rootdir/a.txt" in r.json()["error"]["message"], r
    # An archive of root's directory leaves out what the user cannot read.
    status, _, _, body, _ = get_digest(d, files_url(sid, "files/archive", path="/tmp/rootdir"))
    assert status == 200
    assert b"xyzzy" not in body
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        assert t.getnames() == [], t.getnames()
    # Nothing changed in root's directory; root's files are intact.
    assert sh(d, sid, "ls -A /tmp/rootdir; cat /tmp/rootfile") == "secret\nkeep\n"

    # The user's own files: as before, and what the API creates is the user's.
    assert d.get(files_url(sid, path="own.txt")).body == b"mine\n"
    assert d.put(files_url(sid, path="sub/dir/new.txt"), b"new").status == 201
    assert d.post(files_url(sid, "files/mkdir", path="made/deep")).status == 201
    owners = sh(d, sid, "stat -c '%u:%g %n' sub sub/dir sub/dir/new.txt made made/deep")
    assert [l.split()[0] for l in owners.splitlines()] == ["1000:1000"] * 5, owners
    assert d.get(files_url(sid, "files/stat", path="/tmp/rootdir/secret")).status == 200
    assert "secret" in names(d, sid, "/tmp/rootdir")
    assert d.delete(files_url(sid, path="sub", recursive=1)).status == 204


# ---- sparse files: sizes shown, downloads bounded ------------------------------------

@pytest.fixture
def limited_daemon(session_dirs, tmp_path_factory):
    """A sandlotd with --max-download 64M."""
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-limited", numbered=True)
    d = Daemon(base, extra_args=["--max-download", "64M"],
               data_dir=session_dirs["data_dir"] / "daemon" / base.name).start()
    yield d
    assert d.stop() == 0, d.logs()


def test_sparse_files_sizes_and_download_limits(limited_daemon):
    """Code can make a file of (up to its disk size in) zeros that takes no
    disk: stat and list show its apparent size and the bytes it takes, and a
    download over the limit (--max-download, or the request's lower
    max_bytes) is a 413 before any data, naming the size and the limit —
    for single files, archives and snapshots alike."""
    d = limited_daemon
    sid = d.create()
    sh(d, sid, "truncate -s 900M sparse && head -c 2000 /dev/urandom > small"
               " && mkdir -p big/deeper small-only && truncate -s 900M big/deeper/sparse"
               " && cp small small-only/")
    st = d.get(files_url(sid, "files/stat", path="sparse")).json()
    assert st["size"] == 900 * MIB and st["allocated"] < 64 * 1024, st
    st = d.get(files_url(sid, "files/stat", path="small")).json()
    assert st["size"] == 2000 and st["allocated"] >= 2000, st
    entries = {e["name"]: e for e in d.get(files_url(sid, "files/list", path="/home/user")).json()["entries"]}
    assert entries["sparse"]["size"] == 900 * MIB and entries["sparse"]["allocated"] < 64 * 1024
    assert entries["small"]["allocated"] >= 2000

    r = d.get(files_url(sid, path="sparse"))
    assert r.status == 413 and r.error_code() == "too_large", r
    msg = r.json()["error"]["message"]
    assert "943718400 bytes" in msg and "67108864 bytes" in msg and "--max-download" in msg, msg

    r = d.get(files_url(sid, path="small", max_bytes="1000"))
    assert r.status == 413 and "2000 bytes" in r.json()["error"]["message"], r
    assert "max_bytes" in r.json()["error"]["message"], r
    r = d.get(files_url(sid, path="small", max_bytes="2000"))
    assert r.status == 200 and len(r.body) == 2000, r
    # Asking for more than the daemon allows does not raise its limit.
    r = d.get(files_url(sid, path="sparse", max_bytes="1G"))
    assert r.status == 413 and "--max-download" in r.json()["error"]["message"], r
    for bad in ("abc", "0", "-5"):
        r = d.get(files_url(sid, path="small", max_bytes=bad))
        assert r.status == 400 and "max_bytes" in r.json()["error"]["message"], (bad, r)

    for url in (files_url(sid, "files/archive", path="big"),
                files_url(sid, "files/archive"),
                f"/v1/sandboxes/{sid}/snapshot"):
        r = d.get(url)
        assert r.status == 413 and r.error_code() == "too_large", (url, r)
        assert "67108864 bytes" in r.json()["error"]["message"], r
    r = d.get(files_url(sid, "files/archive", path="small-only", max_bytes="1000"))
    assert r.status == 413 and "max_bytes" in r.json()["error"]["message"], r
    status, _, size, body, _ = get_digest(d, files_url(sid, "files/archive", path="small-only",
                                                       max_bytes="2000"))
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        assert t.getnames() == ["small"]
