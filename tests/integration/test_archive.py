"""Moving a paused sandbox between nodes through an archive store
(src/daemon/archives.c, docs/fleet-move.md).

Two (or three) sandlotd with their own data dirs — two nodes — share a
store: a file:// directory, or an S3 double (s3double.py, which checks
SigV4 signatures with the secret) listening in a network namespace of the
test's own, the daemons joining that namespace (nsenter --net).  Cases: a
move keeps every byte, owner, mode and link (SHA-256 checked); the old node
fences its stale copy at start-up and at its next resume or archive (410
sandbox_moved, never served, its workspace gone); a sandbox resumed after
its archive cannot be taken elsewhere; a corrupt, missing or unreachable
archive, bad credentials and a daemon without a store give clear errors
and leave nothing behind.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import wait_until
from daemon import Daemon

HERE = Path(__file__).resolve().parent
SMALL = {"memory": "64M", "disk": "32M", "pids": 32}
WRITE = ("set -e; cd /home/user; echo hello > f.txt; mkdir -p d/e; ln -s ../f.txt d/l; "
         "head -c 3000000 /dev/urandom > big; chmod 600 big; echo t > /tmp/t; "
         "sha256sum big | cut -d' ' -f1")
READ = ("cd /home/user; cat d/l; sha256sum big | cut -d' ' -f1; stat -c '%a %U' big; "
        "readlink d/l; test -d d/e && echo dir; cat /tmp/t")


def assert_error(r, status, code):
    assert r.status == status, r
    err = r.json()["error"]
    assert err["code"] == code, r
    assert err["message"], r
    return err


def kept(d, sid):
    return (Path(d.data_dir) / "storage" / "mnt" / "kept" / sid).exists()


@pytest.fixture
def nodes(session_dirs, tmp_path_factory):
    """make(archive_url, env=None, prefix=()) -> a started Daemon; every one
    is stopped (cleanly, exit 0) after the test."""
    made = []

    def make(url, env=None, prefix=(), start=True, node=None):
        base = tmp_path_factory.mktemp("sandlotd-archive", numbered=True)
        args = ["--archive", url] + (["--node-id", node] if node else [])
        d = Daemon(base, extra_args=args, env=env, prefix=prefix,
                   data_dir=session_dirs["data_dir"] / "daemon" / base.name)
        made.append(d)
        return d.start() if start else d

    yield make
    for d in made:
        if d.proc is not None:
            rc = d.stop()
            assert rc == 0, f"sandlotd exited with {rc}:\n{d.logs()}"


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    s.mkdir()
    return s


def paused_with_files(d):
    sid = d.create(auto_resume=False, **SMALL)
    r = d.exec(sid, WRITE)
    assert r["exit_code"] == 0, r
    digest = r["stdout"].strip()
    assert d.post(f"/v1/sandboxes/{sid}/pause", json_body={}).status == 200
    return sid, digest


def archive(d, sid):
    r = d.post(f"/v1/sandboxes/{sid}/archive", json_body={})
    assert r.status == 200, r
    return r.json()["archive"]


def restore(d, sid):
    return d.post(f"/v1/sandboxes/{sid}/resume", json_body={"from_archive": True})


def assert_same_files(d, sid, digest):
    r = d.exec(sid, READ)
    assert r["exit_code"] == 0, r
    assert r["stdout"].split("\n")[:7] == ["hello", digest, "600 user", "../f.txt", "dir", "t", ""], r


# ---- file:// ---------------------------------------------------------------------------

def test_move_and_fence_after_restart(nodes, store):
    """Archive on A, A dies, B resumes it from the store with every byte;
    A comes back, finds the newer generation, deletes its copy, answers 410."""
    url = f"file://{store}"
    a, b = nodes(url, node="na"), nodes(url, node="nb")
    sid, digest = paused_with_files(a)
    assert sid.startswith("sb-na-")
    info = archive(a, sid)
    assert info["generation"] == 1 and info["url"] == f"{url}/sandboxes/{sid}/1/workspace.tar"
    assert info["node"] == "na"
    tar = store / "sandboxes" / sid / "1" / "workspace.tar"
    assert hashlib.sha256(tar.read_bytes()).hexdigest() == info["sha256"]
    assert tar.stat().st_size == info["bytes"]
    owner = json.loads((store / "sandboxes" / sid / "owner.json").read_text())
    assert (owner["generation"], owner["archive_generation"], owner["state"]) == (1, 1, "archived")
    a.kill9()

    r = restore(b, sid)
    assert r.status == 200, r
    assert r.json()["state"] == "running" and r.json()["id"] == sid
    assert_same_files(b, sid, digest)
    owner = json.loads((store / "sandboxes" / sid / "owner.json").read_text())
    assert (owner["generation"], owner["archive_generation"], owner["state"]) == (2, 1, "claimed")
    assert owner["node"] == "nb"

    a.start()
    assert "event=sandbox_moved sandbox=" + sid in a.log_text()
    assert not kept(a, sid)
    for method, path, body in (("GET", f"/v1/sandboxes/{sid}", None),
                               ("POST", f"/v1/sandboxes/{sid}/resume", {}),
                               ("POST", f"/v1/sandboxes/{sid}/exec", {"command": "true"}),
                               ("POST", f"/v1/sandboxes/{sid}/archive", {})):
        err = assert_error(a.request(method, path, json_body=body), 410, "sandbox_moved")
        assert err["node"] == "nb" and "generation 2" in err["message"], err
    # Only the node that holds it lists it.
    for st in ("all", "deleted"):
        assert sid not in [s["id"] for s in a.get(f"/v1/sandboxes?state={st}").json()["sandboxes"]]
    assert sid in [s["id"] for s in b.get("/v1/sandboxes").json()["sandboxes"]]
    # B still serves it.
    assert b.exec(sid, "cat /home/user/f.txt")["stdout"] == "hello\n"


def test_fence_on_resume_of_a_live_stale_node(nodes, store):
    """A never restarts: its next resume of the moved sandbox fences it."""
    url = f"file://{store}"
    a, b = nodes(url), nodes(url)
    sid, digest = paused_with_files(a)
    archive(a, sid)
    assert restore(b, sid).status == 200
    assert kept(a, sid)
    assert_error(a.post(f"/v1/sandboxes/{sid}/resume", json_body={}), 410, "sandbox_moved")
    assert not kept(a, sid)
    assert_error(a.get(f"/v1/sandboxes/{sid}"), 410, "sandbox_moved")
    assert b.exec(sid, "cat /home/user/f.txt")["stdout"] == "hello\n"


def test_move_back_and_generations(nodes, store):
    """A -> B -> A: every archive and every restore is a new generation;
    the old archive's objects go once a newer one is written."""
    url = f"file://{store}"
    a, b = nodes(url), nodes(url)
    sid, digest = paused_with_files(a)
    assert archive(a, sid)["generation"] == 1
    assert restore(b, sid).status == 200
    assert b.exec(sid, "echo back > /home/user/g.txt")["exit_code"] == 0
    assert b.post(f"/v1/sandboxes/{sid}/pause", json_body={}).status == 200
    assert archive(b, sid)["generation"] == 3
    assert not (store / "sandboxes" / sid / "1").exists()
    r = restore(a, sid)  # A held a stale copy: fenced, then restored anew
    assert r.status == 200, r
    assert a.exec(sid, "cat /home/user/g.txt")["stdout"] == "back\n"
    assert_same_files(a, sid, digest)
    owner = json.loads((store / "sandboxes" / sid / "owner.json").read_text())
    assert (owner["generation"], owner["archive_generation"]) == (4, 3)
    # B's copy is stale now.
    assert_error(b.post(f"/v1/sandboxes/{sid}/resume", json_body={}), 410, "sandbox_moved")
    assert not kept(b, sid)


