"""Looking at the host from outside the sandboxes: processes, cgroups, loop
devices, mounts.  Used to find a sandbox's processes and to check that
nothing is left behind.

Other people may run sandboxes on the same machine while the tests run, so
leftovers are attributed to this test session where possible: loop devices
and storage images by the session's data directory, processes by ancestry
(a sandbox init that is our descendant, or an orphan reparented to PID 1).
"""
import glob
import os

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


# Prepared cgroups (src/linux/cgroup.h): free ones have a marker file
# "<name>.<memory>.<pids>.<cpus>" in a directory here.
CGROUP_POOL_GLOB = "/run/sandlot/cgroup-pool/*/sb-*"


def prepared_cgroup_names():
    """Names of the free prepared cgroups (made ahead for the next
    sandboxes, not anybody's leftovers)."""
    return {os.path.basename(m).split(".")[0] for m in glob.glob(CGROUP_POOL_GLOB)}


def sandbox_cgroups():
    """Sandbox cgroup directories, without the free prepared ones."""
    out = set()
    for g in CGROUP_GLOBS:
        out.update(glob.glob(g))
    prepared = prepared_cgroup_names()
    return {c for c in out if os.path.basename(c) not in prepared}


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


def netns_names():
    try:
        return set(os.listdir("/run/netns"))
    except OSError:
        return set()


def snapshot():
    return {
        "inits": init_pids(),
        "helpers": helper_pids(),
        "cgroups": sandbox_cgroups(),
        "mounts": sandlot_mounts(),
        "netns": netns_names(),
    }


def leftovers(before, data_dir, me=None):
    """Problems (strings) found compared with snapshot `before`.

    - a loop device whose backing file is in this session's data dir;
    - a storage image left in <data_dir>/storage;
    - a sandlot-init that appeared since `before` and is ours (a
      descendant of this process) or an orphan (parent is PID 1);
    - a cleanup helper of a `sandlot run` still at work, the same way;
    - a sandbox cgroup that appeared since `before` and holds no process
      (a live sandbox of someone else always holds its init);
    - a new mount mentioning sandlot in our mount namespace;
    - a new named network namespace.
    """
    me = me or os.getpid()
    problems = []
    dd = str(data_dir)
    for dev, bf in sorted(loop_backing_files().items()):
        if bf.startswith(dd):
            problems.append(f"loop device {dev} still backed by {bf}")
    storage = os.path.join(dd, "storage")
    if os.path.isdir(storage):
        for name in sorted(os.listdir(storage)):
            problems.append(f"storage file left: {storage}/{name}")
    for p in sorted(init_pids() - before["inits"]):
        parent = ppid(p)
        if is_descendant(p, me) or parent in (0, 1):
            who = "orphaned (parent is PID 1)" if parent in (0, 1) else f"parent {parent}"
            problems.append(f"sandlot-init pid {p} still running, {who}, host uids {uids(p)}")
    for p in sorted(helper_pids() - before["helpers"]):
        parent = ppid(p)
        if is_descendant(p, me) or parent in (0, 1):
            problems.append(f"sandlot-cleanup pid {p} still running ({' '.join(map(bytes.decode, cmdline(p)))})")
    for cg in sorted(sandbox_cgroups() - before["cgroups"]):
        procs = cgroup_procs(cg)
        if procs is not None and not procs:
            problems.append(f"empty sandbox cgroup left: {cg}")
    for ln in sorted(sandlot_mounts() - before["mounts"]):
        problems.append(f"mount left: {ln}")
    for n in sorted(netns_names() - before["netns"]):
        problems.append(f"network namespace left: /run/netns/{n}")
    return problems
