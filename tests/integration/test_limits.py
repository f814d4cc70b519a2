"""Limits: timeouts, deaths by signal, memory, processes, disk, output."""
import subprocess
import time
import uuid

import pytest

from conftest import kill_group, stop, wait_until
import hostscan

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends


def unique_sleep():
    """A sleep argument no other process on the host is using."""
    return f"1000.{uuid.uuid4().int % 10**9}"


# ---- timeouts ---------------------------------------------------------------

def test_timeout_kills_and_exits_124(sandlot):
    r = sandlot.run(["--timeout", "500ms", "--", "sleep", "10"], timeout=30)
    assert r.rc == 124, r
    assert r.elapsed < sandlot.within(3), f"took {r.elapsed:.2f}s to enforce a 500 ms timeout"
    assert r.elapsed >= 0.45, r
    assert "timed out" in r.stderr, r


def test_timeout_in_json(sandlot):
    # (Under emulation the guest may need more than 500 ms to start sh.)
    t = 500 * sandlot.slack
    r = sandlot.run(["--json", "-t", f"{t}ms", "--", "sh", "-c", "echo before; sleep 10"], timeout=30)
    assert r.rc == 124, r
    j = r.json()
    assert j["timed_out"] is True
    assert j["stdout"] == "before\n"
    assert t - 50 <= j["duration_ms"] < t + 2500 * sandlot.slack, j


@pytest.mark.backends(check=True)
def test_timeout_with_setsid_and_double_fork(sandlot):
    """Children that left the process group (setsid, double fork) are killed
    too, and do not keep sandlot waiting."""
    a, b = unique_sleep(), unique_sleep()
    script = (f"setsid sleep {a} & "
              f"(setsid sh -c 'sleep {b} & exit 0' &) ; "
              f"sleep 100")
    r = sandlot.run(["--timeout", "500ms", "--", "sh", "-c", script], timeout=30)
    assert r.rc == 124, r
    assert r.elapsed < sandlot.within(3), f"took {r.elapsed:.2f}s"
    assert wait_until(lambda: not hostscan.find_pids(["sleep", a]) and
                      not hostscan.find_pids(["sleep", b]), 3), "escaped sleeps survived"


def test_timeout_with_sigterm_ignored(sandlot):
    r = sandlot.run(["--timeout", "500ms", "--", "sh", "-c", 'trap "" TERM; sleep 100'], timeout=30)
    assert r.rc == 124, r
    assert r.elapsed < sandlot.within(3), f"took {r.elapsed:.2f}s"


def test_timeout_while_output_floods(sandlot):
    """A timeout must fire even while the command saturates the output."""
    p = sandlot.popen(["-t", "1s", "--", "yes"], stdout=subprocess.DEVNULL)
    try:
        p.communicate(timeout=20)
        assert p.returncode == 124
    finally:
        stop(p)


def test_no_timeout_when_command_finishes_in_time(sandlot):
    r = sandlot.sh("sleep 0.2; echo done", "-t", "30s")
    assert (r.rc, r.out) == (0, b"done\n"), r


# ---- death by signal --------------------------------------------------------

@pytest.mark.parametrize("sig,code", [("9", 137), ("SEGV", 139), ("TERM", 143), ("ABRT", 134)])
def test_killed_by_signal(sandlot, sig, code):
    r = sandlot.sh(f"kill -{sig} $$")
    assert r.rc == code, r


def test_killed_by_signal_json(sandlot):
    r = sandlot.run(["--json", "--", "sh", "-c", "kill -9 $$"])
    assert r.rc == 137, r
    j = r.json()
    assert j["signal"] == 9 and j["exit_code"] is None
    assert j["oom_killed"] is False and j["timed_out"] is False


def test_real_segfault_is_139(sandlot):
    r = sandlot.py("import ctypes; ctypes.string_at(0)")
    assert r.rc == 139, r


def test_no_core_dump_left(sandlot):
    r = sandlot.sh("ulimit -c; sh -c 'kill -SEGV $$'; ls")
    assert r.rc == 0, r
    lines = r.stdout.split()
    assert lines[0] == "0", r
    assert not any(x.startswith("core") for x in lines[1:]), r


# ---- memory -----------------------------------------------------------------

TOUCH_300M = "b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"


