"""`sandlot run`: exit statuses, output, arguments, environment, stdin,
--json and change tracking."""
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from conftest import wait_cleanup, REPO, SANDLOT, stop, read_line_with_deadline, wait_until
import hostscan

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends


# ---- exit statuses and output ---------------------------------------------

@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_status_is_the_commands(sandlot, code):
    r = sandlot.sh(f"exit {code}")
    assert r.rc == code, r
    assert r.out == b"" and r.err == b"", r


def test_true_and_false(sandlot):
    assert sandlot.run(["--", "true"]).rc == 0
    assert sandlot.run(["--", "false"]).rc == 1


@pytest.mark.backends(check=True)
def test_stdout_and_stderr_are_separate(sandlot):
    r = sandlot.sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3")
    assert r.rc == 3, r
    assert r.out == b"out1\nout2\n", r
    # Nothing of sandlot's own on stderr for a normal exit.
    assert r.err == b"err1\nerr2\n", r


def test_command_can_reopen_its_stdio(sandlot):
    # `echo x > /dev/stderr` reopens fd 2 through /proc/self/fd: the pipes
    # must belong to the sandbox user, as inherited pipes do elsewhere.
    r = sandlot.sh("echo err > /dev/stderr && echo out > /dev/stdout && cat /proc/self/fd/0 </dev/null")
    assert r.rc == 0, r
    assert r.out == b"out\n", r
    assert r.err == b"err\n", r


