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
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PLAIN_BIN_DIR, Sandlot

VM_DIR = Path(os.environ.get("SANDLOT_VM_DIR") or PLAIN_BIN_DIR.parent / "vm")
QEMU = shutil.which("qemu-system-x86_64")
# Boot to HELLO takes 2-5 s under TCG on a quiet 2-CPU machine; the bound
# only keeps a hung guest from blocking the suite.
BOOT_TIMEOUT = 120

HELLO, ERROR, OK, CONFIG, EXEC, STARTED, STDOUT, STDERR, EXIT = (0x01, 0x02, 0x03, 0x06, 0x10, 0x11,
                                                                0x12, 0x13, 0x14)
T_VERSION, T_ERRNO, T_MESSAGE, T_ARG, T_ENV, T_EXIT_CODE, T_SIGNAL = 1, 2, 3, 4, 5, 9, 10
T_FLAGS, T_NOFILE, T_HOSTNAME, T_SECCOMP = 13, 30, 34, 38
F_IMAGE = 1 << 1
NOFILE = 777


def _missing():
    for f in ("vmlinux", "initramfs.cpio", "kernel-release"):
        if not (VM_DIR / f).exists():
            return f"{VM_DIR / f} was not built (needs linux-image-cloud-amd64: make deps)"
    for tool in ("qemu-system-x86_64", "mkfs.erofs", "mkfs.ext4", "busybox"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make test-deps)"
    if os.geteuid() != 0:
        return "mkfs.erofs of a root-owned tree needs root"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


# --- a minimal client of spec/protocol.md -----------------------------------

def record(tag, value):
    return struct.pack("<HI", tag, len(value)) + value


def records(payload):
    out = []
    i = 0
    while i < len(payload):
        tag, n = struct.unpack_from("<HI", payload, i)
        out.append((tag, payload[i + 6:i + 6 + n]))
        i += 6 + n
    return out


class Conn:
    def __init__(self, path, timeout=BOOT_TIMEOUT):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""
        self.next_id = 1

    def close(self):
        self.sock.close()

    def send(self, ftype, stream, payload=b"", flags=0):
        self.sock.sendall(struct.pack("<IBBHI", len(payload), ftype, flags, 0, stream) + payload)

    def frame(self):
        while True:
            if len(self.buf) >= 12:
                n, ftype, flags, _, stream = struct.unpack_from("<IBBHI", self.buf)
                if len(self.buf) >= 12 + n:
                    payload = self.buf[12:12 + n]
                    self.buf = self.buf[12 + n:]
                    return ftype, flags, stream, payload
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the guest closed the connection")
            self.buf += data

    def hello(self):
        ftype, _, stream, payload = self.frame()
        assert (ftype, stream) == (HELLO, 0), (ftype, stream, payload)
        return struct.unpack("<I", dict(records(payload))[T_VERSION])[0]

    def configure(self, seccomp, flags=F_IMAGE):
        """CONFIG as a vm host sends it (spec/protocol.md, Configuration);
        the answer: None for OK, else (errno, message)."""
        payload = (record(T_FLAGS, struct.pack("<I", flags)) + record(T_SECCOMP, seccomp)
                   + record(T_NOFILE, struct.pack("<Q", NOFILE)) + record(T_HOSTNAME, b"vmguest"))
        self.send(CONFIG, 0, payload)
        self.hello_version = self.hello()
        ftype, _, stream, payload = self.frame()
        assert stream == 0 and ftype in (OK, ERROR), (ftype, stream, payload)
        if ftype == OK:
            return None
        r = dict(records(payload))
        return struct.unpack("<I", r[T_ERRNO])[0], r[T_MESSAGE].decode()

    def run(self, *argv):
        """Run argv; (exit code or -signal, stdout, stderr)."""
        sid = self.next_id
        self.next_id += 1
        payload = b"".join(record(T_ARG, a.encode()) for a in argv)
        payload += record(T_ENV, b"PATH=/usr/bin:/bin")
        self.send(EXEC, sid, payload)
        out, err = b"", b""
        while True:
            ftype, _, stream, payload = self.frame()
            assert stream == sid, (ftype, stream, payload)
            if ftype == STDOUT:
                out += payload
            elif ftype == STDERR:
                err += payload
            elif ftype == ERROR:
                r = dict(records(payload))
                raise OSError(struct.unpack("<I", r[T_ERRNO])[0], r[T_MESSAGE].decode())
            elif ftype == EXIT:
                r = dict(records(payload))
                if T_EXIT_CODE in r:
                    return struct.unpack("<i", r[T_EXIT_CODE])[0], out.decode(), err.decode()
                return -struct.unpack("<I", r[T_SIGNAL])[0], out.decode(), err.decode()


# --- the guest --------------------------------------------------------------

def make_root(tmp):
    """A small image root as `sandlot image build` leaves one (the /etc
    files sandlot binds over exist, /var/tmp links to /tmp), from busybox,
    as an erofs file."""
    tree = tmp / "rootfs"
    (tree / "usr/bin").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "var").mkdir()
    shutil.copy(shutil.which("busybox"), tree / "usr/bin/busybox")
    for applet in ("sh", "cat", "id", "uname", "touch", "echo", "ls", "sleep"):
        (tree / "usr/bin" / applet).symlink_to("busybox")
    (tree / "bin").symlink_to("usr/bin")
    (tree / "var/tmp").symlink_to("../tmp")
    (tree / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tree / "etc/group").write_text("root:x:0:\n")
    for name in ("hosts", "hostname", "resolv.conf", "nsswitch.conf"):
        (tree / "etc" / name).write_text("")
    image = tmp / "root.erofs"
    subprocess.run(["mkfs.erofs", "-zlz4hc", str(image), str(tree)], check=True,
                   stdout=subprocess.DEVNULL)
    return image


