"""Shared fixtures and helpers for the integration tests of `sandlot run`.

The tests drive the real binary (build/bin/sandlot, found from this file's
location) as a subprocess, the way a user or an agent would.  Every test
session gets its own temporary SANDLOT_DATA_DIR, so nothing here depends on
/var/lib/sandlot, and the session's leftovers (processes, cgroups, loop
devices, workspaces) can be told apart from those of anyone else using
the same machine.

Run with Debian's interpreter (the `python3` on PATH may be a pyenv shim),
as root, after `make`:

    /usr/bin/python3 -m pytest -q tests/integration

SANDLOT_TEST_BIN_DIR=DIR tests the sandlot and sandlot-init in DIR instead
of build/bin.
"""
import atexit
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostscan  # noqa: E402  (helpers that inspect the host's /proc, /sys)

REPO = Path(__file__).resolve().parents[2]
# build/bin of this checkout; SANDLOT_TEST_BIN_DIR points the tests at
# another build of sandlot and sandlot-init (an install, a sanitizer build).
BIN_DIR = Path(os.environ.get("SANDLOT_TEST_BIN_DIR") or REPO / "build" / "bin").resolve()
SANDLOT = BIN_DIR / "sandlot"
SANDLOT_INIT = BIN_DIR / "sandlot-init"


def sanitized(program):
    """Whether `program` was built with ASan, TSan or UBSan."""
    try:
        data = Path(program).read_bytes()
    except OSError:
        return False
    return any(m in data for m in (b"__asan_init", b"__tsan_init", b"__ubsan_handle"))


# The daemon as shipped, for the few tests that measure what a sanitizer
# changes (resident memory: ASan's quarantine and shadow alone are hundreds
# of MiB): SANDLOT_PLAIN_BIN_DIR, else BIN_DIR when it is not sanitized,
# else build/bin.
PLAIN_BIN_DIR = Path(os.environ.get("SANDLOT_PLAIN_BIN_DIR") or
                     (BIN_DIR if not sanitized(BIN_DIR / "sandlotd") else REPO / "build" / "bin")
                     ).resolve()

# Generous bound for one `sandlot run` that should finish quickly; a hang
# fails the test instead of blocking the suite.
DEFAULT_TIMEOUT = 60


# --------------------------------------------------------------------------
# sanitizer reports
#
# With a sanitized build (scripts/check.sh runs the suite with
# SANDLOT_TEST_BIN_DIR=build-asan/bin: sandlotd and the CLI under ASan+UBSan)
# every report goes to a file of its own in SANITIZER_DIR (log_path), and
# the first error ends the program (halt_on_error) with status 66.  After
# each test, a report that appeared during it fails the test and is printed
# in full: a daemon that died of one is named with the reason, and a leak
# found at exit is not lost in a log.  Harmless for plain builds: their
# programs never read these variables.
if os.environ.get("SANDLOT_SANITIZER_REPORTS"):
    SANITIZER_DIR = Path(os.environ["SANDLOT_SANITIZER_REPORTS"])  # check.sh's: it removes it
    SANITIZER_DIR.mkdir(parents=True, exist_ok=True)
else:
    SANITIZER_DIR = Path(tempfile.mkdtemp(prefix="sandlot-sanitizer-", dir="/var/tmp"))
    # Every report in it failed its test and was printed there.
    atexit.register(shutil.rmtree, SANITIZER_DIR, ignore_errors=True)
os.environ["SANDLOT_SANITIZER_REPORTS"] = str(SANITIZER_DIR)


def _sanitizer_options(var, options):
    have = os.environ.get(var, "")
    if "log_path=" not in have:
        have = ":".join(x for x in (f"log_path={SANITIZER_DIR}/report", options, have) if x)
    os.environ[var] = have


_sanitizer_options("ASAN_OPTIONS", "halt_on_error=1:exitcode=66:detect_leaks=1")
_sanitizer_options("UBSAN_OPTIONS", "halt_on_error=1:exitcode=66:print_stacktrace=1")
_sanitizer_options("TSAN_OPTIONS", "halt_on_error=1:exitcode=66")