def test_argv_is_passed_verbatim_not_through_a_shell(sandlot):
    args = ["a b", "$HOME", "*", "'q'", "", "x;y"]
    r = sandlot.run(["--", "python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
    assert r.rc == 0, r
    import json
    assert json.loads(r.out) == args, r


@pytest.mark.backends(check=True)
def test_output_streams_live(sandlot):
    """A line printed before a sleep arrives while the command still runs."""
    p = sandlot.popen(["--", "sh", "-c", "echo first; sleep 4; echo second"])
    try:
        t0 = time.monotonic()
        line = read_line_with_deadline(p.stdout, t0 + sandlot.within(3))
        got_at = time.monotonic() - t0
        assert line == b"first\n", f"no live output within 3 s (got {line!r})"
        assert p.poll() is None, "the command had already finished: output was not live"
        rest, err = p.communicate(timeout=30 * sandlot.slack)
        assert p.returncode == 0, err
        assert rest == b"second\n"
        assert got_at < sandlot.within(3)
    finally:
        stop(p)


def test_stderr_streams_live(sandlot):
    p = sandlot.popen(["--", "sh", "-c", "echo oops >&2; sleep 4"])
    try:
        line = read_line_with_deadline(p.stderr, time.monotonic() + sandlot.within(3))
        assert line == b"oops\n"
        assert p.poll() is None
        p.communicate(timeout=30 * sandlot.slack)
        assert p.returncode == 0
    finally:
        stop(p)


def test_python_output_is_unbuffered(sandlot):
    p = sandlot.popen(["--", "python3", "-c", "import time; print('ready'); time.sleep(4)"])
    try:
        line = read_line_with_deadline(p.stdout, time.monotonic() + sandlot.within(3))
        assert line == b"ready\n", "python's output was held back (PYTHONUNBUFFERED?)"
        assert p.poll() is None
    finally:
        stop(p)


def test_background_child_holding_stdout_does_not_block_exit(sandlot):
    """The command exits while a background child still has its stdout open:
    sandlot returns at once (spec: output after the exit is discarded)."""
    r = sandlot.sh("sleep 30 & echo hi", timeout=25)
    assert r.rc == 0, r
    assert r.out == b"hi\n", r
    assert r.elapsed < sandlot.within(10), f"waited for the background child: {r.elapsed:.1f}s"


def test_large_stderr_and_stdout_interleaved(sandlot):
    r = sandlot.sh("head -c 3000000 /dev/zero | tr '\\0' a; head -c 2000000 /dev/zero | tr '\\0' b >&2")
    assert r.rc == 0
    assert r.out == b"a" * 3000000
    assert r.err == b"b" * 2000000


# ---- commands that cannot run ----------------------------------------------

def test_missing_command_is_127_with_a_clear_message(sandlot):
    r = sandlot.run(["--", "no-such-command-xyz"])
    assert r.rc == 127, r
    assert r.out == b""
    assert "no-such-command-xyz" in r.stderr, r
    assert re.search(r"not found|no such file", r.stderr, re.I), r


def test_missing_command_absolute_path_is_127(sandlot):
    r = sandlot.run(["--", "/usr/bin/no-such-command-xyz"])
    assert r.rc == 127, r
    assert "no-such-command-xyz" in r.stderr, r


def test_non_executable_file_is_126(sandlot, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    r = sandlot.run(["-u", script, "--", "./script.sh"], cwd=tmp_path)
    assert r.rc == 126, r
    assert r.out == b""
    assert "script.sh" in r.stderr, r


def test_directory_as_command_is_126(sandlot):
    r = sandlot.run(["--", "/etc"])
    assert r.rc == 126, r


def test_missing_command_in_json_mode(sandlot):
    r = sandlot.run(["--json", "--", "no-such-command-xyz"])
    assert r.rc == 127, r
    j = r.json()
    assert j["exit_code"] == 127
    assert "no-such-command-xyz" in j.get("error", ""), j


def test_bad_workdir(sandlot):
    r = sandlot.run(["-w", "/nonexistent/dir", "--", "sh", "-c", "echo ran"])
    assert r.rc != 0, r
    assert r.out == b"", "the command ran despite a bad working directory"
    assert "/nonexistent/dir" in r.stderr, r


def test_workdir_that_is_a_file(sandlot):
    r = sandlot.run(["-w", "/etc/passwd", "--", "sh", "-c", "echo ran"])
    assert r.rc != 0, r
    assert r.out == b""
    assert "/etc/passwd" in r.stderr, r


def test_workdir_absolute_and_relative(sandlot):
    r = sandlot.run(["-w", "/tmp", "--", "pwd"])
    assert (r.rc, r.out) == (0, b"/tmp\n"), r
    r = sandlot.run(["--", "pwd"])
    assert (r.rc, r.out) == (0, b"/home/user\n"), r
    r = sandlot.run(["-u", "/etc/hostname:sub/dir/f", "-w", "sub/dir", "--", "pwd"])
    assert (r.rc, r.out) == (0, b"/home/user/sub/dir\n"), r


# ---- bad arguments: exit 2, one line on stderr, nothing started -------------

BAD_ARGS = [
    (["--memory", "12Q"], "--memory"),
    (["--memory", "-5M"], "--memory"),
    (["--memory", "0"], "--memory"),
    (["--timeout", "abc"], "--timeout"),
    (["--timeout", "-1s"], "--timeout"),
    (["--cpus", "-1"], "--cpus"),
    (["--cpus", "0"], "--cpus"),
    (["--cpus", "two"], "--cpus"),
    (["--pids", "0"], "--pids"),
    (["--pids", "1"], "--pids"),
    (["--pids", "-3"], "--pids"),
    (["--pids", "ten"], "--pids"),
    (["--disk", "lots"], "--disk"),
    (["--nofile", "0"], "--nofile"),
    (["--output-limit", "1X"], "--output-limit"),
    (["--upload", "/nonexistent/file-xyz"], "/nonexistent/file-xyz"),
    (["--upload", ""], "--upload"),
    (["--download", "x:/nonexistent/dir/x"], "/nonexistent/dir"),
    (["--env", "NOEQUALS"], "--env"),
    (["--env", "=value"], "--env"),
    (["--no-such-option"], "--no-such-option"),
]


def assert_usage_error(r, needle, data_dir):
    assert r.rc == 2, r
    assert r.out == b"", r
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {r.stderr!r}"
    assert needle in lines[0], r
    assert r.elapsed < 5, r
    # Nothing was started: not even the data directory was created.
    assert not os.path.exists(data_dir), f"{data_dir} was created: a sandbox was started"


@pytest.mark.parametrize("args,needle", BAD_ARGS, ids=[" ".join(a) or "empty" for a, _ in BAD_ARGS])
def test_bad_option_values_exit_2(sandlot, tmp_path, args, needle):
    fresh = tmp_path / "fresh-data-dir"
    r = sandlot.run([*args, "--", "echo", "ran"], cwd=tmp_path, extra_env={"SANDLOT_DATA_DIR": str(fresh)})
    assert_usage_error(r, needle, fresh)


# Values that parse but that the library refuses: still bad arguments (exit 2
# per `sandlot run --help`), not a failure of sandlot itself (125).
SEMANTIC_BAD_ARGS = [
    (["--memory", "1M"], "memory"),
    (["--disk", "1M"], "disk"),
    (["--hostname", "bad name!"], "hostname"),
    (["--image", "no-such-image"], "no-such-image"),
]


@pytest.mark.parametrize("args,needle", SEMANTIC_BAD_ARGS,
                         ids=[" ".join(a) for a, _ in SEMANTIC_BAD_ARGS])
def test_out_of_range_option_values_exit_2(sandlot, tmp_path, args, needle):
    fresh = tmp_path / "fresh-data-dir"
    r = sandlot.run([*args, "--", "echo", "ran"], cwd=tmp_path,
                    extra_env={"SANDLOT_DATA_DIR": str(fresh)})
    assert r.rc == 2, f"a bad argument must exit 2 (see `sandlot run --help`): {r}"
    assert r.out == b""
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r
    assert needle in r.stderr, r


@pytest.mark.parametrize("opt", ["--memory", "-m", "--timeout", "--env", "--pids", "--upload"])
def test_option_missing_its_value(sandlot, tmp_path, opt):
    """`sandlot run --memory` (value forgotten): the message names the option
    as typed and says it needs a value."""
    fresh = tmp_path / "fresh"
    r = sandlot.run([opt], extra_env={"SANDLOT_DATA_DIR": str(fresh)})
    assert_usage_error(r, opt, fresh)
    assert "value" in r.stderr or "argument" in r.stderr, r


def test_no_command_is_usage_error(sandlot, tmp_path):
    fresh = tmp_path / "fresh"
    r = sandlot.run([], extra_env={"SANDLOT_DATA_DIR": str(fresh)})
    assert_usage_error(r, "no command", fresh)


def test_unknown_verb_and_bare_invocation(sandlot):
    r = sandlot.run([], raw_argv=[str(SANDLOT), "frobnicate"])
    assert r.rc == 2 and "frobnicate" in r.stderr, r
    r = sandlot.run([], raw_argv=[str(SANDLOT)])
    assert r.rc == 2 and "sandlot run" in r.stderr, r


def test_help_and_version(sandlot):
    r = sandlot.run(["--help"])
    assert r.rc == 0, r
    for word in ("SYNOPSIS", "--memory", "--timeout", "--json", "EXIT STATUS"):
        assert word in r.stdout
    r = sandlot.run([], raw_argv=[str(SANDLOT), "--version"])
    assert r.rc == 0 and r.stdout.startswith("sandlot "), r


def test_options_after_the_command_belong_to_the_command(sandlot):
    r = sandlot.run(["echo", "--memory", "12Q"])
    assert (r.rc, r.out) == (0, b"--memory 12Q\n"), r


def test_not_root_is_refused(sandlot, tmp_path):
    setpriv = "/usr/bin/setpriv"
    if not os.access(setpriv, os.X_OK):
        pytest.skip("setpriv (util-linux) is not installed")
    fresh = tmp_path / "d"
    argv = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups",
            str(SANDLOT), "run", "--", "true"]
    r = sandlot.run([], raw_argv=argv, extra_env={"SANDLOT_DATA_DIR": str(fresh)})
    assert r.rc == 125, r
    assert "root" in r.stderr, r
    assert not fresh.exists()


@pytest.mark.ns_only(reason="a vm sandbox's sandlot-init is in its initramfs, not SANDLOT_INIT")
def test_missing_init_binary_is_a_sandlot_failure(sandlot, tmp_path):
    r = sandlot.run(["--", "true"], extra_env={"SANDLOT_INIT": str(tmp_path / "nope")})
    assert r.rc == 125, r
    assert "nope" in r.stderr, r


# ---- environment -------------------------------------------------------------

def test_env_option_passes_variables(sandlot):
    r = sandlot.run(["-e", "FOO=bar baz", "--env", "EMPTY=", "-e", "EQ=a=b", "--",
                     "sh", "-c", 'printf "%s|%s|%s|%s\\n" "$FOO" "${EMPTY-unset}" "$EQ" "$HOME"'])
    assert (r.rc, r.out) == (0, b"bar baz||a=b|/home/user\n"), r


def test_env_option_overrides_defaults(sandlot):
    r = sandlot.run(["-e", "HOME=/tmp", "-e", "LANG=C", "--", "sh", "-c", 'echo "$HOME $LANG"'])
    assert (r.rc, r.out) == (0, b"/tmp C\n"), r


def test_host_environment_does_not_leak(sandlot):
    canary_key = "SANDLOT_TEST_CANARY_" + uuid.uuid4().hex[:8].upper()
    canary_val = "secret-" + uuid.uuid4().hex
    r = sandlot.run(["--", "env"], extra_env={canary_key: canary_val, "AWS_SECRET_ACCESS_KEY": canary_val})
    assert r.rc == 0, r
    assert canary_key not in r.stdout and canary_val not in r.stdout, r.stdout
    env = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)
    assert env.get("HOME") == "/home/user"
    assert env.get("USER") == "user"
    assert "/usr/bin" in env.get("PATH", "")
    # Only the sandbox's defaults: nothing from the host (PYENV_ROOT, SSH_*...).
    host_only = {"PYENV_ROOT", "SSH_AUTH_SOCK", "SANDLOT_DATA_DIR", "PWD_HOST", "TERM_PROGRAM"}
    assert not (host_only & set(env)), env


# ---- stdin ---------------------------------------------------------------------

def test_stdin_is_dev_null_by_default(sandlot):
    r = sandlot.run(["--", "sh", "-c", "cat; echo end; readlink /proc/self/fd/0"], input=b"should not arrive\n")
    assert r.rc == 0, r
    assert r.out == b"end\n/dev/null\n", r
    assert b"should not arrive" not in r.out


def test_interactive_passes_stdin(sandlot):
    data = b"hello\n" + os.urandom(600_000)  # well past the 256 KiB credit window
    r = sandlot.run(["-i", "--", "sh", "-c", "read a; echo got:$a; wc -c"], input=data)
    assert r.rc == 0, r
    assert r.out == b"got:hello\n%d\n" % (len(data) - 6), r


@pytest.mark.backends(check=True)
def test_interactive_binary_stdin_round_trip(sandlot):
    import hashlib
    data = os.urandom(5 * 1024 * 1024)
    r = sandlot.run(["--interactive", "--", "sha256sum"], input=data)
    assert r.rc == 0, r
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()


def test_interactive_command_that_ignores_stdin_does_not_hang(sandlot):
    r = sandlot.run(["-i", "--", "true"], input=os.urandom(8 * 1024 * 1024), timeout=30)
    assert r.rc == 0, r


def test_interactive_eof_reaches_the_command(sandlot):
    p = sandlot.popen(["-i", "--", "sh", "-c", "cat; echo eof-seen"], stdin=subprocess.PIPE)
    try:
        p.stdin.write(b"abc\n")
        p.stdin.flush()
        line = read_line_with_deadline(p.stdout, time.monotonic() + sandlot.within(5))
        assert line == b"abc\n", "stdin was not relayed live"
        p.stdin.close()
        p.stdin = None  # communicate() would flush the closed file
        out, err = p.communicate(timeout=10 * sandlot.slack)
        assert out == b"eof-seen\n", (out, err)
        assert p.returncode == 0
    finally:
        stop(p)


# ---- signals sent to sandlot itself ----------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_cli_is_forwarded_and_cleans_up(sandlot, sig):
    tag = f"77.{uuid.uuid4().int % 10**8}"
    p = sandlot.popen(["--", "sh", "-c", f"echo ready; exec sleep {tag}"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + sandlot.within(10)) == b"ready\n"
        if sandlot.isolation == "ns":
            assert wait_until(lambda: hostscan.find_pids(["sleep", tag]), 5)
        t0 = time.monotonic()
        p.send_signal(sig)
        p.communicate(timeout=15 * sandlot.slack)
        assert time.monotonic() - t0 < 5 * sandlot.slack
        assert p.returncode == 128 + sig, p.returncode
        assert wait_until(lambda: not hostscan.find_pids(["sleep", tag]), 5), \
            "the command survived"
    finally:
        stop(p)


def _start_and_find_init(sandlot, tag):
    """A run whose command leaves a setsid'd sleep behind; returns the
    Popen, the sandbox's init and its cgroup directories."""
    p = sandlot.popen(["--", "sh", "-c", f"echo ready; setsid sleep {tag} & exec sleep {tag}"])
    assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"ready\n"
    sleeps = wait_until(lambda: len(hostscan.find_pids(["sleep", tag])) == 2 and
                        hostscan.find_pids(["sleep", tag]), 5)
    assert sleeps, "the sandbox's sleeps never showed up on the host"
    inits = [hostscan.ppid(s) for s in hostscan.find_pids(["sleep", tag])]
    inits = [i for i in inits if hostscan.is_sandlot_init(i)]
    assert len(inits) == 1, inits
    init = inits[0]
    cg_text = hostscan.read(f"/proc/{init}/cgroup") or ""
    names = set(re.findall(r"/sandlot/(sb-[a-z0-9]+)", cg_text))
    cgroups = [c for c in hostscan.sandbox_cgroups() if os.path.basename(c) in names]
    assert cgroups, cg_text
    return p, init, cgroups


def _helpers_of(sid):
    """Live cleanup helpers of sandbox `sid` ("sandlot-cleanup SID" in ps)."""
    return [h for h in hostscan.helper_pids()
            if hostscan.cmdline(h) == [b"sandlot-cleanup", sid.encode()]]


def _remove_empty(cgroups):
    """Do not let a test's (reported) leak fail every later check."""
    for c in sorted(cgroups, key=len, reverse=True):
        if os.path.isdir(c) and not hostscan.cgroup_procs(c):
            try:
                os.rmdir(c)
            except OSError:
                pass


@pytest.mark.ns_only(reason="finds the sandbox's init among the host's processes; test_vm.py's test_killed_run_leaves_no_vm_behind is vm's")
def test_cli_killed_with_sigkill_leaves_nothing(sandlot):
    """A host process that dies (SIGKILL, no clean-up of its own) must not
    leave the sandbox running (init sees the connection close and kills
    everything) nor anything else: its cleanup helper sees it die and
    removes the cgroup at once, not at some later start-up."""
    tag = f"78.{uuid.uuid4().int % 10**8}"
    p, cgroups = None, []
    try:
        p, init, cgroups = _start_and_find_init(sandlot, tag)
        helpers = _helpers_of(os.path.basename(cgroups[0]))
        assert len(helpers) == 1, f"no cleanup helper next to the run: {helpers}"
        assert hostscan.ppid(helpers[0]) == p.pid
        workspace = sandlot.data_dir / "storage" / "mnt" / "ws" / os.path.basename(cgroups[0])
        assert workspace.is_dir(), workspace
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=5)
        wait_cleanup(sandlot.data_dir)
        assert not hostscan.find_pids(["sleep", tag]), "sandbox processes survived the death of sandlot"
        assert not hostscan.is_sandlot_init(init), "sandlot-init survived the death of sandlot"
        left = [c for c in cgroups if os.path.isdir(c)]
        assert not left, f"cgroups of the killed run were not removed: {left}"
        assert not workspace.exists(), "the workspace of the killed run was not removed"
        # its lock is released as it exits: give the exit a moment
        assert wait_until(lambda: not [h for h in helpers if hostscan.is_cleanup_helper(h)], 5), \
            "the helper did not exit"
    finally:
        if p:
            stop(p)
        _remove_empty(cgroups)


@pytest.mark.ns_only(reason="kills the sandbox's init and cleanup helper found on the host; test_vm.py's test_killed_run_leaves_no_vm_behind is vm's")
def test_leftovers_of_a_killed_run_and_helper_are_collected_by_the_next(sandlot):
    """If the cleanup helper dies too (it was SIGKILLed with the run), only
    the empty cgroup directories and the workspace can remain; the next
    start-up collects empty cgroups older than 30 s and workspaces nobody
    holds, at most once a minute."""
    tag = f"79.{uuid.uuid4().int % 10**8}"
    p, cgroups = None, []
    try:
        p, init, cgroups = _start_and_find_init(sandlot, tag)
        helpers = _helpers_of(os.path.basename(cgroups[0]))
        assert len(helpers) == 1, helpers
        ws = sandlot.data_dir / "storage" / "mnt" / "ws"
        workspaces = [ws / os.path.basename(c) for c in cgroups[:1]]
        assert all(w.is_dir() for w in workspaces), (workspaces, list(ws.iterdir()))
        os.kill(helpers[0], signal.SIGKILL)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=5)
        assert wait_until(lambda: not hostscan.find_pids(["sleep", tag]), 5), \
            "sandbox processes survived the death of sandlot"
        assert wait_until(lambda: not hostscan.is_sandlot_init(init), 5), \
            "sandlot-init survived the death of sandlot"
        # Only the (empty) cgroup directories and the workspace in the
        # storage pool remain: nothing could remove them.  The next start-up
        # collects empty cgroups older than 30 s and workspaces no process
        # holds, at most once a minute; make these and the last collection
        # look old instead of waiting.
        assert all(w.is_dir() for w in workspaces)
        for c in cgroups:
            # The kernel tears the pid namespace down asynchronously.
            assert wait_until(lambda: not hostscan.cgroup_procs(c), 5), f"processes left in {c}"
            assert os.path.isdir(c), "nothing should have removed it yet"
            past = time.time() - 120
            os.utime(c, (past, past))
        stamp = sandlot.data_dir / "gc.stamp"
        if stamp.exists():
            os.utime(stamp, (time.time() - 120, time.time() - 120))
        r = sandlot.run(["--", "true"])
        assert r.rc == 0, r
        wait_cleanup(sandlot.data_dir)
        left = [c for c in cgroups if os.path.isdir(c)]
        assert not left, f"cgroups of the killed run were never removed: {left}"
        left = [w for w in workspaces if w.exists()]
        assert not left, f"the workspace of the killed run was never removed: {left}"
    finally:
        if p:
            stop(p)
        _remove_empty(cgroups)


