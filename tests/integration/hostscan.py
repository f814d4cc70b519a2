"""Looking at the host from outside the sandboxes: processes, cgroups, loop
devices, mounts.  Used to find a sandbox's processes and to check that
nothing is left behind.

Other people may run sandboxes on the same machine while the tests run, so
leftovers are attributed to this test session: loop devices, mounts and
workspaces by the session's data directory, processes by ancestry (a
sandbox init that is our descendant), cgroups by the sandbox id (`Owner`:
a sandbox whose cgroup held a process of ours, or that a daemon of ours
logged as created).

Storage pools: a data directory's storage pool (<dd>/storage/pool.img on a
loop device, mounted at <dd>/storage/mnt) is made on first use and stays
mounted for the next sandbox, so its one loop device and its one mount are
not leftovers; what a sandbox must not leave is its workspace (an entry in
<dd>/storage/mnt/ws/), another loop device or mount, or a half-made pool.
unmount_pools() takes the pools down at the end, after which nothing at all
may be left.
"""
import fcntl
import glob
import os
import platform
import re
import threading

CGROUP_GLOBS = (
    "/sys/fs/cgroup/*/sandlot/sb-*",   # v1 controllers, and v2 "unified" on hybrid hosts
    "/sys/fs/cgroup/sandlot/sb-*",     # pure v2
)


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def cmdline(pid):
    """argv of a process as a list of bytes, [] if gone or a kernel thread."""
    raw = read(f"/proc/{pid}/cmdline", "rb")
    if not raw:
        return []
    return raw.rstrip(b"\0").split(b"\0")


def pids():
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def find_pids(argv):
    """Pids whose argv equals `argv` (a list of str)."""
    want = [a.encode() for a in argv]
    return [p for p in pids() if cmdline(p) == want]


def find_pids_containing(needle):
    """Pids whose command line (joined with spaces) contains `needle`."""
    n = needle.encode()
    out = []
    for p in pids():
        if p == os.getpid():
            continue
        if n in b" ".join(cmdline(p)):
            out.append(p)
    return out


def status(pid):
    """/proc/PID/status as a dict of str -> str, {} if gone."""
    text = read(f"/proc/{pid}/status")
    if not text:
        return {}
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


# write(2) and writev(2), by architecture (/proc/PID/syscall gives the number).
WRITE_SYSCALLS = {"x86_64": {1, 20}, "aarch64": {64, 66}}.get(platform.machine(), set())


def blocked_writing(pid):
    """Whether `pid` sleeps in write(2)/writev(2): a pipe or socket it
    writes to is full.  False if gone."""
    st = state(pid)
    sc = read(f"/proc/{pid}/syscall")
    if not st or not sc:
        return False
    try:
        nr = int(sc.split()[0])
    except (ValueError, IndexError):
        return False  # "running", or no syscall
    return st == "S" and nr in WRITE_SYSCALLS


def io_counter(pid, key):
    """A field of /proc/PID/io (rchar, wchar, ...), None if gone."""
    for line in (read(f"/proc/{pid}/io") or "").splitlines():
        k, _, v = line.partition(":")
        if k == key:
            return int(v)
    return None


def state(pid):
    """The state letter of a process (R, S, D, Z, T...), "" if gone."""
    stat = read(f"/proc/{pid}/stat")
    return stat[stat.rindex(")") + 2] if stat else ""


def ppid(pid):
    try:
        return int(status(pid).get("PPid", "0"))
    except ValueError:
        return 0


def uids(pid):
    """(real, effective, saved, fs) host uids of a process."""
    return tuple(int(x) for x in status(pid).get("Uid", "").split())


def is_descendant(pid, ancestor):
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        pid = ppid(pid)
        if pid == ancestor:
            return True
    return False


def is_sandlot_init(pid):
    argv = cmdline(pid)
    return bool(argv) and os.path.basename(argv[0]) == b"sandlot-init"


def sandbox_init_of(pid):
    """The sandlot-init a sandbox process descends from (host pid), or 0."""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        pid = ppid(pid)
        if is_sandlot_init(pid):
            return pid
    return 0


def init_pids():
    return {p for p in pids() if is_sandlot_init(p)}


def is_cleanup_helper(pid):
    """A live (not zombie) cleanup helper of a `sandlot run`."""
    st = status(pid)
    return st.get("Name") == "sandlot-cleanup" and not st.get("State", "").startswith("Z")