def sanitizer_reports():
    """New sanitizer reports (files not yet marked .reported)."""
    return sorted(p for p in SANITIZER_DIR.iterdir() if not p.name.endswith(".reported"))


def sanitizer_report_of(pid):
    """The sanitizer report of process `pid` (reported or not), or ""."""
    for p in (SANITIZER_DIR / f"report.{pid}", SANITIZER_DIR / f"report.{pid}.reported"):
        try:
            return p.read_text(errors="replace")[:20000]
        except OSError:
            pass
    return ""


def take_sanitizer_reports():
    """The text of every new report; each is marked as reported."""
    out = []
    for p in sanitizer_reports():
        try:
            out.append(f"--- {p.name}\n" + p.read_text(errors="replace")[:20000])
        except OSError:
            continue
        p.rename(p.with_name(p.name + ".reported"))
    return out


class Result:
    """Outcome of one `sandlot run`: status, raw output, wall time."""

    def __init__(self, argv, rc, out, err, elapsed):
        self.argv = argv
        self.rc = rc
        self.out = out
        self.err = err
        self.elapsed = elapsed

    @property
    def stdout(self):
        return self.out.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self.err.decode("utf-8", "replace")

    def json(self):
        """The single JSON object printed by --json (fails the test if not)."""
        text = self.stdout
        lines = [ln for ln in text.splitlines() if ln.strip()]
        assert len(lines) == 1, (
            f"--json must print exactly one line of JSON, got {len(lines)}:\n"
            f"{text[:2000]}\nstderr: {self.stderr[:2000]}"
        )
        return json.loads(lines[0])

    def __repr__(self):
        return (
            f"<sandlot {' '.join(map(str, self.argv[1:]))!r} rc={self.rc} "
            f"{self.elapsed:.2f}s\nstdout={self.out[:1500]!r}\nstderr={self.err[:1500]!r}>"
        )


class Sandlot:
    """Runs the CLI with the session's environment.  With isolation "vm"
    (the `backends` marker) every `sandlot run` gets --isolation vm, and
    `vm_env` (the guest's files) is added to its environment."""

    def __init__(self, data_dir, isolation="ns", vm_env=None):
        self.data_dir = Path(data_dir)
        self.isolation = isolation
        env = dict(os.environ)
        # The tests must not depend on overrides from the caller's shell.
        for k in list(env):
            if k.startswith("SANDLOT_"):
                del env[k]
        env["SANDLOT_DATA_DIR"] = str(self.data_dir)
        env.update(vm_env or {})
        self.env = env

    # What a vm sandbox's boot may add to a run: seconds under TCG, and up
    # to the backend's own bound (300 s, vm-boot.c) on a loaded machine.
    VM_BOOT = 300

    @property
    def slack(self):
        """How many times longer than in an ns sandbox a command may take
        to react (a kill, an exit) in a vm sandbox: its kernel is
        emulated (TCG), and QEMU may get a small share of a CPU."""
        return 1 if self.isolation == "ns" else 8

    def within(self, seconds):
        """A bound on a whole run's wall time that is `seconds` with ns:
        for vm, scaled by slack, plus what the boot may take."""
        return seconds if self.isolation == "ns" else seconds * self.slack + self.VM_BOOT

    @property
    def disk_full_error(self):
        """What a write past --disk fails with: the storage pool's quota
        (EDQUOT) for ns, the workspace disk's ENOSPC for vm (as for ns
        with tmpfs storage): docs/vm.md."""
        return "Disk quota exceeded" if self.isolation == "ns" else "No space left on device"

    @property
    def small_memory(self):
        """The smallest --memory the tests use: 64M, or the 128M a vm
        sandbox needs at least (its kernel's)."""
        return "64M" if self.isolation == "ns" else "128M"

    def argv(self, args):
        iso = ["--isolation", "vm"] if self.isolation == "vm" else []
        return [str(SANDLOT), "run", *iso, *map(str, args)]

    def popen(self, args, *, cwd=None, env=None, extra_env=None, stdin=subprocess.DEVNULL,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, raw_argv=None):
        e = dict(env if env is not None else self.env)
        if extra_env:
            e.update(extra_env)
        argv = raw_argv if raw_argv is not None else self.argv(args)
        # Own session: a hung run can be killed with its whole group.
        return subprocess.Popen(argv, cwd=cwd, env=e, stdin=stdin, stdout=stdout,
                                stderr=stderr, start_new_session=True)

    def run(self, args, *, input=None, timeout=DEFAULT_TIMEOUT, cwd=None, env=None,
            extra_env=None, raw_argv=None):
        """Run `sandlot run ARGS...` to completion and return a Result."""
        if self.isolation == "vm":
            timeout += self.VM_BOOT
        t0 = time.monotonic()
        p = self.popen(args, cwd=cwd, env=env, extra_env=extra_env,
                       stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                       raw_argv=raw_argv)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            raise AssertionError(
                f"sandlot run did not finish within {timeout}s: {p.args}\n"
                f"stdout={out[:2000]!r}\nstderr={err[:2000]!r}")
        return Result(p.args, p.returncode, out, err, time.monotonic() - t0)

    def sh(self, script, *opts, **kw):
        """`sandlot run OPTS -- sh -c SCRIPT`."""
        return self.run([*opts, "--", "sh", "-c", script], **kw)

    def py(self, code, *opts, **kw):
        """`sandlot run OPTS -- python3 -c CODE` (the sandbox's python3)."""
        return self.run([*opts, "--", "python3", "-c", code], **kw)