# ---- --json ---------------------------------------------------------------------

JSON_KEYS = {"sandbox_id", "exit_code", "signal", "timed_out", "oom_killed", "pids_limited",
             "truncated", "duration_ms", "stdout", "stderr", "changes"}


def test_json_fields(sandlot):
    r = sandlot.run(["--json", "--", "sh", "-c", "echo out; echo err >&2; sleep 0.2; exit 42"])
    assert r.rc == 42, r
    j = r.json()
    assert JSON_KEYS <= set(j), f"missing: {JSON_KEYS - set(j)}"
    assert re.fullmatch(r"sb-[a-z2-7]{26}", j["sandbox_id"]), j["sandbox_id"]
    assert j["exit_code"] == 42 and j["signal"] is None
    assert j["timed_out"] is False and j["oom_killed"] is False
    assert j["pids_limited"] is False and j["truncated"] is False
    assert j["stdout"] == "out\n" and j["stderr"] == "err\n"
    assert isinstance(j["duration_ms"], int) and 200 <= j["duration_ms"] < 10000 * sandlot.slack, j
    assert j["changes"] == []
    assert r.err == b"", "--json must not print to stderr for a normal run"


def test_json_sandbox_ids_are_unique(sandlot):
    ids = {sandlot.run(["--json", "--", "true"]).json()["sandbox_id"] for _ in range(3)}
    assert len(ids) == 3


