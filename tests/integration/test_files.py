"""--upload and --download: binary-safe, streaming, and never a way to read
or write host files."""
import hashlib
import os
import stat
import uuid
from pathlib import Path

import pytest

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends

SIZE = 50 * 1024 * 1024


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("big") / "big.bin"
    with open(p, "wb") as f:
        for _ in range(SIZE >> 20):
            f.write(os.urandom(1 << 20))
    return p, sha256_file(p)


def tree_digest(root):
    """{relative path: (kind, sha256 or None, exec bit)} of a local tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            rel = os.path.relpath(os.path.join(dirpath, d), root)
            out[rel] = ("dir", None, None)
        for f in filenames:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full), None)
            else:
                out[rel] = ("file", sha256_file(full), bool(st.st_mode & 0o100))
    return out


def make_tree(root):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(1_500_000))
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    (root / "sub" / "name with spaces & ünïcode").write_text("x")
    run = root / "run.sh"
    run.write_text("#!/bin/sh\necho script-ran\n")
    run.chmod(0o755)


# ---- big binary files ----------------------------------------------------------

def test_upload_50mib_binary(sandlot, big_file, tmp_path):
    path, digest = big_file
    r = sandlot.run(["-u", path, "--", "sha256sum", "big.bin"], cwd=tmp_path, timeout=120)
    assert r.rc == 0, r
    assert r.stdout.split()[0] == digest


def test_download_50mib_binary(sandlot, tmp_path):
    r = sandlot.run(["-d", "out.bin", "--", "sh", "-c",
                     f"head -c {SIZE} /dev/urandom > out.bin && sha256sum out.bin"],
                    cwd=tmp_path, timeout=120)
    assert r.rc == 0, r
    local = tmp_path / "out.bin"
    assert local.stat().st_size == SIZE
    assert sha256_file(local) == r.stdout.split()[0]
    assert not [p for p in os.listdir(tmp_path) if "sandlot-" in p], "temporary file left"


def test_round_trip_50mib(sandlot, big_file, tmp_path):
    path, digest = big_file
    r = sandlot.run(["-u", f"{path}:in/big.bin", "-d", "copy.bin:back.bin", "--",
                     "cp", "in/big.bin", "copy.bin"], cwd=tmp_path, timeout=120)
    assert r.rc == 0, r
    assert sha256_file(tmp_path / "back.bin") == digest


def test_upload_keeps_exec_bit_and_remote_dir_syntax(sandlot, tmp_path):
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho tool-ran\n")
    script.chmod(0o755)
    r = sandlot.run(["-u", f"{script}:bin/x/", "--", "sh", "-c", "./bin/x/tool.sh; stat -c %a bin/x/tool.sh"],
                    cwd=tmp_path)
    assert r.rc == 0, r
    assert r.stdout == "tool-ran\n755\n", r


def test_uploaded_files_belong_to_the_sandbox_user(sandlot, tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("x")
    r = sandlot.run(["-u", f, "-u", f"{f}:deep/er/g.txt", "--", "sh", "-c",
                     "stat -c '%u %g' f.txt deep deep/er deep/er/g.txt; echo more >> f.txt"], cwd=tmp_path)
    assert r.rc == 0, r
    assert r.stdout.split("\n")[:4] == ["1000 1000"] * 4, r


def test_download_default_name_and_absolute_remote(sandlot, tmp_path):
    r = sandlot.run(["-d", "/tmp/report.txt", "--", "sh", "-c", "echo report > /tmp/report.txt"],
                    cwd=tmp_path)
    assert r.rc == 0, r
    assert (tmp_path / "report.txt").read_text() == "report\n"


def test_download_replaces_existing_local_file(sandlot, tmp_path):
    (tmp_path / "x.txt").write_text("old contents that are longer\n")
    r = sandlot.run(["-d", "x.txt", "--", "sh", "-c", "echo new > x.txt"], cwd=tmp_path)
    assert r.rc == 0, r
    assert (tmp_path / "x.txt").read_text() == "new\n"


def test_download_missing_is_an_error(sandlot, tmp_path):
    r = sandlot.run(["-d", "nope.txt", "--", "true"], cwd=tmp_path)
    assert r.rc == 125, r
    assert "nope.txt" in r.stderr, r
    assert not (tmp_path / "nope.txt").exists()


def test_download_after_failed_command_still_happens(sandlot, tmp_path):
    r = sandlot.run(["-d", "log.txt", "--", "sh", "-c", "echo partial > log.txt; exit 7"], cwd=tmp_path)
    assert r.rc == 7, r
    assert (tmp_path / "log.txt").read_text() == "partial\n"


def test_download_of_a_fifo_does_not_block(sandlot, tmp_path):
    r = sandlot.run(["-d", "pipe", "--", "mkfifo", "pipe"], cwd=tmp_path, timeout=30)
    assert r.elapsed < sandlot.within(15), r
    assert not (tmp_path / "pipe").exists() or (tmp_path / "pipe").stat().st_size == 0


# ---- directories ------------------------------------------------------------------

def test_upload_directory(sandlot, tmp_path):
    src = tmp_path / "tree"
    make_tree(src)
    want = tree_digest(src)
    script = ("cd tree && ./run.sh && find . -mindepth 1 | sort && "
              "find . -type f | sort | xargs -d '\\n' sha256sum")
    r = sandlot.run(["-u", "tree", "--", "sh", "-c", script], cwd=tmp_path)
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "script-ran"
    listed = {ln[2:] for ln in lines[1:] if ln.startswith("./") and "  " not in ln}
    assert listed == set(want), (listed, set(want))
    sums = {}
    for ln in lines:
        if "  ./" in ln:
            h, name = ln.split("  ./", 1)
            sums[name] = h
    for rel, (kind, digest, _) in want.items():
        if kind == "file":
            assert sums[rel] == digest, rel


def test_download_directory(sandlot, tmp_path):
    script = ("mkdir -p out/x/y out/empty && echo one > out/one.txt && "
              "head -c 3000000 /dev/urandom > out/x/y/rand.bin && "
              "cd out && find . -type f | sort | xargs sha256sum")
    r = sandlot.run(["-d", "out:local-out", "--", "sh", "-c", script], cwd=tmp_path)
    assert r.rc == 0, r
    local = tmp_path / "local-out"
    got = tree_digest(local)
    assert set(got) == {"x", "x/y", "empty", "one.txt", "x/y/rand.bin"}, got
    for ln in r.stdout.splitlines():
        h, name = ln.split("  ./", 1)
        assert got[name][1] == h, name


@pytest.mark.backends(check=True)
def test_directory_round_trip(sandlot, tmp_path):
    src = tmp_path / "tree"
    make_tree(src)
    r = sandlot.run(["-u", "tree:work/", "-d", "work/tree:back", "--", "true"], cwd=tmp_path)
    assert r.rc == 0, r
    assert tree_digest(tmp_path / "back") == tree_digest(src)


# ---- escapes: symlinks and .. --------------------------------------------------------

HOST_SHADOW = "/etc/shadow"


def host_secret():
    with open(HOST_SHADOW, "rb") as f:
        return f.read()


def assert_no_host_content(path, host_bytes):
    if os.path.islink(path):
        raise AssertionError(f"download created a local symlink {path} -> {os.readlink(path)}")
    if os.path.isfile(path):
        data = open(path, "rb").read()
        assert data != host_bytes, f"{path} holds the host's file"


def test_symlink_to_host_shadow_is_not_followed(sandlot, tmp_path):
    r = sandlot.run(["-d", "leak", "--", "ln", "-s", "/etc/shadow", "leak"], cwd=tmp_path)
    assert r.rc in (0, 125), r
    assert_no_host_content(tmp_path / "leak", host_secret())
    assert not (tmp_path / "leak").exists() or (tmp_path / "leak").stat().st_size == 0


def test_symlink_to_root_is_not_followed(sandlot, tmp_path):
    r = sandlot.run(["-d", "root:rootcopy", "-d", "root/etc/passwd:pw", "--",
                     "ln", "-s", "/", "root"], cwd=tmp_path)
    assert r.rc == 0, r
    rc = tmp_path / "rootcopy"
    assert not os.path.islink(rc)
    if rc.exists():
        # Whatever was copied, it is not the host's root.
        assert not (rc / "etc" / "shadow").exists()
        assert not (rc / "root").exists() or not any((rc / "root").iterdir())
    pw = (tmp_path / "pw").read_text()
    assert "user:x:1000:1000" in pw, pw
    assert pw != open("/etc/passwd").read()


def test_symlink_through_to_host_shadow_is_refused(sandlot, tmp_path):
    r = sandlot.run(["-d", "root/etc/shadow:shadow", "--", "ln", "-s", "/", "root"], cwd=tmp_path)
    assert r.rc == 125, r  # /etc/shadow does not exist inside the sandbox
    assert not (tmp_path / "shadow").exists()


def test_download_etc_passwd_gives_the_sandboxes(sandlot, tmp_path):
    r = sandlot.run(["-d", "/etc/passwd:pw", "-d", "../../etc/passwd:pw2", "-d", "/etc/hostname:hn",
                     "--", "true"], cwd=tmp_path)
    assert r.rc == 0, r
    pw = (tmp_path / "pw").read_text()
    assert pw == (tmp_path / "pw2").read_text()
    assert "user:x:1000:1000:sandbox user:/home/user:/bin/bash" in pw
    assert pw != open("/etc/passwd").read()
    assert (tmp_path / "hn").read_text() == "sandlot\n"


def test_download_through_proc_magic_links(sandlot, tmp_path):
    host = open("/etc/passwd", "rb").read()
    for remote in ("/proc/1/root/etc/passwd", "/proc/self/root/etc/passwd", "/proc/1/cwd/../../etc/passwd"):
        local = tmp_path / "out"
        if local.exists():
            local.unlink()
        sandlot.run(["-d", f"{remote}:out", "--", "true"], cwd=tmp_path)
        assert_no_host_content(local, host)


def test_download_directory_with_escaping_symlinks(sandlot, tmp_path):
    script = "mkdir d && echo hi > d/f && ln -s /etc/shadow d/s && ln -s / d/r && ln -s ../.. d/up"
    r = sandlot.run(["-d", "d", "--", "sh", "-c", script], cwd=tmp_path)
    assert r.rc == 0, r
    d = tmp_path / "d"
    assert (d / "f").read_text() == "hi\n"
    for name in ("s", "r", "up"):
        p = d / name
        assert not os.path.islink(p), f"local symlink {p} created"
        assert not p.exists() or (p.is_file() and p.read_bytes() != host_secret()), p
    assert not (d / "r" / "etc").exists()


def test_upload_with_dotdot_stays_inside(sandlot, tmp_path):
    name = "sandlot-test-" + uuid.uuid4().hex
    f = tmp_path / "f.txt"
    f.write_text("payload\n")
    for remote in (f"../../etc/{name}", f"/etc/{name}", f"../../../../../../etc/{name}"):
        r = sandlot.run(["-u", f"{f}:{remote}", "--", "cat", f"/etc/{name}"], cwd=tmp_path)
        # /etc is read-only inside: the upload fails (125).  It must never
        # land on the host.
        assert r.rc == 125, r
        assert "--upload" in r.stderr, r
        assert not os.path.exists(f"/etc/{name}"), "upload wrote into the host's /etc"
    for remote in (f"../../tmp/{name}", f"/tmp/{name}"):
        r = sandlot.run(["-u", f"{f}:{remote}", "--", "cat", f"/tmp/{name}"], cwd=tmp_path)
        assert (r.rc, r.stdout) == (0, "payload\n"), r
        assert not os.path.exists(f"/tmp/{name}"), "upload wrote into the host's /tmp"


def test_upload_does_not_follow_local_symlinks(sandlot, tmp_path):
    """A symlink in an uploaded tree is not followed on the host: the host
    file it points to is never copied in."""
    src = tmp_path / "proj"
    src.mkdir()
    (src / "ok.txt").write_text("fine\n")
    os.symlink("/etc/shadow", src / "shadow-link")
    os.symlink("/root", src / "root-link")
    marker = "sandlot-marker-" + uuid.uuid4().hex
    os.makedirs("/root", exist_ok=True)
    open(f"/root/{marker}", "w").close()
    try:
        r = sandlot.run(["-u", "proj", "--", "sh", "-c",
                         "cat proj/ok.txt; cat proj/shadow-link; ls -A proj/root-link/; true"],
                        cwd=tmp_path)
    finally:
        os.unlink(f"/root/{marker}")
    assert r.rc == 0, r
    assert r.out.startswith(b"fine\n"), r
    first = host_secret().split(b"\n")[0]
    assert first not in r.out, "the host's /etc/shadow was uploaded through a symlink"
    assert marker.encode() not in r.out, "the host's /root was uploaded through a symlink"


def test_upload_missing_parent_dirs_are_created(sandlot, tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("deep\n")
    r = sandlot.run(["-u", f"{f}:a/b/c/d/e.txt", "--", "cat", "a/b/c/d/e.txt"], cwd=tmp_path)
    assert (r.rc, r.stdout) == (0, "deep\n"), r


def assert_one_clear_line(r, *needles):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r
    for n in needles:
        assert n in lines[0], r
    parts = lines[0].split(": ")
    repeated = [p for a, p in zip(parts, parts[1:]) if a == p]
    assert not repeated, f"context repeated in the message: {lines[0]!r}"


def test_transfer_errors_are_one_clear_line(sandlot, tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("x")
    r = sandlot.run(["-u", f"{f}:../../etc/x", "--", "true"], cwd=tmp_path)
    assert r.rc == 125, r
    assert_one_clear_line(r, "../../etc/x", "Read-only file system")
    r = sandlot.run(["-d", "missing.txt", "--", "true"], cwd=tmp_path)
    assert r.rc == 125, r
    assert_one_clear_line(r, "missing.txt", "No such file")


# tests/unit/fake_init.c: a compromised init (made by `make`, next to the
# unit tests), whose LIST of "dir-dotdot" answers an entry named "..".
FAKE_INIT = Path(__file__).resolve().parents[2] / "build" / "tests" / "unit" / "fake-init"


@pytest.mark.parametrize("key", ["dotdot", "slash", "root", "empty", "dot"])
@pytest.mark.ns_only(reason="replaces sandlot-init by a fake one (SANDLOT_INIT): a vm sandbox's init is in its initramfs")
def test_download_refuses_hostile_entry_names(sandlot, tmp_path, key):
    """A compromised init listing "..", "a/b", "/", "" or "." must not make
    --download write anywhere but under the target: the run fails (125)
    naming the bad entry, and nothing appears outside out/."""
    assert os.access(FAKE_INIT, os.X_OK), f"{FAKE_INIT} missing: run `make` first"
    work = tmp_path / "work"
    work.mkdir()
    before = sorted(os.listdir(tmp_path))
    r = sandlot.run(["-d", f"dir-{key}:out", "--", "true"], cwd=work,
                    extra_env={"SANDLOT_INIT": str(FAKE_INIT)})
    assert r.rc == 125, r
    assert "invalid entry name" in r.stderr, r
    assert sorted(os.listdir(tmp_path)) == before
    assert sorted(os.listdir(work)) == ["out"]
    assert os.listdir(work / "out") in ([], ["ok"])
