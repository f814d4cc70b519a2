"""The isolation posture, checked from inside the sandbox and from the host."""
import ctypes
import json
import os
import shlex
import subprocess
import time
import uuid

import pytest

from conftest import stop, read_line_with_deadline, wait_until
import hostscan

SANDLOT_UID_BASE = 0x10000000


def run_py_json(sandlot, code, *opts):
    """Run python3 CODE inside; CODE prints one JSON document."""
    r = sandlot.py(code, *opts)
    assert r.rc == 0, r
    return json.loads(r.stdout)


# ---- credentials ---------------------------------------------------------------

def test_no_capabilities_no_new_privs_seccomp(sandlot):
    r = sandlot.run(["--", "cat", "/proc/self/status"])
    assert r.rc == 0, r
    st = dict(ln.split(":", 1) for ln in r.stdout.splitlines() if ":" in ln)
    st = {k: v.strip() for k, v in st.items()}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert st[cap] == "0000000000000000", (cap, st[cap])
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"


def status_of(text):
    return {k: v.strip() for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)}


SYS_RT_SIGACTION = {"x86_64": 13, "aarch64": 134}


def ignore_with_the_kernels_sigaction(sigs):
    """For preexec_fn: ignore `sigs` through the rt_sigaction system call,
    since libc's sigaction refuses the signals it keeps for itself (glibc 32
    and 33, musl 32 to 34), which a parent may have left ignored all the
    same."""
    nr = SYS_RT_SIGACTION[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    act = (ctypes.c_ulong * 4)(1, 0, 0, 0)  # SIG_IGN, no flags, no restorer, empty mask

    def ignore():
        for sig in sigs:
            if libc.syscall(nr, sig, ctypes.byref(act), None, 8) != 0:
                raise OSError(ctypes.get_errno(), f"rt_sigaction({sig})")
    return ignore


def test_command_starts_with_default_signals_whatever_the_host_ignored(sandlot):
    """A command starts with no signal ignored or blocked, even when the
    process that ran `sandlot run` ignored some (an ignored signal survives
    execve: sh's `trap ''`, nohup, or a parent ignoring the real-time
    signals libc keeps for itself): sandlot-init drops what it inherited
    when it starts and keeps only SIGPIPE and SIGXFSZ ignored for itself, which each
    command's process undoes."""
    cmd = " ".join(shlex.quote(a) for a in sandlot.argv(["--", "cat", "/proc/self/status"]))
    r = subprocess.run(["sh", "-c", f"trap '' HUP INT USR1 USR2 PIPE TERM ALRM XFSZ; exec {cmd}"],
                       env=sandlot.env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL,
                       preexec_fn=ignore_with_the_kernels_sigaction([32, 33, 34, 40, 64]))
    assert r.returncode == 0, r
    st = status_of(r.stdout)
    assert st["SigIgn"] == "0000000000000000", st
    assert st["SigBlk"] == "0000000000000000", st
    assert st["CapBnd"] == "0000000000000000", st


def test_uid_inside_is_1000(sandlot):
    r = sandlot.sh("id -u; id -g; id -un; id -G")
    assert r.rc == 0, r
    assert r.stdout.split("\n")[:4] == ["1000", "1000", "user", "1000"], r


def test_host_uid_is_unprivileged(sandlot):
    """Seen from the host, the sandbox's processes (init included) run under
    a uid of the sandbox's own range, never root."""
    tag = f"5.{uuid.uuid4().int % 10**9}"
    p = sandlot.popen(["--", "sh", "-c", f"echo ready; exec sleep {tag}"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"ready\n"
        found = wait_until(lambda: hostscan.find_pids(["sleep", tag]), 5)
        assert len(found) == 1, found
        sleep_pid = found[0]
        uids = hostscan.uids(sleep_pid)
        gids = tuple(int(x) for x in hostscan.status(sleep_pid)["Gid"].split())
        assert all(u >= SANDLOT_UID_BASE for u in uids), uids
        assert all(g >= SANDLOT_UID_BASE for g in gids), gids
        init = hostscan.ppid(sleep_pid)
        assert hostscan.is_sandlot_init(init), hostscan.cmdline(init)
        init_uids = hostscan.uids(init)
        assert all(u >= SANDLOT_UID_BASE for u in init_uids), init_uids
        # sandbox uid 0 -> base, uid 1000 -> base + 1000
        assert uids[0] == init_uids[0] + 1000
        # The host uid range is not shared with the host's users.
        with open("/etc/passwd") as f:
            host_uids = {int(ln.split(":")[2]) for ln in f if ln.count(":") >= 6}
        assert uids[0] not in host_uids
    finally:
        stop(p)


def test_setuid_binaries_do_not_elevate(sandlot):
    r = sandlot.sh("su -c id root </dev/null; echo su=$?; id -u")
    assert r.stdout.split()[-1] == "1000", r
    assert "su=0" not in r.stdout, r


# ---- namespaces ------------------------------------------------------------------

NS = ("user", "pid", "mnt", "net", "ipc", "uts", "cgroup")


def test_own_namespaces(sandlot):
    script = "for n in " + " ".join(NS) + "; do echo $n $(readlink /proc/self/ns/$n); done"
    r = sandlot.sh(script)
    assert r.rc == 0, r
    inside = dict(ln.split(" ", 1) for ln in r.stdout.splitlines())
    for n in NS:
        assert inside[n].startswith(f"{n}:["), inside
        assert inside[n] != os.readlink(f"/proc/self/ns/{n}"), \
            f"{n} namespace shared with the test runner"
        try:
            host1 = os.readlink(f"/proc/1/ns/{n}")
        except PermissionError:
            continue  # PID 1 of some hosts (VM agents) hides its namespaces
        assert inside[n] != host1, f"{n} namespace shared with the host's PID 1"


def test_pid_namespace_view(sandlot):
    r = sandlot.sh("echo $$; ls /proc | grep -c '^[0-9]'; cat /proc/1/comm")
    assert r.rc == 0, r
    lines = r.stdout.split()
    assert int(lines[1]) <= 5, f"sees {lines[1]} processes: host pids are visible"
    assert lines[2] == "sandlot-init"


def test_cannot_signal_or_inspect_init(sandlot):
    r = sandlot.sh("kill -9 1; echo kill=$?; cat /proc/1/environ >/dev/null 2>&1; echo environ=$?; "
                   "cat /proc/1/maps >/dev/null 2>&1; echo maps=$?; ls /proc/1/fd >/dev/null 2>&1; echo fd=$?")
    assert r.rc == 0, r
    for key in ("kill", "environ", "maps", "fd"):
        assert f"{key}=0" not in r.stdout, (key, r.stdout)


# ---- network ------------------------------------------------------------------------

def test_only_loopback(sandlot):
    r = sandlot.run(["--", "cat", "/proc/net/dev"])
    assert r.rc == 0, r
    ifaces = [ln.split(":")[0].strip() for ln in r.stdout.splitlines()[2:]]
    assert ifaces == ["lo"], ifaces


def test_sys_class_net_and_ip_link(sandlot):
    r = sandlot.sh("ls /sys/class/net 2>/dev/null; echo ---; ip -o link 2>/dev/null; true")
    assert r.rc == 0, r
    sysnet, _, iplink = r.stdout.partition("---\n")
    assert sysnet.split() in ([], ["lo"]), sysnet
    names = [ln.split(":")[1].strip() for ln in iplink.splitlines() if ln.strip()]
    assert names in ([], ["lo"]), iplink


def test_loopback_works_and_outside_is_unreachable(sandlot):
    code = r"""
import json, socket, errno
out = {}
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=2)
a, _ = srv.accept(); c.sendall(b"ping"); out["loopback"] = a.recv(4).decode()
for name, addr in (("public", ("1.1.1.1", 53)), ("private", ("10.0.0.1", 80)),
                   ("metadata", ("169.254.169.254", 80))):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr); out[name] = "connected"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
try:
    socket.getaddrinfo("example.com", 80); out["dns"] = "resolved"
except OSError as e:
    out["dns"] = "failed"
print(json.dumps(out))
"""
    j = run_py_json(sandlot, code)
    assert j["loopback"] == "ping"
    for k in ("public", "private", "metadata"):
        assert j[k] in ("ENETUNREACH", "EHOSTUNREACH", "EACCES", "EPERM"), j
    assert j["dns"] == "failed"


def test_cannot_set_hostname(sandlot):
    r = sandlot.sh("echo evil > /proc/sys/kernel/hostname; echo w=$?; hostname evil 2>/dev/null; "
                   "echo h=$?; hostname")
    assert r.rc == 0, r
    assert "w=0" not in r.stdout and "h=0" not in r.stdout, r
    assert r.stdout.split()[-1] == "sandlot"
    assert os.uname().nodename != "evil"


# ---- filesystem -----------------------------------------------------------------------

MASKED = ("kcore", "keys", "timer_list", "sched_debug", "kallsyms", "kmsg", "sysrq-trigger")


def test_sensitive_proc_files_masked(sandlot):
    code = """
import json, os
out = {}
for name in %r:
    p = "/proc/" + name
    if not os.path.lexists(p):
        out[name] = "absent"; continue
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        out[name] = "read %%d bytes" %% len(data)
    except OSError as e:
        out[name] = "error " + e.__class__.__name__
print(json.dumps(out))
""" % (MASKED[:-1],)
    j = run_py_json(sandlot, code)
    for name, res in j.items():
        assert res in ("absent", "read 0 bytes") or res.startswith("error"), (name, res)


def test_proc_sys_and_sysrq_read_only(sandlot):
    r = sandlot.sh("echo 1 > /proc/sysrq-trigger; echo s=$?; echo 1 > /proc/sys/vm/drop_caches; echo d=$?")
    assert "s=0" not in r.stdout and "d=0" not in r.stdout, r


def test_root_and_usr_are_read_only(sandlot):
    r = sandlot.sh("for p in /x /usr/x /usr/bin/x /etc/x /bin/x /lib/x /var/x /run/x /dev/x; do "
                   "touch $p 2>/dev/null && echo writable:$p; done; echo end")
    assert r.stdout == "end\n", r


def test_root_is_read_only_down_to_its_filesystem(sandlot):
    """The root and /dev (a clone of the tree the host prepared once for
    every sandbox) are read-only in their superblock, not only per mount:
    nothing in any sandbox can remount them writable.  Seen from the
    host, in the sandbox's own mount table."""
    tag = f"7.{uuid.uuid4().int % 10**9}"
    p = sandlot.popen(["--", "sh", "-c", f"echo ready; exec sleep {tag}"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"ready\n"
        found = wait_until(lambda: hostscan.find_pids(["sleep", tag]), 5)
        assert len(found) == 1, found
        mounts = {}
        for ln in hostscan.read(f"/proc/{found[0]}/mountinfo").splitlines():
            pre, _, post = ln.partition(" - ")
            fields = pre.split()
            mounts[fields[4]] = (fields[5].split(","), post.split()[0], post.split()[2].split(","))
        for point in ("/", "/dev"):
            opts, fstype, super_opts = mounts[point] if point in mounts else mounts["/"]
            assert fstype == "tmpfs", (point, mounts[point])
            assert "ro" in opts and "ro" in super_opts, (point, opts, super_opts)
        # The workspace and /dev/shm stay writable, of course.
        assert "rw" in mounts["/home/user"][0] and "rw" in mounts["/dev/shm"][0]
    finally:
        stop(p)


def test_home_and_tmp_are_writable(sandlot):
    r = sandlot.sh("touch /home/user/a /tmp/b /var/tmp/c /dev/shm/d && ls /home/user /tmp && echo ok")
    assert r.rc == 0, r
    assert r.stdout.split() == ["/home/user:", "a", "/tmp:", "b", "c", "ok"], r


def test_workspace_is_private_and_fresh(sandlot):
    r1 = sandlot.sh("echo secret > /home/user/s; echo t > /tmp/t; ls -A /home/user /tmp")
    r2 = sandlot.sh("ls -A /home/user /tmp")
    assert r1.rc == r2.rc == 0
    assert "s" in r1.stdout.split()
    assert r2.stdout.split() == ["/home/user:", "/tmp:"], r2


def test_dev_is_minimal(sandlot):
    r = sandlot.run(["--", "ls", "-A", "/dev"])
    assert r.rc == 0, r
    assert set(r.stdout.split()) == {"null", "zero", "full", "random", "urandom", "tty", "pts",
                                     "ptmx", "shm", "fd", "stdin", "stdout", "stderr"}, r.stdout


def test_dev_nodes_work(sandlot):
    r = sandlot.sh("head -c 16 /dev/urandom | wc -c; head -c 4 /dev/zero | od -An -tx1; "
                   "echo x > /dev/null && echo null-ok; echo x > /dev/full; echo full=$?")
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "16" and lines[1].split() == ["00"] * 4 and lines[2] == "null-ok"
    assert "full=1" in r.stdout


def test_no_block_devices_or_host_disks(sandlot):
    r = sandlot.sh("for d in /dev/vda /dev/sda /dev/nvme0n1 /dev/loop0 /dev/loop-control /dev/mem "
                   "/dev/kmsg /dev/fuse /dev/net/tun /sys/block; do test -e $d && echo present:$d; done; "
                   "echo end")
    assert r.stdout == "end\n", r


def test_no_host_secrets(sandlot):
    r = sandlot.sh("test -e /etc/shadow && echo shadow-exists; test -e /etc/gshadow && echo gshadow; "
                   "ls -A /root 2>/dev/null | wc -l; test -e /etc/ssh && echo ssh; "
                   "test -e /var/lib && echo varlib; test -e /work && echo work; "
                   "test -e /var/tmp/sandlot-it && echo it; "
                   "grep -c . /etc/passwd; echo end")
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines == ["0", "3", "end"], r


def test_etc_is_generated(sandlot):
    r = sandlot.sh("cat /etc/hostname; grep -c . /etc/group; cat /etc/resolv.conf")
    assert r.rc == 0, r
    assert r.stdout.startswith("sandlot\n3\n"), r
    # sandlot's resolver (docs/network.md), never the host's.
    assert r.stdout.endswith("nameserver 127.0.0.1\n"), r


def test_host_files_not_visible(sandlot):
    """Nothing from the host but the read-only /usr (and its merged-usr
    links) and an allowlist of /etc."""
    r = sandlot.sh("ls -A /")
    assert r.rc == 0, r
    allowed = {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc", "home", "tmp", "dev",
               "proc", "root", "var", "run"}
    assert set(r.stdout.split()) <= allowed, set(r.stdout.split()) - allowed


# ---- seccomp and privilege ------------------------------------------------------------

def test_af_packet_socket_refused(sandlot):
    r = sandlot.py("import socket\n"
                   "try:\n"
                   "    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
                   "    print('opened')\n"
                   "except PermissionError:\n"
                   "    print('PermissionError')\n")
    assert (r.rc, r.stdout) == (0, "PermissionError\n"), r


def test_raw_inet_socket_refused(sandlot):
    r = sandlot.py("import socket\n"
                   "try:\n"
                   "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
                   "    print('opened')\n"
                   "except PermissionError:\n"
                   "    print('PermissionError')\n")
    assert (r.rc, r.stdout) == (0, "PermissionError\n"), r


def test_unshare_refused(sandlot):
    r = sandlot.run(["--", "unshare", "-U", "true"])
    assert r.rc != 0, r
    r = sandlot.run(["--", "unshare", "-Ur", "id"])
    assert r.rc != 0 and "uid=0" not in r.stdout, r


def test_mount_refused(sandlot):
    r = sandlot.sh("mount -t tmpfs none /tmp; echo m=$?; mount --bind /tmp /home/user; echo b=$?")
    assert "m=0" not in r.stdout and "b=0" not in r.stdout, r


DANGEROUS = {
    # name: (x86_64 number, args)
    "unshare(CLONE_NEWUSER)": (272, (0x10000000,)),
    "unshare(CLONE_NEWNS)": (272, (0x00020000,)),
    "setns": (308, (0, 0)),
    "mount": (165, (0, 0, 0, 0, 0)),
    "umount2": (166, (0, 0)),
    "pivot_root": (155, (0, 0)),
    "bpf": (321, (0, 0, 0)),
    "perf_event_open": (298, (0, 0, -1, -1, 0)),
    "keyctl": (250, (0, 0, 0, 0, 0)),
    "add_key": (248, (0, 0, 0, 0, 0)),
    "kexec_load": (246, (0, 0, 0, 0)),
    "init_module": (175, (0, 0, 0)),
    "finit_module": (313, (0, 0, 0)),
    "open_by_handle_at": (304, (0, 0, 0)),
    "userfaultfd": (323, (0,)),
    "ptrace(PTRACE_ATTACH, 1)": (101, (16, 1, 0, 0)),
    "reboot": (169, (0, 0, 0, 0)),
    "swapon": (167, (0, 0)),
    "syslog": (103, (0, 0, 0)),
    "acct": (163, (0,)),
    "settimeofday": (164, (0, 0)),
    "fsopen": (430, (0, 0)),
    "move_mount": (429, (0, 0, 0, 0, 0)),
    "io_uring_setup": (425, (1, 0)),
}


def test_dangerous_syscalls_fail_cleanly(sandlot):
    """Each refused syscall fails with an errno (EPERM as in Docker's policy;
    ENOSYS also accepted) and the caller survives."""
    code = """
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {"arch": platform.machine()}
for name, (nr, args) in %r.items():
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    out[name] = [rc, ctypes.get_errno()]
print(json.dumps(out))
""" % (DANGEROUS,)
    j = run_py_json(sandlot, code)
    if j.pop("arch") != "x86_64":
        pytest.skip("syscall numbers in this test are for x86_64")
    import errno as E
    bad = {k: (rc, E.errorcode.get(e, e)) for k, (rc, e) in j.items()
           if rc != -1 or e not in (E.EPERM, E.ENOSYS, E.EACCES)}
    assert not bad, f"not refused: {bad}"


def test_ordinary_syscalls_still_work(sandlot):
    """The allowlist is not so tight that normal programs break: threads,
    fork/exec, pipes, mmap, epoll, timers, signals, sockets on loopback."""
    code = r"""
import os, threading, subprocess, mmap, select, signal, socket, time, json, tempfile, fcntl
res = {}
t = threading.Thread(target=lambda: res.setdefault("thread", True)); t.start(); t.join()
res["subprocess"] = subprocess.run(["echo", "hi"], capture_output=True).stdout.decode()
m = mmap.mmap(-1, 1 << 20); m[:5] = b"hello"; res["mmap"] = m[:5].decode()
ep = select.epoll(); r, w = os.pipe(); ep.register(r, select.EPOLLIN); os.write(w, b"x")
res["epoll"] = len(ep.poll(1))
signal.signal(signal.SIGUSR1, lambda *a: res.setdefault("signal", True)); os.kill(os.getpid(), signal.SIGUSR1)
a, b = socket.socketpair(); a.send(b"p"); res["socketpair"] = b.recv(1).decode()
with tempfile.NamedTemporaryFile() as f:
    fcntl.flock(f, fcntl.LOCK_EX); res["flock"] = True
res["clock"] = time.monotonic() > 0
print(json.dumps(res))
"""
    j = run_py_json(sandlot, code)
    assert j == {"thread": True, "subprocess": "hi\n", "mmap": "hello", "epoll": 1, "signal": True,
                 "socketpair": "p", "flock": True, "clock": True}


# ---- runtimes --------------------------------------------------------------------------------

def test_python3_works(sandlot):
    r = sandlot.py("import json, sqlite3, ssl, hashlib, zlib; print(1)")
    assert (r.rc, r.stdout) == (0, "1\n"), r


def test_python_sqlite_and_files(sandlot):
    r = sandlot.py("import sqlite3; c = sqlite3.connect('db.sqlite'); c.execute('create table t(x)'); "
                   "c.execute('insert into t values (42)'); c.commit(); "
                   "print(c.execute('select x from t').fetchone()[0])")
    assert (r.rc, r.stdout) == (0, "42\n"), r


def test_node_works(sandlot):
    r = sandlot.run(["--", "node", "-e", "console.log(1+1)"])
    assert (r.rc, r.stdout) == (0, "2\n"), r


def test_shell_tools_work(sandlot):
    r = sandlot.sh("echo a,b | awk -F, '{print $2}'; printf 'x\\n' | sed s/x/y/; "
                   "bash -c 'echo $BASH_VERSION' | cut -c1; ls /usr/bin/env >/dev/null && echo env")
    assert r.rc == 0, r
    assert r.stdout.splitlines()[:2] == ["b", "y"] and r.stdout.endswith("env\n"), r


# ---- nothing escapes ---------------------------------------------------------------------------

def test_setsid_child_does_not_survive(sandlot):
    tag = f"1000.{uuid.uuid4().int % 10**9}"
    r = sandlot.sh(f"setsid sleep {tag} & echo started")
    assert (r.rc, r.stdout) == (0, "started\n"), r
    assert wait_until(lambda: not hostscan.find_pids(["sleep", tag]), 3), \
        "a setsid'd child of the command outlived the sandbox"


def test_daemonized_child_does_not_survive(sandlot):
    tag = f"1001.{uuid.uuid4().int % 10**9}"
    script = f"(setsid sh -c 'exec nohup sleep {tag} >/dev/null 2>&1 </dev/null' &) ; echo started"
    r = sandlot.sh(script)
    assert r.rc == 0, r
    assert wait_until(lambda: not hostscan.find_pids(["sleep", tag]), 3), \
        "a double-forked daemon outlived the sandbox"


def test_no_sandbox_process_after_run(sandlot):
    """The sandbox's init is gone once sandlot returns."""
    tag = f"1002.{uuid.uuid4().int % 10**9}"
    p = sandlot.popen(["--", "sh", "-c", f"echo ready; sleep {tag} & sleep 1"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"ready\n"
        pids = wait_until(lambda: hostscan.find_pids(["sleep", tag]), 5)
        assert pids
        init = hostscan.sandbox_init_of(pids[0])
        assert init, "no sandlot-init above the sandbox's sleep"
        p.communicate(timeout=30)
        assert p.returncode == 0
        assert wait_until(lambda: not os.path.exists(f"/proc/{init}"), 3), "init outlived sandlot"
        assert not hostscan.find_pids(["sleep", tag])
    finally:
        stop(p)
