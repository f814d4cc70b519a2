"""The vm backend's guest (docs/vm.md): Debian's cloud kernel and sandlot-init
as PID 1 of a QEMU microvm under TCG, spoken to over its virtio-serial port.

These tests boot build/vm/{vmlinux,initramfs.cpio} (scripts/vm-build.sh) with
the QEMU arguments the vm backend uses, on a small read-only erofs root made
here from busybox and an empty ext4 workspace, and drive sandlot-init with a
minimal client of spec/protocol.md: no sandlotd, no libsandlot.  What they
show: the guest boots to HELLO, runs commands as uid 1000 in the image's
root with the workspace as /home/user and /tmp, runs its own kernel, sees
none of the host's mounts, survives the host disconnecting, and names what
is wrong when it cannot start.
"""
import os
from pathlib import Path

import pytest

from vmguest import (NOFILE, PIDS, VM_DIR, Conn, Guest, boot, busybox_root, make_work, missing, qemu_argv,
                     seccomp_program)

pytestmark = [pytest.mark.vm, pytest.mark.skipif(missing() is not None, reason=missing() or "")]


@pytest.fixture(scope="session")
def seccomp(session_dirs):
    return seccomp_program(session_dirs["data_dir"])


@pytest.fixture(scope="module")
def vm(tmp_path_factory, seccomp):
    d = tmp_path_factory.mktemp("vmguest")
    g = boot(d, busybox_root(d), make_work(d), seccomp)
    try:
        yield g
        g.conn.close()
    finally:
        g.stop()
    assert g.proc.returncode is not None


def test_hello_and_a_command(vm):
    assert vm.hello_version == 1
    assert vm.conn.run("echo", "hello from the guest") == (0, "hello from the guest\n", "")


def test_the_guest_runs_its_own_kernel(vm):
    code, out, _ = vm.conn.run("uname", "-r")
    assert code == 0
    assert out.strip() == (VM_DIR / "kernel-release").read_text().strip()
    assert out.strip() != os.uname().release


def test_commands_run_as_the_sandbox_user(vm):
    assert vm.conn.run("id", "-u")[1] == "1000\n"
    assert vm.conn.run("id", "-g")[1] == "1000\n"
    # No capabilities and no_new_privs, as in an ns sandbox.
    code, out, _ = vm.conn.run("cat", "/proc/self/status")
    status = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    assert int(status["CapEff"].strip(), 16) == 0
    assert int(status["CapBnd"].strip(), 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    # The seccomp program of CONFIG is loaded (mode 2: filter), and CONFIG's
    # limits and names apply.
    assert status["Seccomp"].strip() == "2"
    assert vm.conn.run("sh", "-c", "ulimit -n")[1] == f"{NOFILE}\n"
    assert vm.conn.run("uname", "-n")[1] == "vmguest\n"


def test_root_from_the_image_and_workspace_from_its_disk(vm):
    _, mounts, _ = vm.conn.run("cat", "/proc/self/mounts")
    table = {}
    for line in mounts.splitlines():
        src, target, fstype = line.split()[:3]
        table[target] = (src, fstype)
    assert table["/usr"][1] == "erofs"
    assert table["/home/user"][1] == "ext4" and table["/tmp"][1] == "ext4"
    assert table["/"][1] == "tmpfs"
    # Nothing of the host's: every mount is of a filesystem the guest made
    # itself, on its own disks, and none of the host's mount points is there.
    kinds = {fstype for _, fstype in table.values()}
    assert kinds <= {"tmpfs", "erofs", "ext4", "proc", "devpts", "devtmpfs"}, table
    assert {src for src, fstype in table.values() if fstype in ("erofs", "ext4")} <= {"/dev/vda", "/dev/vdb"}
    host_only = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                 if line.split()[1].startswith(("/work", "/sys/fs/cgroup", "/var/lib", "/boot"))}
    assert not host_only & set(table), table


def test_workspace_is_writable_and_the_image_is_not(vm):
    assert vm.conn.run("sh", "-c", "echo data > /home/user/f && cat /home/user/f")[:2] == (0, "data\n")
    assert vm.conn.run("sh", "-c", "echo t > /tmp/t && cat /tmp/t")[:2] == (0, "t\n")
    code, _, err = vm.conn.run("touch", "/usr/bin/x")
    assert code != 0 and "Read-only file system" in err


def test_exit_counts_oom_kills(vm):
    """A command that takes more memory than the guest has is killed by the
    OOM killer (of the guest's cgroup for commands, whose memory.max is the
    guest's memory less a reserve), EXIT counts it, and init lives on."""
    # A buffer the kernel grants (less than the guest's memory) but more
    # than the commands' cgroup may fill.
    code, _, err = vm.conn.run("dd", "if=/dev/zero", "of=/dev/null", "bs=210M", "count=1")
    assert code == -9, (code, err)
    assert vm.conn.events["oom_kills"] == 1
    assert vm.conn.run("echo", "alive") == (0, "alive\n", "")


def test_the_guest_waits_for_a_host_that_went_away(vm):
    """A disconnected host is not the end: the guest keeps its processes
    and files and serves the next connection."""
    assert vm.conn.run("sh", "-c", "echo kept > /tmp/kept")[0] == 0
    code, out, _ = vm.conn.run("sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!")
    pid = int(out)
    vm.conn.close()
    vm.conn = Conn(vm.dir / "ctl.sock")
    assert vm.conn.run("cat", "/tmp/kept") == (0, "kept\n", "")
    assert vm.conn.run("cat", f"/proc/{pid}/cmdline")[1] == "sleep\x001000\x00"
    assert vm.proc.poll() is None


def test_exit_counts_refused_forks_against_the_pids_limit(vm):
    """CONFIG's PIDS limits the guest's processes (its cgroup's pids.max),
    and EXIT says how many forks it refused, as for an ns sandbox.  (The
    last test on this guest: the shell gives up at the first refused fork,
    and the sleeps it started live on for a while.)"""
    assert vm.conn.run("echo", "x")[0] == 0
    assert vm.conn.events == {"oom_kills": 0, "pids_refused": 0}
    code, _, err = vm.conn.run("sh", "-c", f"i=0; while [ $i -lt {PIDS + 10} ]; do sleep 2 & i=$((i+1)); done; wait")
    assert vm.conn.events["pids_refused"] > 0, (code, err)
    assert "fork" in err.lower()


def test_a_guest_without_sandlot_vm_refuses_to_start(tmp_path):
    g = Guest(tmp_path, qemu_argv(tmp_path, None, None,
                                  cmdline="console=hvc0 quiet panic=-1 reboot=t tsc_early_khz=2600000"))
    try:
        g.wait_exit()
    finally:
        g.stop()
    assert "sandlot.vm=1" in g.console(), g.console()


def test_a_missing_disk_is_named_on_the_console(tmp_path):
    g = Guest(tmp_path, qemu_argv(tmp_path, busybox_root(tmp_path), None))
    try:
        g.wait_exit()
    finally:
        g.stop()
    assert 'no disk with serial "work" (the workspace)' in g.console(), g.console()


def test_config_without_the_image_flag_is_refused(tmp_path, seccomp):
    """A vm sandbox's root is always its image: CONFIG must say so."""
    g = Guest(tmp_path, qemu_argv(tmp_path, busybox_root(tmp_path), make_work(tmp_path)))
    try:
        conn = g.connect()
        answer = conn.configure(seccomp, flags=0)
        conn.close()
        g.wait_exit()
    finally:
        g.stop()
    assert answer is not None, g.console()
    assert answer[0] == 22 and "IMAGE" in answer[1], answer