@pytest.mark.backends(check=True)
def test_oom_is_killed_and_reported(sandlot):
    r = sandlot.run(["--memory", sandlot.small_memory, "--json", "--", "python3", "-c", TOUCH_300M], timeout=60)
    assert r.rc == 137, r
    j = r.json()
    assert j["oom_killed"] is True, j
    assert j["signal"] == 9, j
    assert "survived" not in j["stdout"]


def test_oom_message_on_stderr(sandlot):
    r = sandlot.run(["-m", sandlot.small_memory, "--", "python3", "-c", TOUCH_300M], timeout=60)
    assert r.rc == 137, r
    assert "memory" in r.stderr, r


def test_memory_below_limit_is_fine(sandlot):
    r = sandlot.py("b = bytearray(100 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok')",
                   "--memory", "256M", "--json")
    j = r.json()
    assert (r.rc, j["stdout"], j["oom_killed"]) == (0, "ok\n", False), j


def test_sandbox_survives_oom_of_one_process(sandlot):
    """Only the hog dies, not init: the shell around it goes on."""
    script = f"python3 -c \"{TOUCH_300M}\"; echo rc=$?; echo alive"
    r = sandlot.sh(script, "--memory", sandlot.small_memory, timeout=60)
    assert r.rc == 0, r
    assert "rc=137" in r.stdout and "alive" in r.stdout, r


# ---- processes ----------------------------------------------------------------

@pytest.mark.backends(check=True)
def test_fork_bomb_is_contained(sandlot):
    """A bounded fork loop far above --pids: forks are refused, the command
    ends, the host is unharmed, and --json says pids_limited."""
    script = "for i in $(seq 1 200); do (sleep 1) & done; wait; echo finished"
    r = sandlot.run(["--pids", "32", "--json", "--timeout", "60s", "--", "bash", "-c", script],
                    timeout=90)
    j = r.json()
    assert j["pids_limited"] is True, j
    assert j["timed_out"] is False, f"the command did not end by itself: {j}"
    assert r.elapsed < sandlot.within(45), f"took {r.elapsed:.1f}s"
    # The host can still start processes, and the next sandbox works.
    assert sandlot.run(["--", "true"]).rc == 0


def test_pids_limit_counts_whole_sandbox(sandlot):
    r = sandlot.py(
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('refused after', n, e.errno)\n",
        "--pids", "16", "--json")
    j = r.json()
    assert "refused after" in j["stdout"], j
    n = int(j["stdout"].split()[2])
    assert n <= 14, f"{n} children forked under --pids 16"
    assert j["pids_limited"] is True


# ---- disk ---------------------------------------------------------------------

# A write past --disk fails with EDQUOT ("Disk quota exceeded") in an ns
# sandbox: the quota of the workspace's directory in the storage pool (btrfs
# quota groups; see src/linux/storage.h for why not ENOSPC).  tmpfs storage
# and a vm sandbox's disk say ENOSPC (Sandlot.disk_full_error).


@pytest.mark.backends(check=True)
def test_disk_quota(sandlot):
    script = ("dd if=/dev/zero of=big bs=1M count=64; echo dd=$?; "
              "rm -f big; echo ok > small && cat small")
    r = sandlot.sh(script, "--disk", "32M", timeout=60)
    assert r.rc == 0, r
    assert sandlot.disk_full_error in r.stderr, r
    assert "dd=1" in r.stdout, r
    assert r.stdout.endswith("ok\n"), "the workspace is unusable after filling it"


def test_tmp_shares_the_disk_quota(sandlot):
    script = ("dd if=/dev/zero of=/tmp/a bs=1M count=20 2>/dev/null && echo first-ok; "
              "dd if=/dev/zero of=b bs=1M count=20; echo dd=$?")
    r = sandlot.sh(script, "--disk", "32M", timeout=60)
    assert "first-ok" in r.stdout, r
    assert sandlot.disk_full_error in r.stderr, r
    assert "dd=1" in r.stdout, r


def test_disk_quota_with_tmpfs_storage(sandlot):
    """The SANDLOT_STORAGE=tmpfs fallback enforces the same quota, with the
    same error (ENOSPC, not a SIGXFSZ kill)."""
    script = "dd if=/dev/zero of=big bs=1M count=64; echo dd=$?"
    r = sandlot.sh(script, "--disk", "32M", "--memory", "256M",
                   extra_env={"SANDLOT_STORAGE": "tmpfs"}, timeout=60)
    assert r.rc == 0, r
    assert "No space left on device" in r.stderr, r
    assert "dd=1" in r.stdout, r