def kill_group(p):
    """SIGKILL a Popen started with start_new_session, and its group."""
    if p.returncode is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(p, timeout=10):
    """End a `sandlot run` Popen the clean way: SIGTERM to sandlot (it kills
    the command and tears the sandbox down), SIGKILL to the group if that
    does not work in `timeout` seconds.  Reaps it."""
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
    try:
        p.communicate(timeout=timeout)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        kill_group(p)
        p.wait()


def read_line_with_deadline(stream, deadline):
    """Read one line from a binary pipe, giving up at `deadline` (monotonic).
    Returns the bytes read (possibly without a newline if the deadline hit)."""
    import select
    fd = stream.fileno()
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf


def wait_cleanup(data_dir, timeout=60):
    """Wait until the cleanup helper of every `sandlot run` on data_dir has
    finished: each holds a shared flock on <data_dir>/cleanup.lock from its
    sandbox's creation until the sandbox is gone (docs/cli.md), so an
    exclusive flock is granted exactly then.  No polling; fails the test if
    it takes longer than `timeout` seconds."""
    path = Path(data_dir) / "cleanup.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # no run with a helper has used this data dir yet
    got = threading.Event()

    def take():
        fcntl.flock(fd, fcntl.LOCK_EX)
        got.set()

    threading.Thread(target=take, daemon=True).start()
    if not got.wait(timeout):
        raise AssertionError(f"sandbox cleanup helpers still busy after {timeout}s "
                             f"(they hold {path})")
    os.close(fd)