def test_json_binary_output_is_valid_json(sandlot):
    r = sandlot.run(["--json", "--", "printf", "\\377\\376ok\\000z\\303\\251"])
    assert r.rc == 0, r
    j = r.json()
    assert j["stdout"].endswith("ok\x00zé") or j["stdout"].endswith("ok\ufffdzé"), j["stdout"]
    assert "\ufffd" in j["stdout"][:3]


def test_json_output_limit(sandlot):
    r = sandlot.run(["--json", "--output-limit", "10", "--", "sh", "-c", "echo 0123456789abcdef; echo short >&2"])
    j = r.json()
    assert j["stdout"] == "0123456789"
    assert j["stderr"] == "short\n"
    assert j["truncated"] is True


def test_json_changes(sandlot, tmp_path):
    for name in ("uploaded.txt", "existing.txt", "todelete.txt"):
        (tmp_path / name).write_text(name + "\n")
    script = ("echo new > created.txt; echo more >> existing.txt; rm todelete.txt; "
              "mkdir newdir; printf abc > newdir/f; echo t > /tmp/not-tracked")
    r = sandlot.run(["--json", "-u", "uploaded.txt", "-u", "existing.txt", "-u", "todelete.txt",
                     "--", "sh", "-c", script], cwd=tmp_path)
    assert r.rc == 0, r
    j = r.json()
    got = {(c["path"], c["kind"], c["type"]) for c in j["changes"]}
    assert got == {
        ("/home/user/created.txt", "created", "file"),
        ("/home/user/existing.txt", "modified", "file"),
        ("/home/user/todelete.txt", "deleted", "file"),
        ("/home/user/newdir", "created", "directory"),
        ("/home/user/newdir/f", "created", "file"),
    }, j["changes"]
    sizes = {c["path"]: c["size"] for c in j["changes"]}
    assert sizes["/home/user/created.txt"] == 4
    assert sizes["/home/user/newdir/f"] == 3
    assert sizes["/home/user/existing.txt"] == len("existing.txt\nmore\n")
    assert sizes["/home/user/todelete.txt"] == 0
    assert j["changes_truncated"] is False