def make_work(tmp):
    work = tmp / "work.img"
    with open(work, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(work)], check=True)
    return work


def qemu_argv(d, root, work, append_extra="", cmdline=None):
    """The vm backend's QEMU arguments (docs/vm.md)."""
    cmdline = cmdline or ("console=hvc0 quiet panic=-1 reboot=t tsc_early_khz=2600000 sandlot.vm=1"
                          + append_extra)
    argv = [QEMU, "-M", "microvm,x-option-roms=off,isa-serial=off", "-accel", "tcg,tb-size=128",
            "-cpu", "max", "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config",
            "-nographic", "-no-reboot",
            "-kernel", str(VM_DIR / "vmlinux"), "-initrd", str(VM_DIR / "initramfs.cpio"),
            "-append", cmdline,
            "-device", "virtio-serial-device",
            "-chardev", f"file,id=con,path={d / 'console.log'}", "-device", "virtconsole,chardev=con",
            "-chardev", f"socket,id=ctl,path={d / 'ctl.sock'},server=on,wait=off",
            "-device", "virtserialport,chardev=ctl,name=org.sandlot.ctl"]
    if root:
        argv += ["-drive", f"id=root,file={root},format=raw,if=none,readonly=on,file.locking=off",
                 "-device", "virtio-blk-device,drive=root,serial=root"]
    if work:
        argv += ["-drive", f"id=work,file={work},format=raw,if=none,cache=unsafe",
                 "-device", "virtio-blk-device,drive=work,serial=work"]
    argv += ["-device", "virtio-rng-device"]
    return argv


class Guest:
    def __init__(self, d, argv):
        self.dir = d
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)

    def console(self):
        try:
            return (self.dir / "console.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def connect(self):
        """Connect to the control port.  QEMU makes the socket while it
        starts; until then connect() fails (ENOENT, ECONNREFUSED), which is
        retried for as long as QEMU runs."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            try:
                return Conn(self.dir / "ctl.sock")
            except (FileNotFoundError, ConnectionRefusedError):
                if self.proc.poll() is not None:
                    raise AssertionError(f"QEMU exited ({self.proc.returncode}): "
                                         f"{self.proc.stdout.read()!r}\nconsole:\n{self.console()}")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def wait_exit(self, timeout=BOOT_TIMEOUT):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture(scope="session")
def seccomp_program(session_dirs):
    """The seccomp program exactly as libsandlot sends it in CONFIG: the one
    `sandlot run` compiled from spec/seccomp-policy.txt and cached in its
    data directory."""
    sl = Sandlot(session_dirs["data_dir"])
    r = sl.run(["--", "true"])
    assert r.rc == 0, r
    programs = sorted((sl.data_dir / "cache").glob("seccomp-*.bpf"))
    assert programs, f"no seccomp program cached in {sl.data_dir / 'cache'}"
    return programs[-1].read_bytes()


@pytest.fixture(scope="module")
def vm(tmp_path_factory, seccomp_program):
    d = tmp_path_factory.mktemp("vmguest")
    g = Guest(d, qemu_argv(d, make_root(d), make_work(d)))
    try:
        conn = g.connect()
        try:
            answer = conn.configure(seccomp_program)
        except (EOFError, OSError) as e:
            raise AssertionError(f"no HELLO or no answer to CONFIG ({e}); console:\n{g.console()}") from e
        assert answer is None, (answer, g.console())
        g.hello_version = conn.hello_version
        g.conn = conn
        yield g
        conn.close()
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


def test_the_guest_waits_for_a_host_that_went_away(vm):
    """A disconnected host is not the end: the guest keeps its processes
    and files and serves the next connection."""
    assert vm.conn.run("sh", "-c", "echo kept > /tmp/kept")[0] == 0
    vm.conn.close()
    vm.conn = Conn(vm.dir / "ctl.sock")
    assert vm.conn.run("cat", "/tmp/kept") == (0, "kept\n", "")
    assert vm.proc.poll() is None


def test_a_guest_without_sandlot_vm_refuses_to_start(tmp_path):
    g = Guest(tmp_path, qemu_argv(tmp_path, None, None,
                                  cmdline="console=hvc0 quiet panic=-1 reboot=t tsc_early_khz=2600000"))
    try:
        g.wait_exit()
    finally:
        g.stop()
    assert "sandlot.vm=1" in g.console(), g.console()


def test_a_missing_disk_is_named_on_the_console(tmp_path):
    g = Guest(tmp_path, qemu_argv(tmp_path, make_root(tmp_path), None))
    try:
        g.wait_exit()
    finally:
        g.stop()
    assert 'no disk with serial "work" (the workspace)' in g.console(), g.console()


def test_config_without_the_image_flag_is_refused(tmp_path, seccomp_program):
    """A vm sandbox's root is always its image: CONFIG must say so."""
    g = Guest(tmp_path, qemu_argv(tmp_path, make_root(tmp_path), make_work(tmp_path)))
    try:
        conn = g.connect()
        answer = conn.configure(seccomp_program, flags=0)
        conn.close()
        g.wait_exit()
    finally:
        g.stop()
    assert answer is not None, g.console()
    assert answer[0] == 22 and "IMAGE" in answer[1], answer