def helper_pids():
    return {p for p in pids() if is_cleanup_helper(p)}


# Prepared cgroups (src/linux/cgroup.h, "prepared cgroups"): every data
# dir that has some has a pool directory here holding a marker
# "<name>.<memory>.<pids>.<cpus>" per free prepared cgroup, its data dir in
# "data-dir", and "preparer.lock", on which the process that keeps the pool
# filled (sandlotd) holds a shared flock.
CGROUP_POOL_BASE = "/run/sandlot/cgroup-pool"
# A sandbox id of either shape (src/common/sbid.h: with or without the node
# of sandlotd --node-id); both are 29 characters.
SBID = r"sb-(?:[a-z2-7]{26}|[a-z0-9]{1,8}-[a-z2-7]{17,24})"
MARKER_RE = re.compile(rf"^({SBID})\.\d+\.\d+\.\d+$")


def cgroup_pools():
    """{pool directory: its data dir} for every pool on the host."""
    out = {}
    for pool in glob.glob(os.path.join(CGROUP_POOL_BASE, "*")):
        dd = read(os.path.join(pool, "data-dir"))
        if dd is not None:
            out[pool] = dd.rstrip("\n")
    return out


def prepared_cgroups(pool):
    """Names of the free prepared cgroups of a pool."""
    try:
        names = os.listdir(pool)
    except OSError:
        return set()
    return {m.group(1) for m in map(MARKER_RE.match, names) if m}


