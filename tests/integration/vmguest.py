"""The vm backend's guest for the tests and benchmarks (docs/vm.md): where
its files are and what a machine lacks to boot it (missing()), the roots
vm sandboxes are tested on (busybox_root(): a small erofs from busybox;
recipe_root(): an image recipe built, vm-root.recipe for the cross-backend
tests), and a test-only host: QEMU
with the vm backend's arguments and a minimal client of spec/protocol.md
over the guest's control port.  Used by conftest.py (the vm runs of tests
marked `backends`), test_vm.py, test_vm_guest.py, test_images.py and
bench/vm.py."""
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

# Importable without pytest (bench/vm.py): conftest is imported only by
# the functions that need it.
REPO = Path(__file__).resolve().parents[2]
# The guest of the build as shipped: build/vm, beside SANDLOT_PLAIN_BIN_DIR
# when it is set (conftest.py), or SANDLOT_VM_DIR.
VM_DIR = Path(os.environ.get("SANDLOT_VM_DIR") or
              Path(os.environ.get("SANDLOT_PLAIN_BIN_DIR") or REPO / "build" / "bin").parent / "vm")
QEMU = shutil.which("qemu-system-x86_64")
# Boot to HELLO takes 2-5 s under TCG on a quiet 2-CPU machine; the bound
# only keeps a hung guest from blocking the suite.
BOOT_TIMEOUT = 120

HELLO, ERROR, OK, CONFIG, EXEC, STARTED, STDOUT, STDERR, EXIT = (0x01, 0x02, 0x03, 0x06, 0x10, 0x11,
                                                                0x12, 0x13, 0x14)
T_VERSION, T_ERRNO, T_MESSAGE, T_ARG, T_ENV, T_EXIT_CODE, T_SIGNAL = 1, 2, 3, 4, 5, 9, 10
T_FLAGS, T_OOM_KILLS, T_PIDS_REFUSED, T_NOFILE, T_PIDS, T_HOSTNAME, T_SECCOMP = 13, 26, 27, 30, 33, 34, 38
F_IMAGE = 1 << 1
NOFILE = 777
PIDS = 48


def missing():
    for f in ("vmlinux", "initramfs.cpio", "kernel-release"):
        if not (VM_DIR / f).exists():
            return f"{VM_DIR / f} was not built (make vm: it needs apt-get to download linux-image-cloud-amd64's kernel package)"
    for tool in ("qemu-system-x86_64", "mkfs.erofs", "mkfs.ext4", "busybox"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make test-deps)"
    if os.geteuid() != 0:
        return "mkfs.erofs of a root-owned tree needs root"
    return None


# --- roots ----------------------------------------------------------------------

# The busybox applets a busybox root has as commands.
APPLETS = ("sh", "cat", "id", "uname", "touch", "echo", "ls", "sleep", "dd", "grep", "wc",
           "true", "false", "head", "kill", "mkdir", "rm", "env", "pwd", "sync")


def busybox_root(tmp, applets=()):
    """A small image root as `sandlot image build` leaves one (the /etc
    files sandlot binds over exist, /var/tmp links to /tmp), from the
    host's static busybox, with APPLETS and `applets` as commands, written
    as an erofs file in directory `tmp`; returns its path.  A second call
    on the same `tmp` returns the same file."""
    tmp = Path(tmp)
    image = tmp / "root.erofs"
    if image.exists():
        return image
    tree = tmp / "rootfs"
    (tree / "usr/bin").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "var").mkdir()
    shutil.copy(shutil.which("busybox"), tree / "usr/bin/busybox")
    for applet in sorted(set(APPLETS) | set(applets)):
        (tree / "usr/bin" / applet).symlink_to("busybox")
    (tree / "bin").symlink_to("usr/bin")
    (tree / "var/tmp").symlink_to("../tmp")
    (tree / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tree / "etc/group").write_text("root:x:0:\n")
    for name in ("hosts", "hostname", "resolv.conf", "nsswitch.conf"):
        (tree / "etc" / name).write_text("")
    tmp_image = tmp / "root.erofs.tmp"
    subprocess.run(["mkfs.erofs", "-zlz4hc", str(tmp_image), str(tree)], check=True,
                   stdout=subprocess.DEVNULL)
    tmp_image.rename(image)
    shutil.rmtree(tree)
    return image


def recipe_root(data_dir, recipe, sandlot=None):
    """The image of `recipe` built with `sandlot image build` in data
    directory `data_dir` (once: a second call finds it); the path of its
    rootfs.erofs.  The package cache is the machine's
    (/var/cache/sandlot), so a build with a warm cache takes 20 to 40 s."""
    from conftest import SANDLOT
    data_dir = Path(data_dir)
    name = Path(recipe).stem
    names = data_dir / "images" / "names" / name
    if not names.exists():
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
        env["SANDLOT_DATA_DIR"] = str(data_dir)
        p = subprocess.run([str(sandlot or SANDLOT), "image", "build", "-q", str(recipe)],
                           env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"building {recipe} for vm sandboxes failed:\n{p.stderr[-4000:]}"
    image = (names / "rootfs.erofs").resolve()
    assert image.exists(), f"no {image} after building {recipe}"
    return image


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
                   + record(T_NOFILE, struct.pack("<Q", NOFILE)) + record(T_PIDS, struct.pack("<I", PIDS))
                   + record(T_HOSTNAME, b"vmguest"))
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
                # What the guest counted while the command ran (absent: not counted).
                self.events = {name: struct.unpack("<Q", r[tag])[0]
                               for name, tag in (("oom_kills", T_OOM_KILLS), ("pids_refused", T_PIDS_REFUSED))
                               if tag in r}
                if T_EXIT_CODE in r:
                    return struct.unpack("<i", r[T_EXIT_CODE])[0], out.decode(), err.decode()
                return -struct.unpack("<I", r[T_SIGNAL])[0], out.decode(), err.decode()


# --- the guest --------------------------------------------------------------

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




def seccomp_program(data_dir):
    """The seccomp program exactly as libsandlot sends it in CONFIG: the one
    `sandlot run` compiled from spec/seccomp-policy.txt and cached in its
    data directory `data_dir`."""
    from conftest import Sandlot
    sl = Sandlot(data_dir)
    r = sl.run(["--", "true"])
    assert r.rc == 0, r
    programs = sorted((sl.data_dir / "cache").glob("seccomp-*.bpf"))
    assert programs, f"no seccomp program cached in {sl.data_dir / 'cache'}"
    return programs[-1].read_bytes()


def boot(d, root, work, seccomp):
    """A guest on the erofs `root` and ext4 `work` files, connected and
    configured (CONFIG answered OK); its connection in .conn.  The caller
    stops it (Guest.stop)."""
    g = Guest(d, qemu_argv(d, root, work))
    try:
        conn = g.connect()
        try:
            answer = conn.configure(seccomp)
        except (EOFError, OSError) as e:
            raise AssertionError(f"no HELLO or no answer to CONFIG ({e}); console:\n{g.console()}") from e
        assert answer is None, (answer, g.console())
    except BaseException:
        g.stop()
        raise
    g.hello_version = conn.hello_version
    g.conn = conn
    return g