LONG_PATHS = """
import os
p = '/home/user/' + '/'.join(('d%02d' % i) + 'x' * 247 for i in range(14))
os.makedirs(p)
for i in range({n}):
    open(os.path.join(p, ('%08d' % i) + 'y' * 190), 'w').close()
"""


def test_json_changes_of_many_long_paths_are_bounded(sandlot):
    """The attack of many 3.7 KB paths, scaled down (5,000 files: 18 MB of
    paths) in the smallest sandbox (64M; 128M for vm, its kernel's least):
    the changes stop at the report's 8 MiB limit with changes_truncated,
    the command's status and output are intact, and sandlot-init survived
    the scans (the sandbox answered to the end: before, its init was
    OOM-killed with the sandbox and its files)."""
    r = sandlot.run(["--json", "--memory", sandlot.small_memory, "--", "sh", "-c",
                     "python3 -c \"$0\" && echo done", LONG_PATHS.format(n=5000)], timeout=180)
    assert r.rc == 0, r
    j = r.json()
    assert j["exit_code"] == 0 and j["stdout"] == "done\n", {k: v for k, v in j.items() if k != "changes"}
    assert j["changes_truncated"] is True
    payload = sum(34 + len(c["path"].encode()) for c in j["changes"])
    assert 100 < len(j["changes"]) < 5000 and payload <= 8 << 20, (len(j["changes"]), payload)
    assert len(r.out) < 12 << 20, len(r.out)
    assert j["errors"] == [], j["errors"]


