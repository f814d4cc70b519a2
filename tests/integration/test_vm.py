"""The vm backend's host side (docs/vm.md): `sandlot run --isolation vm` and
sandlotd's "isolation": "vm" start a QEMU microvm per sandbox, jailed, with
sandlot-init as the guest's PID 1 on the control port; they end it without
a trace, also when the daemon is killed.

The guest's kernel and initramfs are the build's (build/vm, or
SANDLOT_VM_DIR); its root is a small erofs image made here from busybox
(SANDLOT_VM_ROOT), since "host" cannot be a VM's root.  Under TCG, as on
this kind of host, every boot costs a few seconds: the tests share boots
where they can.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import hostscan
from conftest import SANDLOT, wait_until

from vmguest import VM_DIR, busybox_root, missing

BOOT = 120  # bound on one boot + command under TCG on a loaded machine

pytestmark = [pytest.mark.vm, pytest.mark.skipif(missing() is not None, reason=missing() or "")]


def hardware_kvm():
    return any(Path(f"/sys/module/{m}").exists() for m in ("kvm_intel", "kvm_amd"))


@pytest.fixture(scope="module")
def vm_root(tmp_path_factory):
    """An image root as `sandlot image build` leaves one, from busybox."""
    return busybox_root(tmp_path_factory.mktemp("vmroot"))


@pytest.fixture
def vm_env(vm_root):
    return {"SANDLOT_VM_DIR": str(VM_DIR), "SANDLOT_VM_ROOT": str(vm_root)}


def guest_release():
    return (VM_DIR / "kernel-release").read_text().strip()


# ---- sandlot run ---------------------------------------------------------------------

def test_run_in_a_vm_has_the_guests_kernel(sandlot, vm_env):
    r = sandlot.run(["--isolation", "vm", "--", "sh", "-c",
                     "uname -r; id -u; echo err >&2; exit 3"], extra_env=vm_env, timeout=BOOT)
    assert r.rc == 3, r
    lines = r.stdout.split()
    assert lines[0] == guest_release(), r
    assert lines[0] != os.uname().release
    assert lines[1] == "1000", r
    assert "err" in r.stderr, r


def test_run_in_a_vm_moves_files_and_times_out(sandlot, vm_env, tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"line\n" * 1000)
    r = sandlot.run(["--isolation", "vm", "-u", f"{src}:in.txt", "-d", f"out.txt:{tmp_path}/out.txt",
                     "--", "sh", "-c", "wc -l < in.txt > out.txt"], extra_env=vm_env,
                    timeout=BOOT)
    assert r.rc == 0, r
    assert (tmp_path / "out.txt").read_text().strip() == "1000"
    # The timeout kills the whole tree, a background child included.
    r = sandlot.run(["--isolation", "vm", "-t", "2s", "--", "sh", "-c", "sleep 300 & sleep 300"],
                    extra_env=vm_env, timeout=BOOT)
    assert r.rc == 124, r


def test_run_in_a_vm_sees_no_host_mounts(sandlot, vm_env):
    r = sandlot.run(["--isolation", "vm", "--", "cat", "/proc/mounts"], extra_env=vm_env,
                    timeout=BOOT)
    assert r.rc == 0, r
    assert str(sandlot.data_dir) not in r.stdout
    host = Path("/proc/self/mounts").read_text()
    # None of the host's own filesystems' mount points beyond the basics.
    for ln in host.splitlines():
        point = ln.split()[1]
        if point not in ("/", "/proc", "/sys", "/dev", "/tmp", "/dev/pts", "/dev/shm",
                         "/sys/fs/cgroup", "/run", "/dev/mqueue"):
            assert f" {point} " not in r.stdout, f"host mount {point} in the guest:\n{r.stdout}"
    # The image (the root disk) is the read-only /usr, as in an ns sandbox.
    assert re.search(r"^/dev/vd\S+ /usr erofs ro", r.stdout, re.M), r.stdout


def test_isolation_is_checked(sandlot, vm_env):
    r = sandlot.run(["--isolation", "xen", "--", "true"])
    assert r.rc == 2, r
    assert "invalid --isolation \"xen\": expected ns or vm" in r.stderr
    # A guest kernel needs some memory: a clear error, not a silent boot failure.
    r = sandlot.run(["--isolation", "vm", "--memory", "64M", "--", "true"], extra_env=vm_env)
    assert r.rc == 125, r
    assert "a vm sandbox needs at least 128M of memory" in r.stderr, r


def test_tmpfs_storage_is_the_guests_tmpfs(sandlot, vm_env):
    """--storage tmpfs: /home/user and /tmp on a tmpfs of the disk's size
    in the guest (test_limits' disk quota tests check the limit), not on
    the workspace disk."""
    r = sandlot.run(["--isolation", "vm", "--storage", "tmpfs", "--disk", "64M", "--", "sh", "-c",
                     "echo x > /home/user/f && cat /home/user/f && cat /proc/mounts"],
                    extra_env=vm_env, timeout=BOOT)
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "x", r
    home = [ln.split() for ln in lines if ln.split()[1:2] == ["/home/user"]]
    assert home and home[-1][2] == "tmpfs", r.stdout
    assert "size=65536k" in home[-1][3], home
    assert not [ln for ln in lines if ln.startswith("/dev/vd") and " ext4 " in ln], r.stdout


def test_a_broken_root_names_what_the_guest_said(sandlot, vm_env, tmp_path):
    garbage = tmp_path / "garbage.img"
    garbage.write_bytes(os.urandom(1 << 20))
    r = sandlot.run(["--isolation", "vm", "--", "true"],
                    extra_env={**vm_env, "SANDLOT_VM_ROOT": str(garbage)}, timeout=BOOT)
    assert r.rc == 125, r
    assert "the VM stopped" in r.stderr, r
    # The guest's own words, from its console.
    assert "sandlot-init: mount /dev/vda as erofs" in r.stderr, r


def test_host_image_without_a_vm_root_is_a_clear_error(sandlot, tmp_path):
    r = sandlot.run(["--isolation", "vm", "--", "true"],
                    extra_env={"SANDLOT_VM_DIR": str(VM_DIR)})
    assert r.rc == 125, r
    assert 'the image "host" cannot be a VM\'s root' in r.stderr, r
    assert '"minimal"' in r.stderr, r


def test_insisting_on_kvm(sandlot, vm_env):
    r = sandlot.run(["--isolation", "vm", "--", "true"],
                    extra_env={**vm_env, "SANDLOT_VM_ACCEL": "kvm"}, timeout=BOOT)
    if hardware_kvm():
        assert r.rc == 0, r
    else:
        # e.g. kvm_pvm: it makes VMs, but Debian's kernel cannot boot on it.
        assert r.rc == 125, r
        assert "SANDLOT_VM_ACCEL=kvm, but KVM cannot be used" in r.stderr, r


def test_killed_run_leaves_no_vm_behind(sandlot, vm_env):
    p = sandlot.popen(["--isolation", "vm", "--", "sleep", "600"], extra_env=vm_env)
    try:
        def qemu():
            return [pid for pid in hostscan.qemu_guests() if hostscan.is_descendant(pid, p.pid)]
        assert wait_until(qemu, BOOT), "no QEMU appeared"
        sid = hostscan.qemu_guests()[qemu()[0]]
        # Wait for the guest's command: then the run is past its set-up.
        assert wait_until(lambda: (sandlot.data_dir / "vm" / sid / "work.img").exists(), BOOT)
    finally:
        os.killpg(p.pid, 9)
        p.wait()
    # QEMU dies with the run (its parent-death signal).
    assert wait_until(lambda: sid not in hostscan.qemu_guests().values(), 10), \
        "QEMU outlived its sandlot run"
    assert (sandlot.data_dir / "vm" / sid).exists(), "nothing left: the test tests nothing"
    # The next vm sandbox's start removes what the killed one left.
    r = sandlot.run(["--isolation", "vm", "--", "true"], extra_env=vm_env, timeout=BOOT)
    assert r.rc == 0, r
    assert not (sandlot.data_dir / "vm" / sid).exists()
    assert not os.path.lexists(f"/run/sandlot/vm/{sid}")


def test_a_vm_disk_is_reserved_on_the_host(sandlot, vm_env):
    """A vm disk is a file on the data filesystem: it is admitted against
    the room there and its blocks are allocated up front, so a full host
    fails a create, never a running guest's writes."""
    sandlot.data_dir.mkdir(parents=True, exist_ok=True)
    sv = os.statvfs(sandlot.data_dir)
    too_big = (sv.f_bavail * sv.f_frsize * 2) // (1 << 30) + 1  # GiB, twice what is free
    r = sandlot.run(["--isolation", "vm", "--disk", f"{too_big}G", "--", "true"], extra_env=vm_env,
                    timeout=BOOT)
    assert r.rc == 125, r
    assert "cannot reserve" in r.stderr and "vm sandbox's disk" in r.stderr, r
    assert "--disk-overcommit" in r.stderr, r
    # Refused before anything was written: no empty disk of that size made.
    made = [f for f in (sandlot.data_dir / "vm").glob("empty-*.ext4")
            if f.stat().st_size >= too_big << 30]
    assert not made, made
    # A disk that fits is allocated, every block, while the guest runs.
    p = sandlot.popen(["--isolation", "vm", "--disk", "64M", "--", "sh", "-c", "echo up; sleep 600"],
                      extra_env=vm_env)
    try:
        assert p.stdout.readline() == b"up\n"
        (sid,) = [s for q, s in hostscan.qemu_guests().items() if hostscan.is_descendant(q, p.pid)]
        st = (sandlot.data_dir / "vm" / sid / "work.img").stat()
        assert st.st_size > 64 << 20
        assert st.st_blocks * 512 >= st.st_size, (st.st_blocks * 512, st.st_size)
    finally:
        p.terminate()  # the run ends its sandbox and cleans up
        p.communicate(timeout=BOOT)
    # Overcommit (an explicit operator ratio) admits more than the room
    # and leaves the disk sparse: here, too much even so.
    r = sandlot.run(["--isolation", "vm", "--disk", f"{too_big * 4}G", "--", "true"],
                    extra_env={**vm_env, "SANDLOT_DISK_OVERCOMMIT": "2"}, timeout=BOOT)
    assert r.rc == 125 and "overcommit ratio 2" in r.stderr, r


# ---- sandlotd ---------------------------------------------------------------------------

def vm_daemon(session_dirs, tmp_path_factory, vm_env, *extra):
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-vm", numbered=True)
    return Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name,
                  env=vm_env, extra_args=extra).start()