def test_disk_default_is_1g(sandlot):
    # fallocate reserves at once: 1000M fits the default quota, 100M more
    # does not (and neither file is ever written).
    r = sandlot.sh("fallocate -l 1000M a && echo first-ok; fallocate -l 100M b; echo rc=$?")
    assert "first-ok" in r.stdout and "rc=1" in r.stdout, r
    assert sandlot.disk_full_error in r.stderr, r


def test_upload_bigger_than_disk_fails_loudly(sandlot, tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(40 << 20)
    r = sandlot.run(["--disk", "16M", "-u", big, "--", "sh", "-c", "echo ran; ls -la"], cwd=tmp_path,
                    timeout=60)
    assert r.rc == 125, r
    assert "big.bin" in r.stderr and sandlot.disk_full_error in r.stderr, r
    assert b"ran" not in r.out, "the command ran after a failed upload"


# ---- output --------------------------------------------------------------------

FLOOD = 50 * 1024 * 1024


def run_sampling_hwm(p, timeout):
    """Wait for Popen p, draining its output, and sample its VmHWM (peak
    RSS of its own address space since exec; ru_maxrss would also count the
    forked copy of this test runner) until it exits.  Returns
    (stdout, stderr, peak KiB)."""
    import threading
    got = {}

    def drain(name, stream):
        got[name] = stream.read()

    threads = [threading.Thread(target=drain, args=(n, s)) for n, s in
               (("out", p.stdout), ("err", p.stderr))]
    for t in threads:
        t.start()
    peak = 0
    deadline = time.monotonic() + timeout
    while p.poll() is None:
        st = hostscan.status(p.pid)
        if st.get("VmHWM"):
            peak = max(peak, int(st["VmHWM"].split()[0]))
        if time.monotonic() > deadline:
            kill_group(p)
            raise AssertionError("sandlot run did not finish in time")
        time.sleep(0.005)
    for t in threads:
        t.join()
    return got["out"], got["err"], peak


def test_output_flood_json_is_capped(sandlot):
    p = sandlot.popen(["--json", "--", "sh", "-c", f"yes | head -c {FLOOD}"])
    t0 = time.monotonic()
    out, err, peak_kib = run_sampling_hwm(p, 60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, err
    import json
    j = json.loads(out)
    assert j["truncated"] is True
    assert len(j["stdout"]) == 1 << 20, len(j["stdout"])
    assert j["stdout"] == "y\n" * (1 << 19)
    assert elapsed < sandlot.within(20), f"took {elapsed:.1f}s"
    # Capped output is never held in memory: the CLI stays small.
    assert 0 < peak_kib < 32 * 1024, f"sandlot's peak RSS was {peak_kib} KiB"


def test_output_flood_streams_intact(sandlot):
    r = sandlot.sh(f"yes | head -c {FLOOD}", timeout=120)
    assert r.rc == 0, r.err
    assert len(r.out) == FLOOD, len(r.out)
    assert r.out == b"y\n" * (FLOOD // 2)


def test_binary_output_streams_intact(sandlot):
    import hashlib
    r = sandlot.sh("head -c 20000000 /dev/urandom > /tmp/x; sha256sum < /tmp/x >&2; cat /tmp/x",
                   timeout=60)
    assert r.rc == 0, r.err
    assert hashlib.sha256(r.out).hexdigest() == r.stderr.split()[0]
    assert len(r.out) == 20000000


def test_slow_reader_gets_everything(sandlot):
    """Back-pressure: a reader that is slower than the command loses nothing."""
    p = sandlot.popen(["--", "sh", "-c", "head -c 4000000 /dev/zero | tr '\\0' z"])
    got = 0
    try:
        while True:
            chunk = p.stdout.read(65536)
            if not chunk:
                break
            assert chunk == b"z" * len(chunk)
            got += len(chunk)
            if got < 1_000_000:
                time.sleep(0.01)
        p.wait(timeout=30)
    finally:
        stop(p)
    assert got == 4000000
    assert p.returncode == 0