def test_claimed_sandbox_cannot_be_taken(nodes, store):
    """Resumed on A after its archive: the archive is no longer its newest
    state, so B may not take it."""
    url = f"file://{store}"
    a, b = nodes(url, node="na"), nodes(url, node="nb")
    sid, _ = paused_with_files(a)
    archive(a, sid)
    assert a.post(f"/v1/sandboxes/{sid}/resume", json_body={}).status == 200
    err = assert_error(restore(b, sid), 409, "conflict")
    assert "pause and archive it there first" in err["message"] and err["node"] == "na", err
    assert not kept(b, sid)
    assert b.get(f"/v1/sandboxes/{sid}").status == 404


def test_corrupt_archive_is_refused(nodes, store):
    url = f"file://{store}"
    a, b = nodes(url), nodes(url)
    sid, _ = paused_with_files(a)
    archive(a, sid)
    tar = store / "sandboxes" / sid / "1" / "workspace.tar"
    data = bytearray(tar.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tar.write_bytes(bytes(data))
    err = assert_error(restore(b, sid), 502, "archive_corrupt")
    assert "sha256" in err["message"], err
    assert not kept(b, sid)
    assert b.get(f"/v1/sandboxes/{sid}").status == 404
    assert not list((Path(b.data_dir) / "archive-tmp").iterdir())
    # The store still says A has it: A resumes its own copy.
    assert a.post(f"/v1/sandboxes/{sid}/resume", json_body={}).status == 200


def test_clear_errors(nodes, store, tmp_path, session_dirs, tmp_path_factory):
    url = f"file://{store}"
    a = nodes(url)
    sid = a.create(**SMALL)
    err = assert_error(a.post(f"/v1/sandboxes/{sid}/archive", json_body={}), 409, "conflict")
    assert "pause it first" in err["message"]
    assert_error(a.post(f"/v1/sandboxes/{sid}/archive", json_body={"x": 1}), 400, "bad_request")
    assert_error(a.post(f"/v1/sandboxes/{sid}/resume", json_body={"from_archive": "yes"}), 400,
                 "bad_request")
    missing = "sb-" + "a" * 26
    err = assert_error(restore(a, missing), 404, "not_found")
    assert "no archive of sandbox " + missing in err["message"], err
    # The store's directory is gone (an unmounted share): unavailable, not empty.
    assert a.post(f"/v1/sandboxes/{sid}/pause", json_body={}).status == 200
    store.rename(tmp_path / "elsewhere")
    err = assert_error(a.post(f"/v1/sandboxes/{sid}/archive", json_body={}), 503,
                       "archive_store_unavailable")
    assert str(store) in err["message"], err
    (tmp_path / "elsewhere").rename(store)
    # A daemon without --archive.
    base = tmp_path_factory.mktemp("sandlotd-noarchive", numbered=True)
    plain = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name).start()
    try:
        err = assert_error(restore(plain, missing), 501, "not_supported")
        assert "--archive" in err["message"]
    finally:
        assert plain.stop() == 0
    # Bad --archive arguments stop the daemon at start, naming the problem.
    for bad, words in (("ftp://x", "expected file:///DIR"), ("file://relative", "absolute"),
                       ("s3://bk?endpoint=http://127.0.0.1:1", "AWS_ACCESS_KEY_ID"),
                       ("s3://bk?colour=red", "unknown parameter")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        p = subprocess.run([str(a.binary), "--listen", f"unix:{tmp_path}/x.sock", "--data-dir",
                            str(tmp_path / "d"), "--archive", bad], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and words in p.stderr, (bad, p.returncode, p.stderr)


# ---- S3 (a SigV4-checking double in a network namespace) -------------------------------------

class S3:
    def __init__(self, tmp):
        self.ns = f"slmv-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.dir = tmp / "s3" / "data"
        self.dir.mkdir(parents=True)
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.ns}", sys.executable, str(HERE / "s3double.py"),
             "--bucket", "snaps", "--dir", str(self.dir), "--key", "AKTEST", "--secret",
             "s3cr3t"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        self.port = int(line[1])
        self.prefix = ["nsenter", f"--net=/run/netns/{self.ns}", "--"]

    def url(self, prefix="fleet/a"):
        return f"s3://snaps/{prefix}?endpoint=http://127.0.0.1:{self.port}&region=eu-test-1"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def close(self):
        self.stop()
        subprocess.run(["ip", "netns", "del", self.ns], check=True)


@pytest.fixture
def s3(tmp_path):
    s = S3(tmp_path)
    yield s
    s.close()
    assert s.ns not in os.listdir("/run/netns") if os.path.isdir("/run/netns") else True


def keys(key="AKTEST", secret="s3cr3t"):
    return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}