def pool_has_preparer(pool):
    """Whether a live process keeps the pool (holds its preparer.lock)."""
    try:
        fd = os.open(os.path.join(pool, "preparer.lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (releases the lock if we got it)
    return False


def orphaned_prepared_cgroups(data_dir):
    """{pool: names} of free prepared cgroups kept for data dirs at or under
    `data_dir` by no live process: what a preparer that exited (or was
    killed) left and nothing reclaimed."""
    dd = str(data_dir)
    out = {}
    for pool, pool_dd in cgroup_pools().items():
        if pool_dd != dd and not pool_dd.startswith(dd.rstrip("/") + "/"):
            continue
        names = prepared_cgroups(pool)
        if names and not pool_has_preparer(pool) and not spare_cgroups_kept(pool, pool_dd):
            out[pool] = names
    return out


# The cleanup helper of a `sandlot run` keeps up to this many prepared
# cgroups for the next runs of its data dir, in a pool whose preparer.lock
# says "spare"
# (src/linux/cgroup.h, "spares of sandlot run"), with no preparer.
CGROUP_SPARE_MAX = 2


def is_spare_pool(pool):
    """Whether a cgroup pool is the spares of `sandlot run`."""
    return read(os.path.join(pool, "preparer.lock")) == "spare\n"


def spare_cgroups_kept(pool, pool_dd):
    """Whether a pool's free cgroups are the bounded spares of `sandlot run`
    for a data dir that exists (what `sandlot drain` removes)."""
    return (is_spare_pool(pool) and os.path.isdir(pool_dd)
            and len(prepared_cgroups(pool)) <= CGROUP_SPARE_MAX)


# Spare network namespaces of `sandlot run` (src/linux/netns.h, "spare
# namespaces"): a directory per data dir, named after a hash of it, holding
# "data-dir", "fill.lock", and per spare a bind mount "<name>.ns" of the
# namespace and, while it is free, a marker "<name>.free".
NETNS_SPARE_BASE = "/run/sandlot/netns-spare"
NETNS_SPARE_MAX = 2
SPARE_NAME = re.compile(r"^([a-z2-7]{1,31})\.(ns|free)$")


def spare_pools():
    """{pool directory: its data dir} for every spare pool on the host."""
    out = {}
    for pool in glob.glob(os.path.join(NETNS_SPARE_BASE, "*")):
        dd = read(os.path.join(pool, "data-dir"))
        if dd is not None:
            out[pool] = dd.rstrip("\n")
    return out


def spare_pool_of(data_dir):
    """The spare pool directory of data_dir (FNV-1a 64 of its path)."""
    h = 0xcbf29ce484222325
    for b in str(data_dir).encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(NETNS_SPARE_BASE, f"{h:016x}")


def spares(pool):
    """(free, mounted): names with a marker, names whose .ns is a mount."""
    try:
        names = os.listdir(pool)
    except OSError:
        return set(), set()
    free = {m.group(1) for m in map(SPARE_NAME.match, names) if m and m.group(2) == "free"}
    mine = os.path.realpath(pool) + "/"
    mounted = set()
    for ln in (read("/proc/self/mountinfo") or "").splitlines():
        mp = ln.split()[4]
        if mp.startswith(mine) and mp.endswith(".ns"):
            mounted.add(mp[len(mine):-3])
    return free, mounted


def spare_problems(data_dir):
    """What is wrong with the spares of data dirs at or under data_dir, once
    their runs' cleanup helpers are done: more than the bound free, a
    marker without its mount, or a mount without its marker (taken and
    never put back)."""
    dd = str(data_dir)
    problems = []
    for pool, pool_dd in spare_pools().items():
        if pool_dd != dd and not pool_dd.startswith(dd.rstrip("/") + "/"):
            continue
        free, mounted = spares(pool)
        if len(free) > NETNS_SPARE_MAX:
            problems.append(f"{len(free)} spare network namespaces in {pool} (at most "
                            f"{NETNS_SPARE_MAX})")
        for n in sorted(free - mounted):
            problems.append(f"spare network namespace {pool}/{n} free but not mounted")
        for n in sorted(mounted - free):
            problems.append(f"spare network namespace {pool}/{n} taken and never put back")
    return problems


def sandbox_cgroups():
    out = set()
    for g in CGROUP_GLOBS:
        out.update(glob.glob(g))
    return out


def cgroup_procs(path):
    text = read(os.path.join(path, "cgroup.procs"))
    if text is None:
        return None
    return [int(x) for x in text.split()]


def sandlot_mounts():
    text = read("/proc/self/mountinfo") or ""
    return {ln for ln in text.splitlines() if "sandlot" in ln}


def loop_backing_files():
    """{"/dev/loopN": backing file} for every configured loop device."""
    out = {}
    for d in glob.glob("/sys/block/loop*/loop/backing_file"):
        dev = "/dev/" + d.split("/")[3]
        bf = read(d)
        if bf is not None:
            out[dev] = bf.strip()
    return out


POOL_FILES = {"pool.img", "pool.lock", "mnt"}


# What the kernel adds to a loop device's backing file once that file is
# removed (reclaim_daemon_dirs removes a stopped daemon's pool image).
DELETED = " (deleted)"


def is_pool_image(path):
    """A storage pool's image, also once removed while its loop device
    lives on."""
    return path.removesuffix(DELETED).endswith("/storage/pool.img")


def is_pool_mount(line):
    """A mountinfo line of a storage pool's own mount (its mount point is
    <dd>/storage/mnt)."""
    fields = line.split()
    return len(fields) > 4 and fields[4].endswith("/storage/mnt")


def pool_mounts(under):
    """Mount points of the storage pools of data dirs under `under`."""
    text = read("/proc/self/mountinfo") or ""
    out = []
    for ln in text.splitlines():
        fields = ln.split()
        if len(fields) > 4 and fields[4].startswith(str(under)) and is_pool_mount(ln):
            out.append(fields[4])
    return out


def unmount_pools(under):
    """Unmount every storage pool of the data dirs under `under` (their loop
    devices detach themselves); returns the mount points it unmounted."""
    import subprocess
    done = []
    for mp in sorted(pool_mounts(under), key=len, reverse=True):
        r = subprocess.run(["umount", mp], capture_output=True, text=True)
        if r.returncode == 0:
            done.append(mp)
    return done


def pool_problems(data_dir):
    """Per-sandbox leftovers in the storage pools of data dirs under
    data_dir: ephemeral workspaces still in a pool, files in storage/ that
    are not the pool's own."""
    problems = []
    dd = str(data_dir)
    found = [os.path.join(dd, *["*"] * depth, "storage") for depth in range(3)]
    for storage in sorted({p for pat in found for p in glob.glob(pat)}):
        if "/storage/" in storage[len(dd):]:
            continue  # inside a pool, not a data dir's
        if not os.path.isfile(os.path.join(storage, "pool.img")) and not os.listdir(storage):
            continue
        for name in sorted(os.listdir(storage)):
            if name not in POOL_FILES:
                problems.append(f"storage file left: {storage}/{name}")
        ws = os.path.join(storage, "mnt", "ws")
        if os.path.isdir(ws):
            for name in sorted(os.listdir(ws)):
                problems.append(f"workspace left in the storage pool: {ws}/{name}")
    return problems


def loop_holders(dev):
    """Pids whose mount namespace still has a mount of loop device `dev`
    (/dev/loopN): a namespace made (by anyone) while a storage pool was
    mounted holds a copy of that mount, and so the pool's filesystem and
    loop device, until it drops it; the pool's own unmount cannot reach a
    copy that another namespace made private."""
    seen, out = set(), []
    for pid in pids():
        try:
            ns = os.readlink(f"/proc/{pid}/ns/mnt")
        except OSError:
            continue
        if ns in seen:
            continue
        seen.add(ns)
        text = read(f"/proc/{pid}/mountinfo") or ""
        # the mount source, after " - FSTYPE " (btrfs shows an anonymous
        # device number in the major:minor field, not the loop device's)
        if any(ln.partition(" - ")[2].split()[1:2] == [dev] for ln in text.splitlines()):
            out.append(pid)
    return out


def lingering_pool_loops(under):
    """Loop devices of storage pools under `under` that are no longer
    mounted in our namespace and that no namespace holds: leaked ones."""
    out = []
    for dev, bf in loop_backing_files().items():
        if bf.startswith(str(under)) and not loop_holders(dev):
            out.append(f"loop device {dev} on {bf}, mounted nowhere")
    return out


def netns_names():
    try:
        return set(os.listdir("/run/netns"))
    except OSError:
        return set()


def net_ns_inode(pid_or_path):
    """The inode of a process's (pid) or a file's (/run/netns/NAME) network
    namespace, None if gone."""
    path = f"/proc/{pid_or_path}/ns/net" if isinstance(pid_or_path, int) else pid_or_path
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def start_time(pid):
    """A process's start time (clock ticks since boot), to tell it from a
    later process given the same pid; None if gone."""
    stat = read(f"/proc/{pid}/stat")
    return int(stat[stat.rindex(")") + 2:].split()[19]) if stat else None


def nft_tables():
    """The nftables tables of this network namespace ("family name"), or
    None if nft cannot list them."""
    import shutil
    import subprocess
    nft = shutil.which("nft") or "/usr/sbin/nft"
    if not os.access(nft, os.X_OK):
        return None
    r = subprocess.run([nft, "list", "tables"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return {ln[len("table "):].strip() for ln in r.stdout.splitlines() if ln.startswith("table ")}


# ---- the network tests' fake internet (fakenet.py) --------------------------
#
# Named "sle<pid>..." after this process: its two network namespaces
# (/run/netns/sle<pid>h and ...n), the veth pair between them (sle<pid>a,
# sle<pid>b: they live in those namespaces and go with them), and the
# processes it starts there (registered here, by pid and start time).
# A process is counted as left inside one of its namespaces only while the
# namespace's name exists: once it is removed, its inode may be reused by
# anyone's new namespace.

def fakenet_tag(pid=None):
    return f"sle{pid or os.getpid()}"


_fakenet = {"pids": {}}  # pid -> start time


def fakenet_register_process(pid):
    _fakenet["pids"][pid] = start_time(pid)


def processes_in_netns(name):
    """Pids of the processes in the named network namespace (/run/netns/NAME),
    [] if it is gone.  Only while the name exists: it pins the namespace, so
    its inode cannot have been reused by another one."""
    ino = net_ns_inode(f"/run/netns/{name}")
    if ino is None:
        return []
    return [p for p in pids() if p != os.getpid() and net_ns_inode(p) == ino]


def fakenet_leftovers():
    """What is left of this process's fake internets: their named network
    namespaces and any process still in them, links named after them in
    this namespace, their processes still running."""
    tag = fakenet_tag()
    problems = []
    for n in sorted(netns_names()):
        if n.startswith(tag):
            problems.append(f"fake internet network namespace left: /run/netns/{n}")
            for pid in processes_in_netns(n):
                problems.append(f"process {pid} still in the fake internet's namespace {n}: "
                                f"{b' '.join(cmdline(pid)).decode(errors='replace')}")
    try:
        links = os.listdir("/sys/class/net")
    except OSError:
        links = []
    for link in sorted(links):
        if link.startswith(tag):
            problems.append(f"fake internet link left in the host's namespace: {link}")
    for pid, started in sorted(_fakenet["pids"].items()):
        if started is not None and start_time(pid) == started:
            problems.append(f"fake internet process {pid} still running: "
                            f"{b' '.join(cmdline(pid)).decode(errors='replace')}")
    return problems


def network_leftovers(before):
    """fakenet_leftovers(), and any nftables table sandlot's egress rules
    use ("inet sandlot") that appeared in the host's own network namespace
    since the `before` snapshot: those rules belong in a sandbox's
    namespace only."""
    problems = fakenet_leftovers()
    now = nft_tables()
    if now is not None:
        for t in sorted(now - (before.get("nft_tables") or set())):
            if t.endswith(" sandlot"):
                problems.append(f"nftables table left in the host's network namespace: {t}")
    return problems


def sandbox_id(cgroup_path):
    return os.path.basename(cgroup_path)


CREATED_RE = re.compile(rf"event=created sandbox=({SBID})")


class Owner:
    """Which sandboxes (by id) and sandbox inits are this test session's.

    An empty cgroup or an orphaned init says nothing about whose it was, and
    on a shared machine another user's sandbox may be between its cgroup's
    creation and its init's arrival, or between its end and the removal of
    its cgroup, at the moment a test looks.  So a thread looks every 20 ms:
    a sandbox cgroup holding a process descended from this one (a `sandlot
    run` of ours, or an init of one of our daemons) is ours, as is that
    init; one holding only other processes is not.  Sandboxes too short-lived
    to be seen are ours when a daemon of ours logged their creation
    (add_log()).  A cgroup never seen holding anything, and not logged by us,
    is not counted as ours."""

    def __init__(self, me=None, interval=0.02):
        self.me = me or os.getpid()
        self.interval = interval
        self.lock = threading.Lock()
        self.ours = set()        # sandbox ids
        self.foreign = set()
        self.inits = set()       # init pids seen in a cgroup of ours
        self.logs = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="hostscan-owner", daemon=True)
        self.thread.start()

    def add_log(self, path):
        """A log of one of our daemons, read for "event=created" lines."""
        with self.lock:
            self.logs.append(str(path))

    def _run(self):
        while not self.stopping.wait(self.interval):
            self.scan()

    def scan(self):
        for cg in sandbox_cgroups():
            sid = sandbox_id(cg)
            with self.lock:
                if sid in self.ours or sid in self.foreign:
                    continue
            procs = cgroup_procs(cg)
            if not procs:
                continue
            mine = [p for p in procs if is_descendant(p, self.me)]
            with self.lock:
                if mine:
                    self.ours.add(sid)
                    self.inits.update(p for p in mine if is_sandlot_init(p))
                else:
                    self.foreign.add(sid)

    def is_ours(self, sid):
        self.scan()
        with self.lock:
            if sid in self.ours:
                return True
            if sid in self.foreign:
                return False
            logs = list(self.logs)
        for path in logs:
            text = read(path) or ""
            if sid in text and sid in CREATED_RE.findall(text):
                with self.lock:
                    self.ours.add(sid)
                return True
        return False

    def is_our_init(self, pid):
        with self.lock:
            return pid in self.inits

    def stop(self):
        self.stopping.set()
        self.thread.join(5)


_owner = None


def owner():
    """The session's Owner, started on first use."""
    global _owner
    if _owner is None:
        _owner = Owner()
    return _owner


def qemu_guests():
    """{pid: sandbox id} of the vm backend's QEMU processes (-name guest=ID)."""
    out = {}
    for p in pids():
        argv = cmdline(p)
        if not argv or not argv[0].endswith(b"qemu-system-x86_64"):
            continue
        for a in argv:
            m = re.match(rf"guest=({SBID})$".encode(), a)
            if m:
                out[p] = m.group(1).decode()
    return out


def vm_leftovers(dd, me, own, running=frozenset()):
    """What a vm sandbox of ours left: its QEMU, its files in a data dir
    (vm/sb-*), its link in /run/sandlot/vm.  Sandboxes in `running` (ids
    that ran before the test: a module's shared VM) are not leftovers."""
    problems = []
    for p, sid in sorted(qemu_guests().items()):
        if sid in running:
            continue
        if is_descendant(p, me) or (ppid(p) in (0, 1) and own.is_ours(sid)):
            problems.append(f"QEMU pid {p} of vm sandbox {sid} still running")
    for d in sorted(glob.glob(f"{dd}/vm/sb-*") + glob.glob(f"{dd}/daemon/*/vm/sb-*")):
        if os.path.basename(d) not in running:
            problems.append(f"vm sandbox files left: {d}")
    for link in sorted(glob.glob("/run/sandlot/vm/sb-*")):
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith(dd) and os.path.basename(link) not in running:
            problems.append(f"vm sandbox link left: {link} -> {target}")
    return problems


def snapshot():
    return {
        "inits": init_pids(),
        "helpers": helper_pids(),
        "cgroups": sandbox_cgroups(),
        "mounts": sandlot_mounts(),
        "netns": netns_names(),
        "nft_tables": nft_tables(),
        "vms": frozenset(qemu_guests().values()),
    }


def leftovers(before, data_dir, me=None):
    """Problems (strings) found compared with snapshot `before`.

    - a loop device whose backing file is in this session's data dir (but
      a storage pool's own);
    - an ephemeral workspace left in a storage pool, or a stray file in
      a storage/ directory (pool_problems());
    - a sandlot-init that appeared since `before` and is ours: a
      descendant of this process, or an orphan (parent is PID 1) that was
      one (Owner);
    - a cleanup helper of a `sandlot run` of ours still at work, the same
      way (its sandbox id is ours);
    - a cgroup of one of our sandboxes (Owner) that appeared since `before`
      and holds no process;
    - a free prepared cgroup kept for our data dir (or one under it) by no
      live process;
    - a new mount of our data directory, or of a loop device backed by a
      file in it, in our mount namespace (but a storage pool's own);
    - a new named network namespace named after one of our sandboxes;
    - spare network namespaces of our data dir (or one under it) beyond
      the bound, or taken and never put back (spare_problems()).
    """
    me = me or os.getpid()
    own = owner()
    problems = []
    dd = str(data_dir)
    for dev, bf in sorted(loop_backing_files().items()):
        if not bf.startswith(dd):
            continue
        if not is_pool_image(bf):
            problems.append(f"loop device {dev} still backed by {bf}")
        elif bf.endswith(DELETED) and not loop_holders(dev):
            # A removed pool's device goes with the last mount of it: one
            # that a namespace made (by anyone) while the pool was mounted
            # still holds it, and the final check waits for those.
            problems.append(f"loop device {dev} of a removed storage pool, mounted nowhere: {bf}")
    problems += pool_problems(dd)
    for p in sorted(init_pids() - before["inits"]):
        parent = ppid(p)
        if is_descendant(p, me) or (parent in (0, 1) and own.is_our_init(p)):
            who = "orphaned (parent is PID 1)" if parent in (0, 1) else f"parent {parent}"
            problems.append(f"sandlot-init pid {p} still running, {who}, host uids {uids(p)}")
    for p in sorted(helper_pids() - before["helpers"]):
        parent = ppid(p)
        argv = cmdline(p)
        sid = argv[1].decode() if len(argv) == 2 else ""
        if is_descendant(p, me) or (parent in (0, 1) and own.is_ours(sid)):
            problems.append(f"sandlot-cleanup pid {p} still running ({' '.join(map(bytes.decode, cmdline(p)))})")
    for cg in sorted(sandbox_cgroups() - before["cgroups"]):
        procs = cgroup_procs(cg)
        if procs is not None and not procs and own.is_ours(sandbox_id(cg)):
            problems.append(f"empty sandbox cgroup left: {cg}")
    ours = {dev for dev, bf in loop_backing_files().items() if bf.startswith(dd)}
    for ln in sorted(sandlot_mounts() - before["mounts"]):
        if (dd in ln or any(f" {dev} " in ln for dev in ours)) and not is_pool_mount(ln):
            problems.append(f"mount left: {ln}")
    for n in sorted(netns_names() - before["netns"]):
        m = re.search(SBID, n)
        if m and own.is_ours(m.group(0)):
            problems.append(f"network namespace left: /run/netns/{n}")
    problems += vm_leftovers(dd, me, own, before.get("vms", frozenset()))
    for pool, names in sorted(orphaned_prepared_cgroups(dd).items()):
        problems.append(f"prepared cgroups left in {pool} with no process keeping them: "
                        f"{' '.join(sorted(names))}")
    problems += spare_problems(dd)
    return problems