def drain_spares(under):
    """`sandlot drain` for every data dir at or under `under` (or gone)
    that has spare network namespaces or cgroups of `sandlot run`
    (hostscan.spare_pools(), cgroup pools marked "spare"); returns {data
    dir: how many it removed}."""
    out = {}
    under = str(under).rstrip("/")
    dds = set(hostscan.spare_pools().values())
    dds |= {dd for pool, dd in hostscan.cgroup_pools().items()
            if hostscan.is_spare_pool(pool)}
    for dd in sorted(dds):
        if dd != under and not dd.startswith(under + "/") and os.path.exists(dd):
            continue
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
        env["SANDLOT_DATA_DIR"] = dd
        r = subprocess.run([str(SANDLOT), "drain"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, (dd, r.stdout, r.stderr)
        out[dd] = int(r.stdout)
    return out


def wait_until(cond, timeout, interval=0.05):
    """Poll cond() until it returns a truthy value or timeout passes; returns
    the last value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            return v
        time.sleep(interval)


# --------------------------------------------------------------------------
# session set-up

_SESSION = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "leftovers: the final no-leftovers check")
    config.addinivalue_line(
        "markers", "backends(check=False): a behaviour both backends must have: the test "
        "runs with isolation ns and vm (the `isolation` fixture); check=True puts its vm "
        "run in `make check`, the others run in `make check-vm`")
    config.addinivalue_line("markers", "ns_only(reason): in a module marked `backends`, a test "
                            "that runs with ns sandboxes only, and why (it watches what only "
                            "an ns sandbox shows the host, or needs more VMs than a test should)")
    config.addinivalue_line("markers", "vm(slow=False): a test of the vm backend alone (runs "
                            "in `make check` and `make check-vm`; slow=True: in `make check-vm` "
                            "only)")


# --------------------------------------------------------------------------
# both backends
#
# A test marked `backends` runs twice: [ns] and [vm].  The `sandlot`,
# `sandlotd` and `isolation` fixtures follow the parameter: `sandlot run
# --isolation vm`, and a sandlotd started with --default-isolation vm, on
# the build's guest (build/vm) with tests/integration/vm-root.recipe (python3
# and node, built once per session) as the guest's root.  Under TCG every vm
# sandbox costs a boot of a few seconds, so which vm runs happen is chosen
# by SANDLOT_TEST_VM:
#   check (default)  the vm runs of tests marked backends(check=True): a
#                    representative subset, about 2 minutes (`make check`);
#   all              every vm run, and every other test;
#   only             every vm run, the tests marked `vm` (test_vm.py,
#                    test_vm_guest.py, test_vm_lifecycle.py) and the final
#                    leftovers check, nothing else (`make check-vm`);
#   none             no vm run (the ThreadSanitizer run).
# (Tests marked vm(slow=True), minutes each, run with all and only.)
# The vm runs not chosen are deselected (pytest's summary counts them),
# never skipped; a machine without the guest's files skips them, saying
# which file is missing.
VM_TESTS = os.environ.get("SANDLOT_TEST_VM", "check")
if VM_TESTS not in ("check", "all", "only", "none"):
    raise SystemExit(f"SANDLOT_TEST_VM={VM_TESTS!r}: expected check, all, only or none")


def pytest_generate_tests(metafunc):
    if "isolation" not in metafunc.fixturenames:
        return
    if not metafunc.definition.get_closest_marker("backends"):
        return
    ns_only = metafunc.definition.get_closest_marker("ns_only")
    if ns_only:
        assert ns_only.kwargs.get("reason"), f"{metafunc.definition.nodeid}: ns_only needs a reason"
        return
    metafunc.parametrize("isolation", ["ns", "vm"], indirect=True, scope="module")


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        cs = getattr(item, "callspec", None)
        if cs is None or cs.params.get("isolation") != "vm":
            vm = item.get_closest_marker("vm")
            slow = vm and any(m.kwargs.get("slow") for m in item.iter_markers("vm"))
            last = item.get_closest_marker("leftovers")  # test_zz_leftovers: always
            if (VM_TESTS != "only" or vm or last) and not (slow and VM_TESTS == "check"):
                keep.append(item)
            else:
                drop.append(item)
            continue
        m = item.get_closest_marker("backends")
        if VM_TESTS in ("all", "only") or (VM_TESTS == "check" and m.kwargs.get("check")):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="module")
def isolation(request):
    """"ns", or "vm" for the vm run of a test marked `backends`."""
    iso = getattr(request, "param", "ns")
    if iso == "vm":
        from vmguest import missing
        why = missing()
        if why:
            pytest.skip(f"no vm sandbox on this machine: {why}")
    return iso


@pytest.fixture(scope="session")
def vm_guest_env(session_dirs):
    """The environment that puts vm sandboxes on this build's guest
    (SANDLOT_VM_DIR) with tests/integration/vm-root.recipe as their root
    (SANDLOT_VM_ROOT: python3 and node, which the tests use from the host
    image in ns sandboxes): built once per session in a data dir of its
    own (debootstrap + apt from /var/cache/sandlot: 20 to 40 s once the
    cache is warm)."""
    from vmguest import VM_DIR, recipe_root
    root = recipe_root(session_dirs["base"] / "vm-image", Path(__file__).parent / "vm-root.recipe")
    return {"SANDLOT_VM_DIR": str(VM_DIR), "SANDLOT_VM_ROOT": str(root)}


@pytest.fixture
def isolation_env(request, isolation):
    """vm_guest_env for the vm run of a test, {} for its ns run."""
    return request.getfixturevalue("vm_guest_env") if isolation == "vm" else {}


@pytest.fixture(scope="session")
def session_dirs():
    if os.geteuid() != 0:
        pytest.skip("sandlot run needs root (uid maps, cgroups, loop devices); "
                    "run the integration tests as root")
    missing = [str(p) for p in (SANDLOT, SANDLOT_INIT) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make` first)", pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="sandlot-it-", dir="/var/tmp"))
    data_dir = base / "data"
    _SESSION["data_dir"] = data_dir
    hostscan.owner()  # tells our sandboxes from other users' from now on
    _SESSION["baseline"] = hostscan.snapshot()
    yield {"base": base, "data_dir": data_dir}
    # Storage pools stay mounted after `sandlot run` (and after a killed
    # sandlotd): take them down before removing their files.
    hostscan.unmount_pools(base)
    hostscan.owner().stop()
    shutil.rmtree(base, ignore_errors=True)
    # Spare network namespaces of the session's data dirs (test_zz checks
    # them), and of data dirs since removed (tests' temporary ones).
    drain_spares(base)


@pytest.fixture
def sandlot(session_dirs, isolation, isolation_env):
    return Sandlot(session_dirs["data_dir"], isolation, isolation_env)


@pytest.fixture(autouse=True)
def no_sanitizer_report(request):
    """Set up before (so torn down after) every other fixture of the test,
    daemons included: a report written when a daemon stops counts."""
    yield
    reports = take_sanitizer_reports()
    if reports:
        pytest.fail("sanitizer report(s) during this test:\n" + "\n".join(reports),
                    pytrace=False)


@pytest.fixture(autouse=True)
def no_leak_per_test(request, session_dirs):
    """After each test: no sandlot-init, loop device, mount or workspace of
    this session's is left (storage pools themselves stay: hostscan.py),
    and no new empty sandbox cgroup lingers."""
    before = hostscan.snapshot()
    yield
    if request.node.get_closest_marker("leftovers"):
        return
    data_dir = session_dirs["data_dir"]
    try:
        # The runs' cleanup helpers finish their sandboxes' teardown after
        # the runs have returned: wait for them.
        wait_cleanup(data_dir)
        # Loop devices detach, and the daemons' sandboxes end,
        # asynchronously: give them a moment before calling anything a
        # leftover.
        wait_until(lambda: not hostscan.leftovers(before, data_dir), 5)
        problems = hostscan.leftovers(before, data_dir)
        assert not problems, "left behind by this test:\n  " + "\n  ".join(problems)
    finally:
        reclaim_daemon_dirs(data_dir / "daemon")


def reclaim_daemon_dirs(parent):
    """Remove the data dirs of the test's daemons (all stopped by now) under
    `parent`: each holds a storage pool whose space is reserved for real
    (1 GiB and more), so a whole session's worth would fill the disk."""
    if not parent.is_dir():
        return
    hostscan.unmount_pools(parent)
    for sub in parent.iterdir():
        shutil.rmtree(sub, ignore_errors=True)


def session_baseline():
    return _SESSION["baseline"]


# --------------------------------------------------------------------------
# sandlotd

@pytest.fixture
def plain_sandlotd(session_dirs, tmp_path_factory):
    """Like `sandlotd`, but always the daemon as shipped (PLAIN_BIN_DIR),
    never a sanitized build: for bounds on its resident memory."""
    from daemon import Daemon
    binary = PLAIN_BIN_DIR / "sandlotd"
    if not os.access(binary, os.X_OK) or sanitized(binary):
        pytest.fail(f"no plain (unsanitized) sandlotd at {binary}: run `make`, or set "
                    "SANDLOT_PLAIN_BIN_DIR", pytrace=False)
    base = tmp_path_factory.mktemp("sandlotd-plain", numbered=True)
    d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name,
               binary=binary).start()
    yield d
    rc = d.stop()
    assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"


@pytest.fixture
def sandlotd(session_dirs, tmp_path_factory, isolation, isolation_env):
    """A running sandlotd on a temporary socket and data dir, stopped (and
    checked to stop cleanly) after the test.  For the vm run of a test
    marked `backends`, its sandboxes are vm sandboxes by default."""
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd", numbered=True)
    extra = ["--default-isolation", "vm"] if isolation == "vm" else []
    d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name,
               extra_args=extra, env=isolation_env).start()
    d.isolation = isolation
    if isolation == "vm":
        fds = daemon_fd_baseline(d)
    yield d
    # The daemon stops even when the descriptor check fails: one left
    # running would keep its sandboxes (and their links in /run/sandlot/vm,
    # its prepared cgroups) past the removal of its data dir.
    try:
        if isolation == "vm" and d.proc is not None and d.proc.poll() is None:
            no_fd_left(d, fds)
    finally:
        rc = d.stop()
    assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"