def test_json_changes_report_symlinks_without_following(sandlot):
    r = sandlot.run(["--json", "--", "ln", "-s", "/etc/passwd", "link"])
    j = r.json()
    assert [(c["path"], c["kind"], c["type"]) for c in j["changes"]] == \
        [("/home/user/link", "created", "symlink")]


def test_json_with_download_failure_reports_error(sandlot, tmp_path):
    r = sandlot.run(["--json", "-d", "missing.txt", "--", "true"], cwd=tmp_path)
    assert r.rc == 125, r
    j = r.json()
    assert j["exit_code"] == 0
    assert "missing.txt" in " ".join(j["errors"]), j
    assert "missing.txt" in r.stderr, r


# ---- other options ----------------------------------------------------------------

def test_hostname_option(sandlot):
    r = sandlot.run(["--", "hostname"])
    assert (r.rc, r.out) == (0, b"sandlot\n"), r
    r = sandlot.run(["--hostname", "agent-7", "--", "sh", "-c", "hostname; echo $HOSTNAME; grep agent-7 /etc/hosts"])
    assert r.rc == 0, r
    assert r.out.splitlines()[:2] == [b"agent-7", b"agent-7"], r


def test_nofile_option(sandlot):
    r = sandlot.sh("ulimit -n")
    assert (r.rc, r.out) == (0, b"1024\n"), r
    r = sandlot.sh("ulimit -n", "--nofile", "64")
    assert (r.rc, r.out) == (0, b"64\n"), r