def test_s3_move_and_fence(nodes, s3):
    a = nodes(s3.url(), env=keys(), prefix=s3.prefix)
    b = nodes(s3.url(), env=keys(), prefix=s3.prefix)
    sid, digest = paused_with_files(a)
    info = archive(a, sid)
    assert info["url"] == f"s3://snaps/fleet/a/sandboxes/{sid}/1/workspace.tar"
    obj = s3.dir / "fleet" / "a" / "sandboxes" / sid / "1" / "workspace.tar"
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == info["sha256"]
    a.kill9()
    r = restore(b, sid)
    assert r.status == 200, r
    assert_same_files(b, sid, digest)
    a.start()
    assert_error(a.get(f"/v1/sandboxes/{sid}"), 410, "sandbox_moved")
    assert not kept(a, sid)


def test_s3_errors(nodes, s3):
    bad_secret = nodes(s3.url(), env=keys(secret="wrong"), prefix=s3.prefix)
    sid = bad_secret.create(**SMALL)
    assert bad_secret.post(f"/v1/sandboxes/{sid}/pause", json_body={}).status == 200
    err = assert_error(bad_secret.post(f"/v1/sandboxes/{sid}/archive", json_body={}), 502,
                       "archive_store_refused")
    assert "SignatureDoesNotMatch" in err["message"] and "AWS_SECRET_ACCESS_KEY" in err["message"]
    unknown = nodes(s3.url(), env=keys(key="AKNOBODY"), prefix=s3.prefix)
    err = assert_error(restore(unknown, sid), 502, "archive_store_refused")
    assert "InvalidAccessKeyId" in err["message"], err
    good = nodes(s3.url(), env=keys(), prefix=s3.prefix)
    err = assert_error(restore(good, sid), 404, "not_found")
    s3.stop()
    err = assert_error(restore(good, sid), 503, "archive_store_unavailable")
    assert "127.0.0.1" in err["message"], err
    assert not kept(good, sid) and not kept(unknown, sid)