def qemu_of(sid):
    pids = [p for p, s in hostscan.qemu_guests().items() if s == sid]
    assert len(pids) == 1, f"QEMU processes of {sid}: {pids}"
    return pids[0]


def status_field(pid, key):
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        if ln.startswith(key + ":"):
            return ln.split(":", 1)[1].split()
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def fds_of(pid):
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_baseline(d):
    """The daemon's descriptors once what every sandbox shares is open (the
    library's I/O thread, the seccomp program): an ns sandbox made and
    removed first."""
    sid = d.create()
    assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    return fd_count(d.pid)


def test_daemon_vm_sandbox_lifecycle_and_jail(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        fds = fd_baseline(d)
        # Through the CLI: --isolation reaches the daemon.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
        p = subprocess.run([str(SANDLOT), "-H", f"unix:{d.sock}", "create", "--isolation", "vm",
                            "--memory", "256M", "--json"], env=env, capture_output=True,
                           timeout=BOOT)
        assert p.returncode == 0, p
        rec = json.loads(p.stdout)
        sid = rec["id"]
        assert rec["isolation"] == "vm"
        assert rec["options"]["isolation"] == "vm"
        assert rec["accel"] == ("kvm" if hardware_kvm() else "tcg")
        out = d.exec(sid, argv=["uname", "-r"])
        assert out["stdout"].strip() == guest_release(), out
        out = d.exec(sid, command="echo kept > /home/user/f; cat /home/user/f; id -u")
        assert out["stdout"].split() == ["kept", "1000"], out
        assert d.get(f"/v1/sandboxes/{sid}").json()["isolation"] == "vm"
        # Files in and out over the same protocol, binary-safe.
        blob = bytes(range(256)) * 4096
        r = d.put(f"/v1/sandboxes/{sid}/files?path=data.bin", blob)
        assert r.status == 201, r
        out = d.exec(sid, command="wc -c < data.bin")
        assert out["stdout"].strip() == str(len(blob)), out
        r = d.get(f"/v1/sandboxes/{sid}/files?path=data.bin")
        assert r.status == 200 and r.body == blob

        # The jail: QEMU runs as an unprivileged uid of its own, with no
        # capabilities, no_new_privs and a seccomp filter, in namespaces
        # of its own, with a root holding only what it needs.
        pid = qemu_of(sid)
        uids = status_field(pid, "Uid")
        assert len(set(uids)) == 1 and int(uids[0]) >= 0x10000000, uids
        assert status_field(pid, "CapEff") == ["0000000000000000"]
        assert status_field(pid, "NoNewPrivs") == ["1"]
        assert status_field(pid, "Seccomp") == ["2"]
        # (Its network namespace is the sandbox's: test_vm_net.py.)
        assert sorted(os.listdir(f"/proc/{pid}/root/etc")) == ["resolv.conf"]
        for ns in ("mnt", "pid", "net", "ipc", "uts"):
            assert os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
        root = sorted(os.listdir(f"/proc/{pid}/root"))
        assert root == ["bin", "console.log", "dev", "etc", "initramfs.cpio", "lib", "lib64",
                        "root.img", "usr", "vmlinux", "work.img"], root
        assert sorted(os.listdir(f"/proc/{pid}/root/dev")) == \
            (["kvm", "null", "urandom"] if rec["accel"] == "kvm" else ["null", "urandom"])
        assert os.stat(f"/proc/{pid}/root/dev/null").st_mode & 0o777 == 0o666
        # None of QEMU's complaints (a missing file, a refused device) on the
        # console, where its stderr goes: only the guest kernel's messages
        # (timestamped: it may warn under load) may be there.
        console = (d.data_dir / "vm" / sid / "console.log").read_text(errors="replace")
        assert all(ln.startswith("[") for ln in console.splitlines() if ln.strip()), console
        # In a cgroup named after the sandbox whose memory limit covers the
        # guest's 256M and QEMU's own.
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        mem = [ln.split(":", 2)[2] for ln in lines if ":memory:" in ln]
        if mem:
            limit_file = Path("/sys/fs/cgroup/memory") / mem[0].lstrip("/") / "memory.limit_in_bytes"
        else:
            v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")][0]
            mem = [v2]
            limit_file = Path("/sys/fs/cgroup") / v2.lstrip("/") / "memory.max"
        assert mem[0] == f"/sandlot/{sid}", lines
        limit = int(limit_file.read_text())
        assert (256 << 20) + (64 << 20) <= limit <= (256 << 20) + (512 << 20), limit

        r = d.delete(f"/v1/sandboxes/{sid}")
        assert r.status in (200, 204), r
        assert not [p for p, s in hostscan.qemu_guests().items() if s == sid]
        assert not list((d.data_dir / "vm").glob("sb-*"))
        # No descriptor of it stays open in the daemon (pidfd, lock, socket).
        assert wait_until(lambda: fd_count(d.pid) <= fds, 5), (fds, sorted(fds_of(d.pid).items(), key=lambda kv: int(kv[0])))
    finally:
        assert d.stop() == 0, d.logs()


def test_daemon_failed_boot_leaves_nothing(session_dirs, tmp_path_factory, vm_env, tmp_path):
    garbage = tmp_path / "garbage.img"
    garbage.write_bytes(os.urandom(1 << 20))
    d = vm_daemon(session_dirs, tmp_path_factory, {**vm_env, "SANDLOT_VM_ROOT": str(garbage)})
    try:
        fds = fd_baseline(d)
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm"}, timeout=BOOT)
        assert r.status >= 500, r
        assert "sandlot-init: mount /dev/vda as erofs" in r.json()["error"]["message"], r
        assert not list((d.data_dir / "vm").glob("sb-*"))
        assert wait_until(lambda: fd_count(d.pid) <= fds, 5), (fds, sorted(fds_of(d.pid).items(), key=lambda kv: int(kv[0])))
    finally:
        assert d.stop() == 0, d.logs()


def test_daemon_isolation_field(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        for bad, msg in (("xen", 'field "isolation" must be "ns" or "vm", not "xen"'),
                         (1, 'field "isolation" must be a string')):
            r = d.post("/v1/sandboxes", json_body={"isolation": bad})
            assert r.status == 400, r
            assert msg in r.json()["error"]["message"], r
        # (A network and ports work for vm sandboxes: test_vm_net.py.)
        # (from_snapshot of a vm sandbox: test_vm_pause.py.)
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "from_snapshot": "sb-" + "a" * 26})
        assert r.status == 404, r
        # ns is the default, and says so.
        r = d.post("/v1/sandboxes", json_body={})
        assert r.status == 201, r
        assert r.json()["isolation"] == "ns" and r.json()["accel"] is None, r.json()
        assert d.delete(f"/v1/sandboxes/{r.json()['id']}").status in (200, 204)
    finally:
        assert d.stop() == 0, d.logs()


def test_killed_daemon_leaves_no_vm_behind(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env, "--default-isolation", "vm")
    r = d.post("/v1/sandboxes", json_body={}, timeout=BOOT)
    assert r.status == 201, r
    sid = r.json()["id"]
    assert r.json()["isolation"] == "vm"
    qemu_of(sid)
    d.kill9()
    # QEMU dies with the daemon (its parent-death signal), at once.
    assert wait_until(lambda: sid not in hostscan.qemu_guests().values(), 10), \
        "QEMU outlived its daemon"
    assert list((d.data_dir / "vm").glob("sb-*")), "nothing to clean up: the test tests nothing"
    # The next start of the daemon removes its files, link and cgroup.
    d.start()
    try:
        # (Its own: the restarted daemon may be making a vm template meanwhile.)
        assert wait_until(lambda: not (d.data_dir / "vm" / sid).exists(), 10)
        assert not os.path.lexists(f"/run/sandlot/vm/{sid}")
        assert not [cg for cg in hostscan.sandbox_cgroups() if cg.endswith("/" + sid)]
    finally:
        assert d.stop() == 0, d.logs()