def sandbox_host_pids(d):
    """The host processes that carry daemon `d`'s sandboxes, children of
    the daemon: an ns sandbox's sandlot-init, a vm sandbox's QEMU (whose
    guest, init included, dies with it).  Killing one is how a test makes
    a sandbox die under the daemon, for either backend."""
    mine = hostscan.init_pids() | set(hostscan.qemu_guests())
    return sorted(p for p in mine if hostscan.ppid(p) == d.proc.pid)


def vm_fds(d):
    """The descriptors of daemon `d` that a vm sandbox holds while it
    lives: pidfds (its QEMU), files under the daemon's vm/ directory (its
    lock, its console) and unix sockets without a name (its control
    connection is a socketpair; the daemon's listener and the HTTP
    connections it accepted carry the socket's path).  Not counted: what
    the daemon keeps for itself and refills on its own (the network
    namespaces it prepares, their listeners)."""
    unix = set()
    try:
        with open(f"/proc/{d.pid}/net/unix") as f:
            next(f)
            unix = {int(ln.split()[6]) for ln in f if len(ln.split()) == 7}
    except (OSError, StopIteration, ValueError):
        pass
    vm_dir = str(d.data_dir / "vm") + "/"
    out = {}
    for fd in os.listdir(f"/proc/{d.pid}/fd"):
        try:
            t = os.readlink(f"/proc/{d.pid}/fd/{fd}")
        except OSError:
            continue
        sock = t.startswith("socket:[") and int(t[8:-1]) in unix
        if t == "anon_inode:[pidfd]" or t.startswith(vm_dir) or sock:
            out[int(fd)] = t
    return out