def test_hostile_archive_stays_inside(nodes, store, tmp_path):
    """An archive forged in the store (its meta.json matching it) with
    members that try to leave the workspace: "..", an absolute path, a
    symlink out followed by a file through it, a hard link to a host file.
    Nothing lands outside; the restore fails as archive_corrupt and leaves
    nothing."""
    import io
    import tarfile
    victim = tmp_path / "victim"
    victim.mkdir()
    buf = io.BytesIO()

    def add(t, name, data=b"x", **kw):
        ti = tarfile.TarInfo(name)
        for k, v in kw.items():
            setattr(ti, k, v)
        if ti.type == tarfile.REGTYPE:
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        else:
            t.addfile(ti)

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        add(t, "home", type=tarfile.DIRTYPE, mode=0o755, uid=1000, gid=1000)
        add(t, "home/ok.txt", b"fine")
        add(t, "home/link", type=tarfile.SYMTYPE, linkname=str(victim))
        add(t, "home/link/pwned", b"owned")
        add(t, "home/../../../../../.." + str(tmp_path / "escaped"), b"owned")
        add(t, str(tmp_path / "absolute"), b"owned")
        add(t, "home/hard", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        add(t, "tmp", type=tarfile.DIRTYPE, mode=0o1777)
    data = buf.getvalue()
    sid = "sb-" + "b" * 26
    gen = store / "sandboxes" / sid / "1"
    gen.mkdir(parents=True)
    (gen / "workspace.tar").write_bytes(data)
    (gen / "meta.json").write_text(json.dumps({
        "sandbox": sid, "generation": 1, "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data), "disk_bytes": 32 << 20, "options": {"image": "host"}}))
    (store / "sandboxes" / sid / "owner.json").write_text(json.dumps({
        "sandbox": sid, "node": "elsewhere", "instance": "x", "generation": 1,
        "archive_generation": 1, "state": "archived"}))
    b = nodes(f"file://{store}")
    err = assert_error(restore(b, sid), 502, "archive_corrupt")
    assert "does not unpack" in err["message"], err
    assert list(victim.iterdir()) == []
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "absolute").exists()
    assert not kept(b, sid)
    assert b.get(f"/v1/sandboxes/{sid}").status == 404
    owner = json.loads((store / "sandboxes" / sid / "owner.json").read_text())
    assert owner["node"] == "elsewhere", owner  # never claimed


def test_restart_checks_without_claiming(nodes, store):
    """A restart of the node that archived a sandbox checks it (still its
    own) but does not claim it: the archive stays takeable."""
    url = f"file://{store}"
    a, b = nodes(url, node="na"), nodes(url, node="nb")
    sid, digest = paused_with_files(a)
    archive(a, sid)
    assert a.stop() == 0
    a.start()
    assert "checked=1 fenced=0" in a.log_text()
    owner = json.loads((store / "sandboxes" / sid / "owner.json").read_text())
    assert (owner["node"], owner["state"]) == ("na", "archived"), owner
    assert kept(a, sid)
    assert restore(b, sid).status == 200
    assert_same_files(b, sid, digest)