def test_cpus_option_runs(sandlot):
    r = sandlot.sh("echo ok", "--cpus", "0.5")
    assert (r.rc, r.out) == (0, b"ok\n"), r


def test_parallel_runs_are_independent(sandlot, tmp_path):
    procs = [sandlot.popen(["--json", "--", "sh", "-c", f"echo {i} > mine; sleep 0.5; cat mine; ls"])
             for i in range(6)]
    ids = set()
    try:
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=sandlot.within(60))
            assert p.returncode == 0, (out, err)
            import json
            j = json.loads(out)
            assert j["stdout"] == f"{i}\nmine\n", j
            ids.add(j["sandbox_id"])
    finally:
        for p in procs:
            stop(p)
    assert len(ids) == 6


# ---- the static sandlot and its glibc twin ---------------------------------
# Where the build made `sandlot` a static musl program it also made
# `sandlot-glibc` beside it (src/cli/meson.build): the runs that load shared
# libraries (the egress engine's libnftables and c-ares) go there.

def static_cli_or_skip():
    """The static sandlot to test: the one under test, or where that is a
    glibc build (the sanitizer builds CI runs these tests with), this
    checkout's plain build/bin.  Returns the directory holding it and its
    twin."""
    for d in (SANDLOT.parent, REPO / "build" / "bin"):
        if (d / "sandlot-glibc").exists() and (d / "sandlot").exists():
            return d
    pytest.skip("no build here has a static sandlot (no musl-gcc, or -Dcli_libc=glibc): "
                "it has no twin to hand runs to")


