"""The data dir's storage pool (src/linux/storage.c): admission against the
space there really is, a full pool and a full data filesystem that lose
nobody's data, and workspaces of the former layout (an ext4 image per sandbox) brought into the pool.

The full-filesystem case runs sandlotd on a data dir of its own on a small
ext4 filesystem the test makes (a loop-mounted file), so that filling it
fills nothing of the host's.
"""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import hostscan
from conftest import SANDLOT, Sandlot, wait_until
from daemon import Daemon

SMALL = {"memory": "64M", "pids": 32}


def sh(d, sid, command, **kw):
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": command, **kw})
    assert r.status == 200, r
    return r.json()


def sh_ok(d, sid, command):
    out = sh(d, sid, command)
    assert out["exit_code"] == 0, out
    return out["stdout"]


def hashes(d, sid):
    out = sh_ok(d, sid, "cd /home/user && find . -type f -print0 | sort -z | "
                        "xargs -0 -r sha256sum")
    return dict(reversed(ln.split("  ", 1)) for ln in out.splitlines())


def pause(d, sid):
    r = d.post(f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200 and r.json()["state"] == "paused", r


def resume(d, sid):
    r = d.post(f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json()["state"] == "running", r


@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    made = []

    def make(extra_args=(), data_dir=None):
        base = tmp_path_factory.mktemp("sandlotd-storage", numbered=True)
        d = Daemon(base, extra_args=extra_args,
                   data_dir=data_dir or session_dirs["data_dir"] / "daemon" / base.name)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            d.stop()


# ---- admission -----------------------------------------------------------------

def test_run_with_a_disk_that_cannot_be_reserved(sandlot):
    r = sandlot.run(["--disk", "8T", "--", "true"])
    assert r.rc == 125, r
    assert "cannot reserve 8.0T of disk" in r.stderr, r
    assert "SANDLOT_DISK_OVERCOMMIT" in r.stderr, r
    # nothing was reserved or made for it
    r = sandlot.run(["--", "true"])
    assert r.rc == 0, r
    # a ratio that is not one is a usage error, named
    r = sandlot.run(["--", "true"], extra_env={"SANDLOT_DISK_OVERCOMMIT": "0.5"})
    assert r.rc == 2 and "SANDLOT_DISK_OVERCOMMIT" in r.stderr, r


def test_create_with_a_disk_that_cannot_be_reserved(sandlotd):
    r = sandlotd.post("/v1/sandboxes", json_body={**SMALL, "disk": "8T"})
    assert r.status == 507, r
    err = r.json()["error"]
    assert err["code"] == "insufficient_storage", r
    assert "cannot reserve 8.0T of disk" in err["message"], r
    assert sandlotd.get("/v1/sandboxes").json()["sandboxes"] == []
    # the CLI says so, and fails as for any refusal of sandlotd's (status 1)
    env = dict(os.environ, SANDLOT_HOST=f"unix:{sandlotd.sock}")
    p = subprocess.run([str(SANDLOT), "create", "--disk", "8T"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p
    assert "cannot reserve 8.0T of disk" in p.stderr, p
    assert p.stdout == "", p
    # and a size that fits is fine
    sid = sandlotd.create(**SMALL, disk="64M")
    assert sandlotd.delete(f"/v1/sandboxes/{sid}").status == 204


# ---- a pool that cannot be made ------------------------------------------------------

@pytest.fixture
def tiny_fs(tmp_path):
    """A 300 MiB tmpfs: too small for a storage pool (1 GiB at least)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300M,mode=0700", "tiny", str(mnt)],
                   check=True)
    yield mnt
    hostscan.unmount_pools(mnt)
    subprocess.run(["umount", str(mnt)], check=True)


def nothing_made(data_dir):
    """What a failed attempt at making a pool must not leave: a pool file,
    a half-made one, a mount or a loop device."""
    storage = Path(data_dir) / "storage"
    left = [n for n in (os.listdir(storage) if storage.is_dir() else []) if n != "pool.lock"]
    left += [f"loop {dev}" for dev, bf in hostscan.loop_backing_files().items()
             if bf.startswith(str(data_dir))]
    left += [f"mount {mp}" for mp in hostscan.pool_mounts(data_dir)]
    return left


def without_mkfs(fake=None):
    """argv prefix: run the rest in a mount namespace of its own where
    mkfs.btrfs is not there (/dev/null, not executable, bound over it), or
    is the script `fake`."""
    tool = shutil.which("mkfs.btrfs") or "/usr/sbin/mkfs.btrfs"
    over = fake or "/dev/null"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind "{over}" "{tool}" && exec "$@"', "sh"]


def test_run_where_no_pool_can_be_made(tiny_fs, tmp_path):
    """Each reason a pool cannot be made is named, and nothing is left."""
    # No room for one on the data filesystem.
    sl = Sandlot(tiny_fs / "data")
    r = sl.run(["--", "true"])
    assert r.rc == 125, r
    assert "cannot make a storage pool of 1.0G" in r.stderr and "free beyond" in r.stderr, r
    assert nothing_made(sl.data_dir) == []
    # tmpfs storage needs no pool
    assert sl.run(["--storage", "tmpfs", "--", "true"]).rc == 0
    assert nothing_made(sl.data_dir) == []

    # No mkfs.btrfs.
    sl = Sandlot(tmp_path / "no-mkfs")
    r = sl.run([], raw_argv=without_mkfs() + sl.argv(["--", "true"]))
    assert r.rc == 125, r
    assert "mkfs.btrfs not found" in r.stderr and "btrfs-progs" in r.stderr, r
    assert nothing_made(sl.data_dir) == []

    # mkfs.btrfs fails: what it said is in the error.
    fake = tmp_path / "fake-mkfs"
    fake.write_text("#!/bin/sh\necho 'ERROR: no, not today' >&2\nexit 3\n")
    fake.chmod(0o755)
    sl = Sandlot(tmp_path / "bad-mkfs")
    r = sl.run([], raw_argv=without_mkfs(fake) + sl.argv(["--", "true"]))
    assert r.rc == 125, r
    assert "exited with 3: ERROR: no, not today" in r.stderr, r
    assert nothing_made(sl.data_dir) == []


def test_create_where_no_pool_can_be_made(tiny_fs, tmp_path, own_daemon):
    d = own_daemon(data_dir=tiny_fs / "data").start()
    r = d.post("/v1/sandboxes", json_body=SMALL)
    assert r.status == 507, r
    assert r.error_code() == "insufficient_storage", r
    assert "cannot make a storage pool of 1.0G" in r.json()["error"]["message"], r
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    assert d.stop() == 0
    assert nothing_made(d.data_dir) == []

    # A host without mkfs.btrfs: a server-side failure that says what is
    # missing (not a 404: nothing the client named is missing).
    d = own_daemon(data_dir=tmp_path / "no-mkfs")
    d.prefix = without_mkfs()
    d.start()
    r = d.post("/v1/sandboxes", json_body=SMALL)
    assert r.status == 500, r
    assert "mkfs.btrfs not found" in r.json()["error"]["message"], r
    assert d.stop() == 0
    assert nothing_made(d.data_dir) == []


# ---- the pool's last user ------------------------------------------------------------

def pool_loops(data_dir):
    return {dev for dev, bf in hostscan.loop_backing_files().items()
            if bf.startswith(str(data_dir)) and hostscan.is_pool_image(bf)}


def held_by_us(dev):
    """Processes of ours (descendants of this one) whose mount namespace
    holds loop device `dev`; a namespace of anyone else's, made while the
    pool was mounted, may hold a copy too (hostscan.loop_holders)."""
    return [p for p in hostscan.loop_holders(dev) if hostscan.is_descendant(p, os.getpid())]


def test_the_pool_goes_when_its_last_user_ends(own_daemon):
    """sandlotd takes the pool down when it stops; a `sandlot run` sandbox on
    the same data dir that still runs then keeps it (detached from the
    host's mount table) until it ends, and then its loop device goes too."""
    d = own_daemon().start()
    sid = d.create(**SMALL, disk="64M")
    sh_ok(d, sid, "echo kept > f")
    pause(d, sid)
    [dev] = pool_loops(d.data_dir)
    assert hostscan.pool_mounts(d.data_dir)
    # Alone: a stop unmounts it, and its loop device detaches itself.
    assert d.stop() == 0
    assert hostscan.pool_mounts(d.data_dir) == []
    assert wait_until(lambda: not held_by_us(dev) and not hostscan.lingering_pool_loops(
        d.data_dir), 10), (hostscan.loop_backing_files(), hostscan.loop_holders(dev))

    # With a `sandlot run` sandbox on the same data dir.
    d.start()
    sl = Sandlot(d.data_dir)
    run = sl.popen(["-i", "--", "sh", "-c", "echo one > a; echo ready; read x; "
                    "head -c 1000000 /dev/urandom > b && cat a && wc -c < b"],
                   stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert run.stdout.readline() == b"ready\n"
        assert d.stop() == 0
        # gone from the host's mount table at once...
        assert hostscan.pool_mounts(d.data_dir) == []
        [dev] = pool_loops(d.data_dir)
        assert held_by_us(dev), "the running sandbox lost its workspace"
        # ...and the sandbox still works in its workspace
        run.stdin.write(b"go\n")
        run.stdin.close()
        out = run.stdout.read()
        assert run.wait(timeout=60) == 0, out
        assert out == b"one\n1000000\n", out
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # The run was the last user: nothing holds the pool any more.
    assert wait_until(lambda: not held_by_us(dev) and not hostscan.lingering_pool_loops(
        d.data_dir), 10), (hostscan.loop_backing_files(), hostscan.loop_holders(dev))
    # And it comes back as it was.
    d.start()
    resume(d, sid)
    assert sh_ok(d, sid, "cat f") == "kept\n"
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert d.stop() == 0


# ---- a full pool, a full data filesystem -----------------------------------------

@pytest.fixture
def small_fs(tmp_path):
    """A 1.5 GiB ext4 filesystem on a loop device, mounted at tmp_path/fs."""
    img, mnt = tmp_path / "fs.img", tmp_path / "fs"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(1536 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(img)], check=True)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    yield mnt
    hostscan.unmount_pools(mnt)
    # The pool's loop device lets go of its file a moment after the pool
    # is unmounted.
    assert wait_until(lambda: subprocess.run(["umount", str(mnt)]).returncode == 0, 10), \
        subprocess.run(["findmnt", "-R", str(mnt)], capture_output=True, text=True).stdout


def fill_host(path):
    """Write zeros to `path` until the filesystem is full."""
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


def test_a_full_pool_and_a_full_data_filesystem_lose_nothing(own_daemon, small_fs):
    """The data dir on a small filesystem: one sandbox (admitted through
    overcommit) fills the storage pool, the rest of the filesystem is
    filled from the host, and a neighbour under its own quota keeps every
    byte of its files: its writes succeed or fail cleanly, and pause and
    resume bring back exactly what it had."""
    d = own_daemon(["--disk-overcommit", "4"], data_dir=small_fs / "data").start()
    nb = d.create(**SMALL, disk="64M")
    sh_ok(d, nb, "head -c 8000000 /dev/urandom > data.bin; mkdir -p sub; "
                 "seq 1 100000 > sub/seq.txt")
    want = hashes(d, nb)

    # Only through overcommit: 3G does not fit a 1.5G filesystem.
    big = d.post("/v1/sandboxes", json_body={**SMALL, "disk": "3G"})
    assert big.status == 201, big
    hog = big.json()["id"]
    out = sh(d, hog, "dd if=/dev/zero of=fill bs=1M 2>&1; sync; echo rc=$?")
    assert "No space left on device" in out["stdout"], out

    # And the data filesystem itself, from the host.
    fill_host(small_fs / "filler")
    assert os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize < (2 << 20)

    # The neighbour: a new write either succeeds or fails cleanly...
    out = sh(d, nb, "head -c 4000000 /dev/urandom > more.bin && sync more.bin && "
                    "sha256sum more.bin; echo rc=$?")
    wrote = "rc=0" in out["stdout"]
    if wrote:
        want["./more.bin"] = out["stdout"].split()[0]
    else:
        assert "No space left on device" in out["stderr"], out
        sh(d, nb, "rm -f more.bin")
    # ...and what it had is intact, byte for byte.
    assert hashes(d, nb) == want
    # The registry needs room on the data filesystem: give it back.
    os.unlink(small_fs / "filler")
    pause(d, nb)
    resume(d, nb)
    assert hashes(d, nb) == want
    # The hog, whose writes failed, works on once it frees space.
    sh_ok(d, hog, "rm fill; echo ok > small && cat small")
    for sid in (nb, hog):
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert d.stop() == 0
    assert not hostscan.pool_mounts(small_fs)


# ---- the former layout ------------------------------------------------------------

def test_workspaces_of_the_former_layout_are_brought_in(own_daemon, tmp_path):
    """A paused sandbox kept by the former layout — the registry saying
    paused, its files in <data-dir>/workspaces/<id>.img, an ext4 image
    holding home/ and tmp/ with sandbox uids, and no storage pool — comes
    back on the new daemon: same files, same owners, resumable."""
    d = own_daemon().start()
    sid = d.create(**SMALL, disk="48M")
    sh_ok(d, sid, "mkdir -p p/q; head -c 3000000 /dev/urandom > p/q/r.bin; "
                  "echo hi > a.txt; ln -s a.txt link; chmod 640 a.txt; echo t > /tmp/t")
    want = hashes(d, sid)
    pause(d, sid)
    # The files as the former layout kept them (sandbox uids), from the pool.
    kept = Path(d.data_dir) / "storage" / "mnt" / "kept" / sid
    tree = tmp_path / "tree"
    tree.mkdir()
    for sub in ("home", "tmp"):
        subprocess.run(["cp", "-a", str(kept / sub), str(tree / sub)], check=True)
    assert os.stat(tree / "home" / "a.txt").st_uid == 1000
    assert d.stop() == 0
    # The former layout had no pool: remove it, and write the image.
    storage = Path(d.data_dir) / "storage"
    assert not hostscan.pool_mounts(storage)
    shutil.rmtree(storage)
    ws = Path(d.data_dir) / "workspaces"
    ws.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-d", str(tree),
                    str(ws / f"{sid}.img"), "48M"], check=True)

    d.start()
    assert "workspace_imported" in d.log_text(), d.logs()
    assert not ws.exists()
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.json()["state"] == "paused", r
    resume(d, sid)
    assert hashes(d, sid) == want
    assert sh_ok(d, sid, "stat -c '%a %U' a.txt; readlink link; cat /tmp/t; "
                         "find /home/user ! -user user | wc -l") == "640 user\na.txt\nt\n0\n"
    # its quota came along
    out = sh(d, sid, "head -c 60000000 /dev/zero > z; echo rc=$?")
    assert "rc=1" in out["stdout"] and "quota" in out["stderr"], out
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert d.stop() == 0


# ---- sizing -----------------------------------------------------------------------

def test_the_pool_grows_on_demand_and_by_storage_size(own_daemon):
    d = own_daemon(["--storage-size", "1200M"]).start()
    img = Path(d.data_dir) / "storage" / "pool.img"
    size0 = img.stat().st_size
    assert size0 >= 1200 << 20, size0
    # fully allocated: no hole anywhere
    assert img.stat().st_blocks * 512 >= size0
    # a quota the pool cannot hold yet: it grows (while others run)
    small = d.create(**SMALL, disk="32M")
    sid = d.create(**SMALL, disk="2G")
    size1 = img.stat().st_size
    assert size1 > size0 and img.stat().st_blocks * 512 >= size1, (size0, size1)
    print(f"pool {size0 >> 20} MiB, then {size1 >> 20} MiB")
    out = sh(d, sid, "fallocate -l 1900M big && echo ok")
    assert out["stdout"] == "ok\n", out
    sh_ok(d, small, "echo still fine > f && cat f")
    for s in (small, sid):
        assert d.delete(f"/v1/sandboxes/{s}").status == 204
    assert d.stop() == 0
    bad = own_daemon(["--storage-size", "lots"])
    with pytest.raises(RuntimeError, match="exited with 2"):
        bad.start()
    bad = own_daemon(["--disk-overcommit", "0.5"])
    with pytest.raises(RuntimeError, match="exited with 2"):
        bad.start()


# ---- many at once -----------------------------------------------------------------

def test_the_ledger_adds_up_after_concurrent_creates_and_deletes(own_daemon):
    """Workspaces are made and removed many at once (the pool lock is
    shared; only the ledger's read-modify-write is exclusive): after 48
    concurrent creates `reserved` holds every quota, and after their
    concurrent deletes only the one still running's."""
    import concurrent.futures as cf
    d = own_daemon().start()
    keep = d.create(**SMALL, disk="40M")
    ledger = Path(d.data_dir) / "storage" / "mnt" / "reserved"
    with cf.ThreadPoolExecutor(16) as ex:
        ids = list(ex.map(lambda _: d.create(**SMALL, disk="16M"), range(48)))
    assert int(ledger.read_text()) == (40 << 20) + 48 * (16 << 20)
    with cf.ThreadPoolExecutor(16) as ex:
        codes = list(ex.map(lambda i: d.delete(f"/v1/sandboxes/{i}").status, ids))
    assert codes == [204] * len(ids)
    # (the workspaces go with the teardowns, moments after the answers)
    assert wait_until(lambda: int(ledger.read_text()) == 40 << 20, 10), ledger.read_text()
    assert sorted(os.listdir(ledger.parent / "kept")) == [keep]
    assert d.delete(f"/v1/sandboxes/{keep}").status == 204
    assert wait_until(lambda: int(ledger.read_text()) == 0, 10), ledger.read_text()
    assert d.stop() == 0


def test_workspaces_of_sandboxes_deleted_during_creates_are_removed(own_daemon):
    """A deleted sandbox's workspace lock can be held for a moment by the
    children that concurrent creations clone from sandlotd (they start with
    a copy of every descriptor of the daemon): its removal waits for them
    (workspaces.c) instead of leaving the workspace, and its disk
    reservation, behind."""
    import concurrent.futures as cf
    d = own_daemon().start()
    ledger = Path(d.data_dir) / "storage" / "mnt" / "reserved"

    def churn(_):
        for _ in range(10):
            sid = d.create(**SMALL, disk="16M")
            assert d.delete(f"/v1/sandboxes/{sid}").status == 204
        return True

    with cf.ThreadPoolExecutor(12) as ex:
        assert all(ex.map(churn, range(12)))
    kept = ledger.parent / "kept"
    assert wait_until(lambda: not os.listdir(kept) and int(ledger.read_text()) == 0, 15), \
        (len(os.listdir(kept)), ledger.read_text())
    log = d.log_text()
    assert "workspace_remove_failed" not in log, \
        [ln for ln in log.splitlines() if "workspace_remove_failed" in ln][:3]
    assert log.count("event=workspace_removed") == 120
    assert d.stop() == 0
