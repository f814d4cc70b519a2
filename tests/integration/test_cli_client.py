"""The CLI verbs that talk to sandlotd: create, exec, cp, ls, rm, logs,
changes — driven as a user would, against a real daemon (the `sandlotd`
fixture) on a temporary socket, and over TCP with a bearer token."""
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import SANDLOT, kill_group, read_line_with_deadline, sandbox_host_pids, wait_until

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends

ID_RE = re.compile(r"^sb-[a-z2-7]{26}$")
TIMEOUT = 60


class Result:
    def __init__(self, argv, rc, out, err):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err

    @property
    def stdout(self):
        return self.out.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self.err.decode("utf-8", "replace")

    def json(self):
        lines = [ln for ln in self.stdout.splitlines() if ln.strip()]
        assert len(lines) == 1, self
        return json.loads(lines[0])

    def __repr__(self):
        return (f"<sandlot {' '.join(map(str, self.argv[1:]))!r} rc={self.rc}\n"
                f"stdout={self.out[:1500]!r}\nstderr={self.err[:1500]!r}>")


class Cli:
    """Runs build/bin/sandlot VERB ... against one daemon."""

    def __init__(self, host, extra_env=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
        if host is not None:
            env["SANDLOT_HOST"] = host
        env.update(extra_env or {})
        self.env = env
        self.created = []

    def argv(self, args):
        return [str(SANDLOT), *map(str, args)]

    def popen(self, args, stdin=subprocess.DEVNULL, env=None):
        return subprocess.Popen(self.argv(args), env=env or self.env, stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)

    def __call__(self, *args, input=None, timeout=TIMEOUT, env=None, cwd=None):
        p = subprocess.Popen(self.argv(args), env=env or self.env, cwd=cwd,
                             stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            raise AssertionError(f"sandlot {args} did not finish in {timeout}s: "
                                 f"{out[:2000]!r} {err[:2000]!r}")
        return Result(p.args, p.returncode, out, err)

    def create(self, *opts):
        r = self("create", *opts)
        assert r.rc == 0, r
        sid = r.stdout.strip()
        assert ID_RE.match(sid), r
        self.created.append(sid)
        return sid

    def cleanup(self):
        if self.created:
            self("rm", *self.created)


@pytest.fixture
def cli(sandlotd):
    c = Cli(f"unix:{sandlotd.sock}")
    yield c
    c.cleanup()


@pytest.fixture
def sb(cli):
    """A running sandbox, removed after the test."""
    return cli.create()


def sh(cli, sid, script, *opts, **kw):
    return cli("exec", *opts, sid, "--", "sh", "-c", script, **kw)


# ---- create, ls, rm --------------------------------------------------------

def test_create_prints_an_id_that_ls_lists(cli, sandlotd):
    sid = cli.create("--label", "owner=alice", "--label", "job=7")
    r = cli("ls")
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATE", "CREATED", "EXPIRES", "LABELS"], r
    row = [ln for ln in lines if ln.startswith(sid)]
    assert len(row) == 1, r
    assert "running" in row[0] and "owner=alice" in row[0] and "job=7" in row[0], r
    # the same through the API
    assert sandlotd.get(f"/v1/sandboxes/{sid}").json()["metadata"] == {"owner": "alice", "job": "7"}


def test_ls_filters_by_label_and_has_quiet_and_json(cli):
    a = cli.create("--label", "team=red")
    b = cli.create("--label", "team=blue", "--label", "tier=gold")
    r = cli("ls", "-q", "--label", "team=red")
    assert r.rc == 0, r
    assert r.stdout.split() == [a], r
    r = cli("ls", "-q", "--label", "team=blue", "--label", "tier=gold")
    assert r.stdout.split() == [b], r
    r = cli("ls", "-q", "--label", "team=green")
    assert r.rc == 0 and r.stdout == "", r
    r = cli("ls", "--json")
    ids = {s["id"] for s in r.json()["sandboxes"]}
    assert {a, b} <= ids, r


def test_ls_of_a_directory_shows_size_and_bytes_on_disk(cli, sb):
    """sandlot ls SANDBOX:PATH lists a directory in the sandbox with each
    entry's size and the bytes it takes (a sparse file's are far fewer)."""
    r = sh(cli, sb, "mkdir -p out/sub && truncate -s 500M out/sparse"
                    " && head -c 5000 /dev/urandom > out/data && ln -s data out/link")
    assert r.rc == 0, r
    r = cli("ls", f"{sb}:out")
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["TYPE", "MODE", "SIZE", "ON-DISK", "MODIFIED", "NAME"], r
    rows = {ln.split()[-1]: ln.split() for ln in lines[1:]}
    assert sorted(rows) == ["data", "link", "sparse", "sub"], r
    assert rows["sparse"][0] == "file" and rows["sparse"][2] == str(500 << 20), r
    assert int(rows["sparse"][3]) < 65536, r
    assert rows["data"][2] == "5000" and int(rows["data"][3]) >= 5000, r
    assert rows["sub"][0] == "dir" and rows["link"][0] == "link", r
    assert cli("ls", "-q", f"{sb}:out").stdout.split() == ["data", "link", "sparse", "sub"]
    j = cli("ls", "--json", f"{sb}:/home/user/out").json()
    assert j["path"] == "/home/user/out"
    assert {e["name"]: e["allocated"] for e in j["entries"]}["sparse"] < 65536
    r = cli("ls", f"{sb}:missing")
    assert r.rc == 1 and "missing" in r.stderr, r
    r = cli("ls", "--all", f"{sb}:out")
    assert r.rc == 2, r


def test_create_json_and_options(cli, sandlotd):
    r = cli("create", "--json", "--memory", "256M", "--pids", "64", "--ttl", "1h",
            "--idle-timeout", "10m", "--env", "GREETING=hello there", "--disk", "64M")
    assert r.rc == 0, r
    obj = r.json()
    cli.created.append(obj["id"])
    assert ID_RE.match(obj["id"]) and obj["state"] == "running", obj
    assert obj["expires_at"], obj
    assert obj["ttl_seconds"] == 3600 and obj["idle_timeout_seconds"] == 600, obj
    # the sandbox's environment reaches its execs
    r = sh(cli, obj["id"], 'echo "$GREETING"')
    assert r.rc == 0 and r.out == b"hello there\n", r
    r = cli("ls")
    row = [ln for ln in r.stdout.splitlines() if ln.startswith(obj["id"])][0]
    assert re.search(r"\bin (59m|1h)\b", row), r


def test_rm_removes_and_reports_missing_ones(cli, sandlotd):
    a = cli.create()
    b = cli.create()
    r = cli("rm", a)
    assert r.rc == 0 and r.stdout.split() == [a], r
    assert sandlotd.get(f"/v1/sandboxes/{a}").json()["state"] == "deleted"
    # an ended one, a missing one and a live one: the live one still goes
    missing = "sb-" + "a" * 26
    r = cli("rm", a, missing, b)
    assert r.rc == 1, r
    assert r.stdout.split() == [b], r
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r
    assert lines[0].startswith("sandlot rm: ") and a in lines[0], r
    assert lines[1].startswith("sandlot rm: ") and missing in lines[1], r
    cli.created.clear()
    # ls --all shows ended sandboxes with their state
    r = cli("ls", "--all")
    row = [ln for ln in r.stdout.splitlines() if ln.startswith(a)]
    assert row and "deleted" in row[0], r
    assert a not in cli("ls").stdout


# ---- exec --------------------------------------------------------------------

@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exec_exits_with_the_commands_status(cli, sb, code):
    r = sh(cli, sb, f"exit {code}")
    assert r.rc == code, r
    assert r.out == b"" and r.err == b"", r


def test_exec_stdout_and_stderr_are_separate(cli, sb):
    r = sh(cli, sb, "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3")
    assert r.rc == 3, r
    assert r.out == b"out1\nout2\n", r
    assert r.err == b"err1\nerr2\n", r


def test_exec_argv_is_verbatim_and_dashdash_optional(cli, sb):
    args = ["a b", "$HOME", "*", "'q'", "", "x;y", "--", "-e"]
    code = "import sys, json; print(json.dumps(sys.argv[1:]))"
    r = cli("exec", sb, "--", "python3", "-c", code, *args)
    assert r.rc == 0, r
    assert json.loads(r.out) == args, r
    r = cli("exec", sb, "echo", "no", "dashes")
    assert r.rc == 0 and r.out == b"no dashes\n", r


def test_exec_output_is_binary_safe(cli, sb):
    r = cli("exec", sb, "--", "python3", "-c",
            "import sys; sys.stdout.buffer.write(bytes(range(256)) * 1000); "
            "sys.stderr.buffer.write(b'\\xff\\xfe\\x00err')")
    assert r.rc == 0, r
    assert r.out == bytes(range(256)) * 1000
    assert r.err == b"\xff\xfe\x00err"


def test_exec_large_output(cli, sb):
    r = sh(cli, sb, "head -c 20000000 /dev/zero | tr '\\0' x")
    assert r.rc == 0, r
    assert len(r.out) == 20_000_000 and r.out.count(b"x") == 20_000_000


def test_exec_output_is_live(cli, sb):
    p = cli.popen(["exec", sb, "--", "sh", "-c", "echo first; echo warn >&2; sleep 4; echo second"])
    try:
        t0 = time.monotonic()
        line = read_line_with_deadline(p.stdout, t0 + 3)
        assert line == b"first\n", f"no live output within 3 s (got {line!r})"
        err = read_line_with_deadline(p.stderr, t0 + 3)
        assert err == b"warn\n"
        assert p.poll() is None, "the command had already finished: output was not live"
        rest, _ = p.communicate(timeout=30)
        assert p.returncode == 0
        assert rest == b"second\n"
    finally:
        kill_group(p)
        p.communicate()


def test_exec_env_workdir(cli, sb):
    r = cli("exec", "-e", "A=1", "--env", "B=two words", "-w", "/tmp", sb, "--",
            "sh", "-c", 'echo "$A|$B|$(pwd)"')
    assert r.rc == 0, r
    assert r.out == b"1|two words|/tmp\n", r
    sh(cli, sb, "mkdir -p proj/sub")
    r = cli("exec", "--workdir", "proj/sub", sb, "--", "pwd")
    assert r.out == b"/home/user/proj/sub\n", r


def test_exec_state_persists_between_execs(cli, sb):
    assert sh(cli, sb, "echo 41 > n.txt").rc == 0
    r = sh(cli, sb, "echo $(( $(cat n.txt) + 1 ))")
    assert r.out == b"42\n", r


def test_exec_timeout_is_124(cli, sb):
    t0 = time.monotonic()
    r = cli("exec", "--timeout", "1s", sb, "--", "sleep", "30")
    assert r.rc == 124, r
    assert "timed out" in r.stderr, r
    assert time.monotonic() - t0 < 15


def test_exec_signal_is_128_plus_n(cli, sb):
    r = sh(cli, sb, "kill -TERM $$")
    assert r.rc == 128 + signal.SIGTERM, r
    r = sh(cli, sb, "kill -KILL $$")
    assert r.rc == 128 + signal.SIGKILL, r


def test_exec_not_found_is_127_with_message(cli, sb):
    r = cli("exec", sb, "--", "no-such-program-xyz")
    assert r.rc == 127, r
    assert r.stderr.startswith("sandlot exec: ") and "no-such-program-xyz" in r.stderr, r
    sh(cli, sb, "printf 'x' > notexec; chmod 644 notexec")
    r = cli("exec", sb, "--", "./notexec")
    assert r.rc == 126, r
    assert r.stderr.startswith("sandlot exec: "), r


def test_exec_unknown_sandbox_is_125(cli):
    r = cli("exec", "sb-" + "b" * 26, "--", "true")
    assert r.rc == 125, r
    assert r.stderr.startswith("sandlot exec: ") and len(r.stderr.splitlines()) == 1, r


def test_exec_in_ended_sandbox_is_125(cli):
    sid = cli.create()
    assert cli("rm", sid).rc == 0
    cli.created.remove(sid)
    r = cli("exec", sid, "--", "true")
    assert r.rc == 125, r
    assert r.stderr.startswith("sandlot exec: "), r


def _sandbox_has(cli, sid, name):
    r = sh(cli, sid, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    return name in r.stdout


def test_exec_interrupt_kills_the_command(cli, sb):
    p = cli.popen(["exec", sb, "--", "sh", "-c", "echo started; exec sleep 7777"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"started\n"
        assert _sandbox_has(cli, sb, "sleep 7777")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=10)
        assert p.returncode == 128 + signal.SIGINT
    finally:
        kill_group(p)
    assert wait_until(lambda: not _sandbox_has(cli, sb, "sleep 7777"), 10), \
        "the command survived the client's Ctrl-C"


def test_exec_interactive_interrupt_kills_the_command(cli, sb):
    p = cli.popen(["exec", "-i", sb, "--", "sh", "-c", "echo started; exec sleep 6666"],
                  stdin=subprocess.PIPE)
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 10) == b"started\n"
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
        assert p.returncode == 128 + signal.SIGTERM
    finally:
        kill_group(p)
    assert wait_until(lambda: not _sandbox_has(cli, sb, "sleep 6666"), 10)


def test_exec_closed_stdout_stops_the_command(cli, sb):
    p = subprocess.Popen(f"{SANDLOT} exec {sb} -- yes | head -n 2", shell=True, env=cli.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=30)
    assert out == b"y\ny\n", err
    assert wait_until(lambda: not _sandbox_has(cli, sb, "yes"), 10)


@pytest.mark.backends(check=True)
def test_exec_interactive_stdin(cli, sb):
    r = cli("exec", "-i", sb, "--", "sh", "-c", "tr a-z A-Z; echo done >&2; exit 5",
            input=b"hello\nworld\n")
    assert r.rc == 5, r
    assert r.out == b"HELLO\nWORLD\n", r
    assert r.err == b"done\n", r


def test_exec_interactive_large_binary_stdin(cli, sb):
    data = os.urandom(3 << 20)
    r = cli("exec", "-i", sb, "--", "sha256sum", input=data)
    assert r.rc == 0, r
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()


def test_exec_without_i_has_empty_stdin(cli, sb):
    r = cli("exec", sb, "--", "cat", input=b"not passed")
    assert r.rc == 0 and r.out == b"", r


# ---- cp ---------------------------------------------------------------------

def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def test_cp_file_both_ways_sha256(cli, sb, tmp_path):
    src = tmp_path / "data.bin"
    src.write_bytes(os.urandom(20 << 20) + b"\0\xff end")
    r = cli("cp", src, f"{sb}:in/data.bin")
    assert r.rc == 0 and r.out == b"" and r.err == b"", r
    r = cli("exec", sb, "--", "sha256sum", "in/data.bin")
    assert r.stdout.split()[0] == sha(src), r
    r = cli("cp", f"{sb}:/home/user/in/data.bin", tmp_path / "back.bin")
    assert r.rc == 0, r
    assert sha(tmp_path / "back.bin") == sha(src)
    assert not [p for p in os.listdir(tmp_path) if ".sandlot-" in p], "temporary file left"


def test_cp_into_directories_keeps_names_and_exec_bit(cli, sb, tmp_path):
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    sh(cli, sb, "mkdir -p bin")
    assert cli("cp", tool, f"{sb}:bin").rc == 0
    r = cli("exec", sb, "--", "bin/tool.sh")
    assert r.rc == 0 and r.out == b"tool ran\n", r
    assert cli("cp", tool, f"{sb}:newdir/").rc == 0
    assert cli("exec", sb, "--", "test", "-x", "newdir/tool.sh").rc == 0
    out = tmp_path / "out"
    out.mkdir()
    r = cli("cp", f"{sb}:bin/tool.sh", out)
    assert r.rc == 0, r
    assert (out / "tool.sh").read_text() == tool.read_text()
    assert os.stat(out / "tool.sh").st_mode & 0o100


def test_cp_directory_tree_both_ways(cli, sb, tmp_path):
    src = tmp_path / "proj"
    (src / "a" / "b").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "top.txt").write_text("top\n")
    (src / "a" / "mid.bin").write_bytes(os.urandom(300_000))
    (src / "a" / "b" / "deep.txt").write_text("deep\n")
    (src / "a" / "b" / "run.sh").write_text("#!/bin/sh\n")
    (src / "a" / "b" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("/etc/passwd")
    r = cli("cp", src, f"{sb}:work")
    assert r.rc == 0, r
    assert "skipping" in r.stderr and "link" in r.stderr, r
    r = sh(cli, sb, "cd work && find . | sort")
    assert r.stdout.split() == [".", "./a", "./a/b", "./a/b/deep.txt", "./a/b/run.sh",
                                "./a/mid.bin", "./empty", "./top.txt"], r
    # into an existing directory: under the source's name
    r = cli("cp", src, f"{sb}:work")
    assert r.rc == 0, r
    assert cli("exec", sb, "--", "test", "-f", "work/proj/top.txt").rc == 0
    # and back out, to a new name, then into an existing directory
    back = tmp_path / "back"
    r = cli("cp", f"{sb}:work", back)
    assert r.rc == 0, r
    assert (back / "top.txt").read_text() == "top\n"
    assert (back / "a" / "b" / "deep.txt").read_text() == "deep\n"
    assert sha(back / "a" / "mid.bin") == sha(src / "a" / "mid.bin")
    assert (back / "empty").is_dir()
    assert os.stat(back / "a" / "b" / "run.sh").st_mode & 0o100
    assert (back / "proj" / "top.txt").exists()
    dest = tmp_path / "dest"
    dest.mkdir()
    assert cli("cp", f"{sb}:work/a", dest).rc == 0
    assert (dest / "a" / "b" / "deep.txt").read_text() == "deep\n"


def test_cp_out_never_plants_links_on_the_host(cli, sb, tmp_path):
    sh(cli, sb, "mkdir -p evil && ln -s /etc/shadow evil/shadow && ln -s / evil/root "
                "&& echo ok > evil/fine.txt")
    out = tmp_path / "evil"
    r = cli("cp", f"{sb}:evil", out)
    assert r.rc == 0, r
    assert sorted(os.listdir(out)) == ["fine.txt"], r
    assert not any(os.path.islink(out / n) for n in os.listdir(out))


def test_cp_missing_source_is_an_error(cli, sb, tmp_path):
    r = cli("cp", tmp_path / "nope", f"{sb}:x")
    assert r.rc == 1, r
    assert r.stderr.startswith("sandlot cp: ") and "No such file" in r.stderr, r
    r = cli("cp", f"{sb}:nope.txt", tmp_path / "x")
    assert r.rc == 1, r
    assert r.stderr.startswith("sandlot cp: ") and "nope.txt" in r.stderr, r
    assert not (tmp_path / "x").exists()


def test_cp_to_unknown_sandbox_is_an_error(cli, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    r = cli("cp", f, "sb-" + "c" * 26 + ":f")
    assert r.rc == 1, r
    assert r.stderr.startswith("sandlot cp: "), r


def test_cp_stdin_and_stdout(cli, sb):
    data = os.urandom(1 << 20)
    r = cli("cp", "-", f"{sb}:piped.bin", input=data)
    assert r.rc == 0, r
    r = cli("cp", f"{sb}:piped.bin", "-")
    assert r.rc == 0 and r.out == data


def kill_sandbox_init(sandlotd):
    """The daemon's only sandbox dies (SIGKILL of its sandlot-init, or of a
    vm sandbox's QEMU): every transfer from that sandbox fails from then
    on."""
    pids = sandbox_host_pids(sandlotd)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)


def test_cp_tree_cut_mid_download_fails_and_leaves_no_partial_file(cli, sandlotd, sb, tmp_path):
    r = sh(cli, sb, "mkdir out && echo small > out/a.txt && head -c 256M /dev/urandom > out/b.bin")
    assert r.rc == 0, r
    dest = tmp_path / "dest"
    dest.mkdir()
    p = cli.popen(["cp", f"{sb}:out", str(dest)])

    def writing_b():
        if p.poll() is not None:
            return True
        for root, _, files in os.walk(dest):
            for f in files:
                if f != "a.txt" and os.stat(os.path.join(root, f)).st_size > 0:
                    return True
        return False
    # The big file is being written: stop the CLI there, kill the sandbox,
    # let the CLI go on to find the rest of the archive missing.  (A CLI
    # left stopped would hold its download, and so the sandbox, open.)
    try:
        assert wait_until(writing_b, 60, interval=0.002)
        os.killpg(p.pid, signal.SIGSTOP)
        assert p.poll() is None, "the download finished before it could be cut"
        kill_sandbox_init(sandlotd)
        os.killpg(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            kill_group(p)
            p.communicate()
    res = f"rc={p.returncode} stderr={err.decode(errors='replace')}"
    assert p.returncode != 0, res
    assert "cut short" in err.decode(), res
    left = sorted(str(q.relative_to(dest)) for q in dest.rglob("*"))
    assert left == ["out", "out/a.txt"], left
    assert (dest / "out" / "a.txt").read_text() == "small\n"


def test_cp_tree_to_stdout_cut_mid_download_fails(cli, sandlotd, sb):
    r = sh(cli, sb, "mkdir out && head -c 64M /dev/urandom > out/b.bin")
    assert r.rc == 0, r
    p = cli.popen(["cp", f"{sb}:out", "-"])
    try:
        got = p.stdout.read(2 << 20)
        assert len(got) == 2 << 20
        kill_sandbox_init(sandlotd)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            kill_group(p)
            p.communicate()
    assert len(got) + len(rest) < 60 << 20
    assert p.returncode != 0, (p.returncode, err)
    assert "cut short" in err.decode(), err


def test_cp_upload_shows_in_changes(cli, sb, tmp_path):
    f = tmp_path / "up.txt"
    f.write_text("hi\n")
    assert cli("cp", f, f"{sb}:up.txt").rc == 0
    r = cli("changes", "--json", sb)
    ch = [c for c in r.json()["changes"] if c["path"].endswith("up.txt")]
    assert ch and ch[-1]["source"] == "api", r


# ---- changes, logs ----------------------------------------------------------

def test_changes_table_json_and_since(cli, sb):
    assert sh(cli, sb, "echo hello > made.txt; mkdir -p out; head -c 1234 /dev/zero > out/z").rc == 0
    r = cli("changes", sb)
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["CURSOR", "KIND", "TYPE", "SIZE", "PATH", "SOURCE"], r
    made = [ln.split() for ln in lines if "made.txt" in ln]
    assert made and made[0][1] == "created" and made[0][2] == "file" and made[0][3] == "6", r
    assert made[0][5].startswith("ex-"), r
    z = [ln.split() for ln in lines if ln.split()[4:5] and ln.split()[4].endswith("out/z")]
    assert z and z[0][3] == "1234", r
    obj = cli("changes", "--json", sb).json()
    cursor = obj["cursor"]
    assert any(c["path"].endswith("made.txt") and c["kind"] == "created" for c in obj["changes"])
    assert sh(cli, sb, "rm made.txt").rc == 0
    obj = cli("changes", "--json", "--since", cursor, sb).json()
    assert [(c["kind"], c["path"].rsplit("/", 1)[-1]) for c in obj["changes"]] == \
        [("deleted", "made.txt")], obj
    r = cli("changes", "--since", obj["cursor"], sb)
    assert r.rc == 0 and len(r.stdout.splitlines()) == 1, r


def test_changes_follows_pages_and_warns_of_forgotten_entries(session_dirs, tmp_path_factory):
    """A log longer than one answer comes in pages, which `sandlot changes`
    all fetches; entries the log's window forgot are announced on stderr."""
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-cli-changes", numbered=True)
    d = Daemon(base, extra_args=["--changes-scan-bytes", "64K", "--changes-answer-bytes", "64K",
                                 "--changes-log-bytes", "256K", "--changes-total-bytes", "256K"],
               data_dir=session_dirs["data_dir"] / "daemon" / base.name).start()
    try:
        c = Cli(f"unix:{d.sock}")
        sid = c.create()
        for i in range(6):
            r = sh(c, sid, f"mkdir d{i} && cd d{i} && for n in $(seq 1 300); do "
                           f": > file-with-a-rather-long-name-of-about-eighty-bytes-$n; done")
            assert r.rc == 0, r
        pages, since = 0, 0
        api = []
        while True:
            page = d.get(f"/v1/sandboxes/{sid}/changes?since={since}").json()
            pages += 1
            api += page["changes"]
            if not page.get("more"):
                break
            since = page["cursor"]
        assert pages > 2, pages
        r = c("changes", "--json", sid)
        assert r.rc == 0, r
        obj = r.json()
        assert obj["changes"] == api and obj["truncated"] is True
        assert obj["cursor"] == api[-1]["cursor"]
        assert "were forgotten" in r.stderr, r
        r = c("changes", "--since", api[-3]["cursor"], sid)
        assert r.rc == 0 and len(r.stdout.splitlines()) == 3 and r.stderr == "", r
        c.cleanup()
    finally:
        assert d.stop() == 0


def test_logs_of_a_background_exec(cli, sb, sandlotd):
    r = sandlotd.post(f"/v1/sandboxes/{sb}/exec", json_body={
        "command": "echo hello; echo oops >&2; sleep 2; echo done", "background": True})
    assert r.status == 202, r
    ex = r.json()["exec_id"]
    t0 = time.monotonic()
    p = cli.popen(["logs", "--follow", sb, ex])
    try:
        line = read_line_with_deadline(p.stdout, t0 + 5)
        assert line == b"hello\n"
        assert p.poll() is None, "logs --follow returned before the command ended"
        out, err = p.communicate(timeout=30)
    finally:
        kill_group(p)
    assert p.returncode == 0, err
    assert out == b"done\n" and err == b"oops\n"
    r = cli("logs", sb, ex)
    assert r.rc == 0, r
    assert r.out == b"hello\ndone\n" and r.err == b"oops\n", r
    r = cli("logs", sb, "ex-" + "d" * 26)
    assert r.rc == 1 and r.stderr.startswith("sandlot logs: "), r


# ---- arguments, help, daemon not there -------------------------------------

@pytest.mark.parametrize("args", [
    ["create", "--memory", "lots"],
    ["create", "--cpus", "many"],
    ["create", "--pids", "0"],
    ["create", "--isolation", "xen"],
    ["create", "--ttl", "forever"],
    ["create", "--env", "NOEQUALS"],
    ["create", "--label", "=v"],
    ["create", "extra"],
    ["create", "--memory"],
    ["exec"],
    ["exec", "sb-x"],
    ["exec", "sb-x", "--"],
    ["exec", "--timeout", "soon", "sb-x", "--", "true"],
    ["exec", "--bogus", "sb-x", "--", "true"],
    ["cp", "only-one"],
    ["cp", "a", "b"],
    ["cp", "sb-x:a", "sb-y:b"],
    ["cp", "a", "b", "c"],
    ["ls", "--label", "novalue"],
    ["ls", "extra"],
    ["rm"],
    ["logs", "sb-x"],
    ["logs", "sb-x", "ex-y", "z"],
    ["changes"],
    ["changes", "--since", "-1", "sb-x"],
    ["nosuchverb"],
    ["ls", "--host", "ftp://x"],
    ["mcp", "--memory", "lots"],
    ["mcp", "--timeout", "0"],
    ["mcp", "--isolation", "xen"],
    ["mcp", "extra"],
])
def test_bad_arguments_exit_2(args):
    cli = Cli("unix:/nonexistent/sandlot.sock")
    r = cli(*args)
    assert r.rc == 2, r
    assert r.stderr.startswith("sandlot"), r
    assert len(r.stderr.strip().splitlines()) == 1, r


@pytest.mark.parametrize("verb", ["create", "exec", "cp", "ls", "rm", "logs", "changes", "mcp"])
def test_verb_help(verb):
    r = Cli(None)(verb, "--help")
    assert r.rc == 0, r
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert section in r.stdout, (section, r)
    assert "--host" in r.stdout


def test_main_help_lists_the_verbs():
    r = Cli(None)("--help")
    assert r.rc == 0
    for verb in ("run", "create", "exec", "cp", "ls", "rm", "logs", "changes", "mcp"):
        assert re.search(rf"^    {verb}\b", r.stdout, re.M), verb


@pytest.mark.parametrize("args", [["ls"], ["create"], ["rm", "sb-x"], ["exec", "sb-x", "--", "true"],
                                  ["changes", "sb-x"], ["logs", "sb-x", "ex-y"], ["cp", "sb-x:a", "/tmp/a"],
                                  ["mcp"]])
def test_unreachable_daemon_is_a_clear_125(args, tmp_path):
    sock = tmp_path / "none.sock"
    r = Cli(f"unix:{sock}")(*args)
    assert r.rc == 125, r
    assert r.stderr == (f"sandlot: cannot reach sandlotd at unix:{sock}: No such file or directory "
                        "(is it running? start it with: sandlotd)\n"), r


def test_default_host_is_the_system_socket():
    r = Cli(None)("ls")
    if os.path.exists("/run/sandlot/sandlot.sock"):
        # a system sandlotd (or its stale socket): talked to, or named
        assert r.rc == 0 or "unix:/run/sandlot/sandlot.sock" in r.stderr, r
        return
    assert r.rc == 125, r
    assert r.stderr == ("sandlot: cannot reach sandlotd at unix:/run/sandlot/sandlot.sock: "
                        "No such file or directory (is it running? start it with: sandlotd)\n"), r


def test_host_option_beats_the_environment(sandlotd):
    cli = Cli("unix:/nonexistent/sandlot.sock")
    r = cli("ls", "--host", f"unix:{sandlotd.sock}")
    assert r.rc == 0, r
    r = cli("ls", "-H", str(sandlotd.sock))
    assert r.rc == 0, r
    # before the verb, as `docker -H`
    r = cli("-H", f"unix:{sandlotd.sock}", "ls", "-q")
    assert r.rc == 0, r
    r = cli(f"--host=unix:{sandlotd.sock}", "ls")
    assert r.rc == 0, r


def test_nothing_listening_on_tcp_is_125():
    port = free_port()
    r = Cli(f"tcp:127.0.0.1:{port}")("ls")
    assert r.rc == 125, r
    assert r.stderr == (f"sandlot: cannot reach sandlotd at tcp:127.0.0.1:{port}: "
                        "Connection refused (is it running? start it with: sandlotd)\n"), r


# ---- TCP with a token -------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def tcp_daemon(session_dirs, tmp_path_factory):
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-tcp", numbered=True)
    token = "tok-" + os.urandom(16).hex()
    token_file = base / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name,
               extra_args=["--listen", f"tcp:127.0.0.1:{port}", "--token-file", str(token_file)])
    d.start()
    d.port, d.token, d.token_file = port, token, token_file
    yield d
    rc = d.stop()
    assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"


def test_tcp_with_token(tcp_daemon):
    d = tcp_daemon
    host = f"tcp:127.0.0.1:{d.port}"
    cli = Cli(host, {"SANDLOT_TOKEN": d.token})
    try:
        sid = cli.create("--label", "via=tcp")
        r = cli("exec", sid, "--", "sh", "-c", "echo over tcp; exit 4")
        assert r.rc == 4 and r.out == b"over tcp\n", r
        assert sid in cli("ls", "-q").stdout.split()
        # http://HOST:PORT and --token-file work the same
        other = Cli(f"http://127.0.0.1:{d.port}")
        r = other("ls", "-q", "--token-file", d.token_file)
        assert r.rc == 0 and sid in r.stdout.split(), r
        r = Cli(host, {"SANDLOT_TOKEN_FILE": str(d.token_file)})("ls", "-q")
        assert r.rc == 0 and sid in r.stdout.split(), r
        # no token, a wrong token
        for env in ({}, {"SANDLOT_TOKEN": "wrong"}):
            r = Cli(host, env)("ls")
            assert r.rc == 1, r
            assert r.stderr.startswith("sandlot ls: ") and "token" in r.stderr.lower(), r
        r = Cli(host, {"SANDLOT_TOKEN": "wrong"})("exec", sid, "--", "true")
        assert r.rc == 125, r
    finally:
        cli.cleanup()


def test_missing_token_file_is_an_error(tmp_path):
    r = Cli("tcp:127.0.0.1:1")("ls", "--token-file", tmp_path / "nope")
    assert r.rc == 125, r
    assert "token file" in r.stderr and "No such file" in r.stderr, r