@pytest.mark.ns_only(reason="a vm run is handed to sandlot-glibc whatever its network")
def test_static_sandlot_runs_plain_commands_alone_and_hands_network_runs_over(sandlot, tmp_path):
    """Without sandlot-glibc beside it, the static sandlot still runs a
    command with no network, and refuses one with a network policy with a
    clear error, not a half-made sandbox; with it, the policy run works and
    gets the code the static sandlot left unread on stdin."""
    built = static_cli_or_skip()
    twin = built / "sandlot-glibc"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sandlot").write_bytes((built / "sandlot").read_bytes())
    (bindir / "sandlot").chmod(0o755)
    alone = str(bindir / "sandlot")
    # (The build's init: the sandbox's root could not reach one in tmp_path.)
    init = {"SANDLOT_INIT": str(built / "sandlot-init")}
    r = sandlot.run([], extra_env=init, raw_argv=[alone, "run", "--", "sh", "-c", "echo plain"])
    assert (r.rc, r.out) == (0, b"plain\n"), r
    r = sandlot.run([], extra_env=init, raw_argv=[alone, "run", "--net", "open", "--", "true"])
    assert r.rc == 125, r
    assert b"sandlot-glibc" in r.err, r
    (bindir / "sandlot-glibc").write_bytes(twin.read_bytes())
    (bindir / "sandlot-glibc").chmod(0o755)
    r = sandlot.run([], input=b"print(6 * 7)\n", extra_env=init,
                    raw_argv=[alone, "run", "--net", "open", "--lang", "python", "-"])
    assert (r.rc, r.out) == (0, b"42\n"), r