def daemon_fd_baseline(d):
    """vm_fds() of daemon `d` with no sandbox, once what every sandbox
    shares is set up (an ns sandbox made and removed: milliseconds, where
    a vm one costs a boot)."""
    r = d.post("/v1/sandboxes", json_body={"isolation": "ns"})
    assert r.status == 201, r
    assert d.delete(f"/v1/sandboxes/{r.json()['id']}").status in (200, 204)
    return len(vm_fds(d))


def no_fd_left(d, baseline):
    """After a test of vm sandboxes: once every sandbox is deleted, daemon
    `d` holds no more of the descriptors a vm sandbox has (vm_fds()) than
    before the test: a pidfd, a lock, a console or a control socket left
    open is a leak."""
    for sb in d.get("/v1/sandboxes").json()["sandboxes"]:
        r = d.delete(f"/v1/sandboxes/{sb['id']}", timeout=120)
        assert r.status in (200, 204, 404, 410), r
    if not wait_until(lambda: len(vm_fds(d)) <= baseline, 10):
        fds = sorted(vm_fds(d).items())
        raise AssertionError(f"sandlotd holds {len(fds)} descriptors of the kinds a vm sandbox "
                             f"has after its vm sandboxes were deleted, {baseline} before the "
                             "test:\n" + "\n".join(f"  {fd} -> {t}" for fd, t in fds))
