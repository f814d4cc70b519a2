"""sandlotd exec routes: buffered, NDJSON-streamed and background execs.

Drives a real sandlotd (the `sandlotd` fixture) over its unix socket:
results and their fields, live streaming (output arrives before the
command ends), disconnects that kill, back-pressure with bounded daemon
memory, background execs with status/follow/stdin/kill, concurrency,
malformed requests and ended sandboxes.
"""
import base64
import http.client
import hashlib
import json
import random
import socket
import re
import threading
import time

import pytest

import hostscan
from conftest import wait_until

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends

NDJSON = {"Accept": "application/x-ndjson"}
EXEC_ID = re.compile(r"^ex-[a-z2-7]{26}$")


# ---- helpers -----------------------------------------------------------------

def exec_path(sid):
    return f"/v1/sandboxes/{sid}/exec"


def post_exec(d, sid, body, timeout=60):
    return d.post(exec_path(sid), json_body=body, timeout=timeout)


def open_stream(d, sid, body, timeout=60):
    """POST an exec with Accept: NDJSON; returns (connection, response)."""
    c, r = d.stream("POST", exec_path(sid), json_body=body, headers=NDJSON, timeout=timeout)
    assert r.status == 200, (r.status, r.read()[:500])
    assert r.getheader("Content-Type", "").startswith("application/x-ndjson")
    return c, r


def read_events(r):
    """All NDJSON events until the end of the response."""
    out = []
    for line in r:
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def stream_output(events, key="stdout", b64=False):
    parts = [e["data"] for e in events if e["type"] == key]
    if b64:
        return b"".join(base64.b64decode(p) for p in parts)
    return "".join(parts)


def procs_in_sandbox(d, sid):
    """Command lines of the processes in the sandbox, seen from inside."""
    code = ("import os\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit():\n"
            "        try: print(open('/proc/'+p+'/cmdline','rb').read().replace(b'\\0',b' ').decode())\n"
            "        except OSError: pass\n")
    r = d.exec(sid, argv=["python3", "-c", code])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def isolation_of(d):
    return getattr(d, "isolation", "ns")


def slack(d):
    """How much longer than an ns sandbox a vm sandbox may take to react
    (a kill, the end of a command): its kernel is emulated (TCG), and on a
    loaded machine QEMU gets a small share of a CPU."""
    return 1 if isolation_of(d) == "ns" else 8


def running(d, sid, needle):
    """Whether a process whose command line holds `needle` runs in the
    sandbox: seen from the host for ns (whose processes are host
    processes: a match anywhere on the host counts, an escape included),
    from inside for vm (whose processes are the guest's)."""
    if isolation_of(d) == "ns":
        return bool(hostscan.find_pids_containing(needle))
    r = d.exec(sid, command="cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    return needle in r["stdout"]


def sleeps(tag):
    """Host pids of `sleep N.TAG` processes (not the shells that started them)."""
    return [p for p in hostscan.pids()
            if (cl := hostscan.cmdline(p))[:1] == [b"sleep"] and tag.encode() in b" ".join(cl)]


def rss_kb(pid):
    return int(hostscan.status(pid).get("VmRSS", "0 kB").split()[0])


def assert_error(r, status, field=None):
    assert r.status == status, r
    err = r.json()["error"]
    assert err["code"] and err["message"], r
    if field:
        assert field in err["message"], r
    return err


@pytest.fixture
def sb(sandlotd):
    """A running sandbox in the test's daemon: (daemon, sandbox id)."""
    return sandlotd, sandlotd.create()


# ---- buffered execs ------------------------------------------------------------

def test_buffered_argv(sb):
    d, sid = sb
    r = d.exec(sid, argv=["echo", "hello", "world"])
    assert EXEC_ID.match(r["exec_id"]), r
    assert r["exit_code"] == 0 and r["signal"] is None, r
    assert r["stdout"] == "hello world\n" and r["stderr"] == "", r
    assert r["timed_out"] is False and r["oom_killed"] is False and r["pids_limited"] is False
    assert r["truncated"] is False
    assert isinstance(r["duration_ms"], int) and r["duration_ms"] >= 0
    assert r["changes"] == [] and isinstance(r["cursor"], int)
    assert "error" not in r


def test_first_and_later_commands_get_the_same_credentials(sandlotd):
    """The first command's process is readied while the sandbox still
    finishes its set-up, the later ones while the previous command runs:
    every one of them starts unprivileged, filtered, with default signal
    dispositions and the sandbox's limits, and the first sees only the
    sandbox's root (the host's was detached before it ran)."""
    sid = sandlotd.create()
    script = ("grep -E '^(Cap|SigIgn|SigBlk|NoNewPrivs|Seccomp:)' /proc/self/status; "
              "ulimit -n; cat /proc/self/oom_score_adj; id -u; "
              "awk '$5 == \"/\"' /proc/self/mountinfo | wc -l")
    first = sandlotd.exec(sid, command=script)
    assert first["exit_code"] == 0, first
    for _ in range(3):
        r = sandlotd.exec(sid, command=script)
        assert r["exit_code"] == 0, r
        assert r["stdout"] == first["stdout"], (first, r)
    lines = first["stdout"].splitlines()
    st = dict(ln.split(":", 1) for ln in lines if ":" in ln)
    st = {k: v.strip() for k, v in st.items()}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert st[cap] == "0000000000000000", (cap, first)
    assert st["SigIgn"] == st["SigBlk"] == "0000000000000000", first
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", first
    rest = [ln for ln in lines if ":" not in ln]
    assert int(rest[0]) > 0 and rest[1] == "300" and rest[2] == "1000", first
    # One mount at /: the sandbox's root, nothing of the host's stacked.
    assert rest[3] == "1", first


def test_buffered_command_exit_code_and_stderr(sb):
    d, sid = sb
    r = d.exec(sid, command="echo out; echo err >&2; exit 3")
    assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "out\n", "err\n"), r
    r = d.exec(sid, command="kill -TERM $$")
    assert r["exit_code"] is None and r["signal"] == 15, r


@pytest.mark.backends(check=True)
def test_state_persists_between_execs(sb):
    d, sid = sb
    assert d.exec(sid, command="echo 42 > state.txt")["exit_code"] == 0
    assert d.exec(sid, argv=["cat", "state.txt"])["stdout"] == "42\n"


def test_env_and_cwd(sb):
    d, sid = sb
    r = d.exec(sid, command='echo "$FOO|$BAR"', env={"FOO": "bar baz", "BAR": "=x"})
    assert r["stdout"] == "bar baz|=x\n", r
    assert d.exec(sid, argv=["pwd"])["stdout"] == "/home/user\n"
    assert d.exec(sid, argv=["pwd"], cwd="/tmp")["stdout"] == "/tmp\n"
    d.exec(sid, command="mkdir -p sub/dir")
    assert d.exec(sid, argv=["pwd"], cwd="sub/dir")["stdout"] == "/home/user/sub/dir\n"
    r = d.exec(sid, argv=["pwd"], cwd="/no/such/dir")
    assert r["exit_code"] == 126 and r["error"], r


def test_stdin_text_and_base64(sb):
    d, sid = sb
    r = d.exec(sid, argv=["cat"], stdin="line one\nline two\n")
    assert r["stdout"] == "line one\nline two\n", r
    blob = bytes(range(256)) * 64
    r = d.exec(sid, argv=["sha256sum"], stdin_base64=base64.b64encode(blob).decode())
    assert r["stdout"].split()[0] == hashlib.sha256(blob).hexdigest(), r
    # Without stdin the command reads /dev/null: EOF at once, never a hang.
    r = d.exec(sid, argv=["cat"], timeout_ms=10000)
    assert r["exit_code"] == 0 and r["stdout"] == "" and not r["timed_out"], r


def test_large_stdin_beyond_the_credit_window(sb):
    d, sid = sb
    blob = random.Random(7).randbytes(700 * 1024)
    # The command writes a lot before it reads: stdin must not block output.
    r = d.exec(sid, command="head -c 3000000 /dev/zero | tr '\\0' x >&2; sha256sum",
               stdin_base64=base64.b64encode(blob).decode(), output_limit=100)
    assert r["exit_code"] == 0, r
    assert r["stdout"].split()[0] == hashlib.sha256(blob).hexdigest(), r
    assert r["truncated"] is True and r["stderr"] == "x" * 100


def test_binary_output_base64(sb):
    d, sid = sb
    code = "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4); sys.stderr.buffer.write(b'\\xff\\x00')"
    r = d.exec(sid, argv=["python3", "-c", code], output="base64")
    assert base64.b64decode(r["stdout"]) == bytes(range(256)) * 4, r
    assert base64.b64decode(r["stderr"]) == b"\xff\x00", r
    # As text, invalid UTF-8 (and NUL) becomes U+FFFD and the JSON stays valid.
    r = d.exec(sid, argv=["python3", "-c", code])
    assert r["stderr"] == "\ufffd\ufffd", r
    r = d.exec(sid, argv=["printf", "h\\303\\251llo \\342\\202\\254"])
    assert r["stdout"] == "héllo €", r


def test_output_limit_truncates(sb):
    d, sid = sb
    r = d.exec(sid, command="head -c 100000 /dev/zero | tr '\\0' a; echo tail >&2", output_limit=1000)
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "a" * 1000 and r["truncated"] is True, r
    assert r["stderr"] == "tail\n"
    r = d.exec(sid, command="head -c 3000000 /dev/zero | tr '\\0' a")
    assert len(r["stdout"]) == 1 << 20 and r["truncated"] is True  # default 1 MiB


@pytest.mark.backends(check=True)
def test_timeout_kills_the_process_group(sb):
    d, sid = sb
    tag = f"{random.randint(100000, 999999)}"
    t0 = time.monotonic()
    r = d.exec(sid, command=f"sleep 300.{tag} & sleep 301.{tag}; echo never", timeout_ms=500)
    elapsed = time.monotonic() - t0
    assert r["timed_out"] is True and r["signal"] == 9 and r["exit_code"] is None, r
    assert "never" not in r["stdout"]
    assert elapsed < 10 * slack(d), elapsed
    assert 400 <= r["duration_ms"] < 10000 * slack(d), r
    # Both sleeps were in the command's process group: gone, inside and out.
    assert wait_until(lambda: tag not in procs_in_sandbox(d, sid), 5 * slack(d)), procs_in_sandbox(d, sid)
    assert not hostscan.find_pids_containing(f".{tag}")


def test_timeout_zero_means_none(sb):
    d, sid = sb
    r = d.exec(sid, command="sleep 0.3; echo ok", timeout_ms=0)
    assert r["stdout"] == "ok\n" and r["timed_out"] is False, r


@pytest.mark.backends(check=True)
def test_oom_in_small_sandbox(sandlotd, isolation):
    # (A vm sandbox needs 128M at least: its kernel's.)
    sid = sandlotd.create(memory="64M" if isolation == "ns" else "128M")
    code = "b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
    r = sandlotd.exec(sid, argv=["python3", "-c", code], timeout_ms=60000)
    assert r["oom_killed"] is True and r["signal"] == 9, r
    assert "survived" not in r["stdout"]
    # The sandbox survives its command's OOM.
    assert sandlotd.exec(sid, argv=["echo", "alive"])["stdout"] == "alive\n"


def test_start_failure_127(sb):
    d, sid = sb
    r = d.exec(sid, argv=["/no/such/command", "x"])
    assert r["exit_code"] == 127 and r["signal"] is None, r
    assert "/no/such/command" in r["error"], r
    r = d.exec(sid, argv=["no-such-command-anywhere"])
    assert r["exit_code"] == 127 and r["error"], r
    r = d.exec(sid, command="no-such-command-anywhere")  # the shell's own 127
    assert r["exit_code"] == 127 and "error" not in r, r


def test_metrics_count_execs(sb):
    d, sid = sb
    d.exec(sid, argv=["true"])
    d.exec(sid, command="sleep 5", timeout_ms=100)
    text = d.get("/metrics").body.decode()
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            vals[k] = float(v)
    assert vals["sandlot_execs_started_total"] >= 2, text
    assert vals["sandlot_execs_finished_total"] >= 2, text
    assert vals["sandlot_exec_timeouts_total"] >= 1, text
    assert vals['sandlot_exec_duration_seconds_bucket{le="+Inf"}'] >= 2, text


# ---- changes -------------------------------------------------------------------

def by_path(changes):
    return {c["path"].rsplit("/", 1)[-1]: c for c in changes}


@pytest.mark.backends(check=True)
def test_exec_results_carry_changes(sb):
    d, sid = sb
    r1 = d.exec(sid, command="echo hello > a.txt; mkdir newdir; echo x > newdir/b.bin")
    ch = by_path(r1["changes"])
    assert ch["a.txt"]["kind"] == "created" and ch["a.txt"]["type"] == "file", r1
    assert ch["a.txt"]["size"] == 6 and ch["a.txt"]["path"] == "/home/user/a.txt", r1
    assert ch["newdir"]["type"] == "directory" and ch["b.bin"]["kind"] == "created", r1
    assert all(c["source"] == r1["exec_id"] for c in r1["changes"]), r1
    assert r1["cursor"] >= max(c["cursor"] for c in r1["changes"])

    r2 = d.exec(sid, command="echo more >> a.txt")
    assert [(c["kind"], c["path"]) for c in r2["changes"]] == [("modified", "/home/user/a.txt")], r2
    assert r2["cursor"] > r1["cursor"]

    r3 = d.exec(sid, command="rm a.txt")
    assert [(c["kind"], c["path"]) for c in r3["changes"]] == [("deleted", "/home/user/a.txt")], r3

    r4 = d.exec(sid, argv=["ls"])  # reads only
    assert r4["changes"] == [] and r4["cursor"] == r3["cursor"], r4

    # The log: everything after r1's cursor is r2's and r3's.
    g = d.get(f"/v1/sandboxes/{sid}/changes?since={r1['cursor']}")
    assert g.status == 200, g
    log = g.json()
    assert [(c["kind"], c["source"]) for c in log["changes"]] == [
        ("modified", r2["exec_id"]), ("deleted", r3["exec_id"])], log
    assert log["cursor"] == r3["cursor"]
    since0 = d.get(f"/v1/sandboxes/{sid}/changes?since=0").json()
    assert {c["source"] for c in since0["changes"]} >= {r1["exec_id"], r2["exec_id"]}


def test_changes_net_view_and_hidden_filter(sb):
    d, sid = sb
    base = d.exec(sid, command="echo old > kept.txt; echo old > gone.txt; echo old > redo.txt")["cursor"]
    d.exec(sid, command="echo tmp > tmp.txt; echo new > new.txt; echo more >> kept.txt")
    d.exec(sid, command="rm tmp.txt gone.txt redo.txt; echo again > redo.txt; echo more >> new.txt")
    d.exec(sid, command="mkdir -p .cache/fontconfig __pycache__ sub/.git; echo c > .cache/fontconfig/x-le64.cache-9;"
                        " echo p > __pycache__/m.pyc; echo g > sub/.git/HEAD; echo v > .hidden-file; echo r > sub/r.txt")
    raw = d.get(f"/v1/sandboxes/{sid}/changes?since={base}").json()
    assert "hidden" not in raw
    assert [c["kind"] for c in raw["changes"] if c["path"].endswith("/tmp.txt")] == ["created", "deleted"]

    net = d.get(f"/v1/sandboxes/{sid}/changes?since={base}&net=1").json()
    assert net["cursor"] == raw["cursor"]
    kinds = {c["path"][len("/home/user/"):]: c["kind"] for c in net["changes"]}
    assert "tmp.txt" not in kinds                      # created, then deleted: nothing
    assert kinds["new.txt"] == "created" and kinds["kept.txt"] == "modified"
    assert kinds["gone.txt"] == "deleted" and kinds["redo.txt"] == "modified"
    assert kinds[".cache/fontconfig/x-le64.cache-9"] == "created" and kinds["sub/.git/HEAD"] == "created"
    assert len(kinds) == len(net["changes"])           # one entry per path
    new = next(c for c in net["changes"] if c["path"] == "/home/user/new.txt")
    assert new["size"] == 9                            # "new\nmore\n": its last entry's size
    cursors = [c["cursor"] for c in net["changes"]]
    assert cursors == sorted(cursors)                  # in the order of the last changes

    vis = d.get(f"/v1/sandboxes/{sid}/changes?since={base}&net=1&exclude_hidden=1").json()
    paths = {c["path"][len("/home/user/"):] for c in vis["changes"]}
    assert paths == {"new.txt", "kept.txt", "gone.txt", "redo.txt", "sub", "sub/r.txt"}, paths
    # .cache, .cache/fontconfig, its file, __pycache__ and its file, sub/.git and
    # its HEAD, .hidden-file
    assert vis["hidden"] == 8, vis
    # the filter works on the plain log as well
    plain = d.get(f"/v1/sandboxes/{sid}/changes?since={base}&exclude_hidden=true").json()
    assert not any("/." in c["path"] or "__pycache__" in c["path"] for c in plain["changes"])
    assert plain["hidden"] >= 8
    for bad in ("net=2", "exclude_hidden=yes"):
        r = d.get(f"/v1/sandboxes/{sid}/changes?{bad}")
        assert r.status == 400 and bad.split("=")[0] in r.json()["error"]["message"], r


def test_changes_scan_logs_what_background_processes_wrote(sb):
    d, sid = sb
    before = d.get(f"/v1/sandboxes/{sid}/changes").json()["cursor"]
    # a background process that keeps running: its writes are logged by a
    # scan, not by an exec ending
    bg = d.post(f"/v1/sandboxes/{sid}/exec", json_body={
        "command": "echo later > later.txt; exec sleep 60", "background": True}).json()["exec_id"]
    assert wait_until(lambda: d.get(f"/v1/sandboxes/{sid}/files/stat?path=later.txt").status == 200, 10)
    logged = [c["path"] for c in d.get(f"/v1/sandboxes/{sid}/changes?since={before}").json()["changes"]]
    assert "/home/user/later.txt" not in logged
    s = d.post(f"/v1/sandboxes/{sid}/changes/scan")
    assert s.status == 200, s
    scan = s.json()
    assert set(scan) == {"cursor"} and scan["cursor"] > before
    after = d.get(f"/v1/sandboxes/{sid}/changes?since={before}").json()
    assert [(c["path"], c["kind"], c["source"]) for c in after["changes"] if c["path"].endswith("later.txt")] == [
        ("/home/user/later.txt", "created", "scan")]
    assert after["cursor"] == scan["cursor"]
    # nothing new: the cursor stays
    assert d.post(f"/v1/sandboxes/{sid}/changes/scan").json()["cursor"] == scan["cursor"]
    d.post(f"/v1/sandboxes/{sid}/execs/{bg}/kill", json_body={})
    r = d.post("/v1/sandboxes/sb-" + "a" * 26 + "/changes/scan")
    assert r.status == 404, r


def test_changes_of_a_streamed_exec(sb):
    d, sid = sb
    c, r = open_stream(d, sid, {"command": "echo x > streamed.txt"})
    events = read_events(r)
    c.close()
    res = events[-1]["result"]
    assert [(x["kind"], x["path"]) for x in res["changes"]] == [("created", "/home/user/streamed.txt")]


# ---- NDJSON streaming -------------------------------------------------------

@pytest.mark.backends(check=True)
def test_stream_output_arrives_live(sb):
    d, sid = sb
    # Live: the first line comes long before the sleep ends (a guest
    # under emulation may take a few seconds to start sh: a longer sleep).
    pause = 2 * slack(d)
    t0 = time.monotonic()
    c, r = open_stream(d, sid, {"command": f"echo a; sleep {pause}; echo b >&2; sleep 0.2; echo c"})
    start = json.loads(r.readline())
    assert start["type"] == "start" and EXEC_ID.match(start["exec_id"]), start
    assert isinstance(start["pid"], int) and start["pid"] > 1, start
    first = json.loads(r.readline())
    t_first = time.monotonic() - t0
    assert first == {"type": "stdout", "data": "a\n"}, first
    assert t_first < 1.0 * slack(d), f"first output after {t_first:.2f}s: not live"
    rest = read_events(r)
    c.close()
    assert time.monotonic() - t0 >= pause
    # (stdout and stderr are separate pipes: their order is only kept when
    # the writes are apart in time, hence the sleep between them)
    assert [(e["type"], e.get("data")) for e in rest[:-1]] == [("stderr", "b\n"), ("stdout", "c\n")]
    ex = rest[-1]
    assert ex["type"] == "exit", rest
    res = ex["result"]
    assert res["exec_id"] == start["exec_id"] and res["exit_code"] == 0, res
    assert "stdout" not in res and "stderr" not in res, res
    assert res["duration_ms"] >= pause * 1000 - 100


def test_stream_base64_and_split_utf8(sb):
    d, sid = sb
    # A multi-byte character split across two writes arrives whole.
    code = ("import sys, time\n"
            "o = sys.stdout.buffer\n"
            "o.write(b'caf\\xc3'); o.flush(); time.sleep(0.3)\n"
            "o.write(b'\\xa9 \\xe2\\x82'); o.flush(); time.sleep(0.3)\n"
            "o.write(b'\\xac!'); o.flush()\n")
    c, r = open_stream(d, sid, {"argv": ["python3", "-c", code]})
    events = read_events(r)
    c.close()
    assert stream_output(events) == "café €!", events
    c, r = open_stream(d, sid, {"argv": ["python3", "-c", code], "output": "base64"})
    events = read_events(r)
    c.close()
    assert stream_output(events, b64=True) == "café €!".encode(), events


def test_stream_start_failure(sb):
    d, sid = sb
    c, r = open_stream(d, sid, {"argv": ["/no/such/thing"]})
    events = read_events(r)
    c.close()
    assert [e["type"] for e in events] == ["start", "exit"], events
    assert events[-1]["result"]["exit_code"] == 127 and events[-1]["result"]["error"]


def test_stream_disconnect_kills_the_command(sb):
    d, sid = sb
    tag = f"{random.randint(100000, 999999)}"
    c, r = open_stream(d, sid, {"command": f"echo started; sleep 100.{tag}; echo never"})
    assert json.loads(r.readline())["type"] == "start"
    assert json.loads(r.readline()) == {"type": "stdout", "data": "started\n"}
    assert running(d, sid, f"100.{tag}"), "the sleep should be running"
    t0 = time.monotonic()
    r.close()
    c.close()
    assert wait_until(lambda: not running(d, sid, f"100.{tag}"), 3 * slack(d)), \
        "the command outlived its client"
    assert time.monotonic() - t0 < 3 * slack(d)
    assert tag not in procs_in_sandbox(d, sid)
    # The exec is recorded as killed.
    execs = d.get(f"/v1/sandboxes/{sid}/execs").json()["execs"]
    killed = [e for e in execs if e["command"][-1].startswith("echo started")]
    assert wait_until(lambda: d.get(f"/v1/sandboxes/{sid}/execs/{killed[0]['exec_id']}")
                      .json()["state"] == "exited", 5)
    st = d.get(f"/v1/sandboxes/{sid}/execs/{killed[0]['exec_id']}").json()
    assert st["result"]["signal"] == 9, st


def test_buffered_disconnect_kills_the_command(sb):
    d, sid = sb
    tag = f"{random.randint(100000, 999999)}"
    c = d.conn(timeout=10)
    c.request("POST", exec_path(sid), body=json.dumps({"command": f"sleep 100.{tag}"}),
              headers={"Content-Type": "application/json"})
    assert wait_until(lambda: running(d, sid, f"100.{tag}"), 5 * slack(d))
    c.close()
    assert wait_until(lambda: not running(d, sid, f"100.{tag}"), 3 * slack(d)), \
        "a buffered exec outlived its client"


def held_back(pid):
    """A condition for wait_until(): `pid` sleeps writing its output and has
    read nothing since the previous call (/proc/PID/io rchar), i.e. what it
    writes to is full and stays full: sandlotd is not draining it."""
    last = {}

    def check():
        rchar = hostscan.io_counter(pid, "rchar")
        still = rchar is not None and rchar == last.get("rchar")
        last["rchar"] = rchar
        return still and hostscan.blocked_writing(pid)
    return check


def our_process(d, argv):
    """The host pid of the one process with this argv in a sandbox of `d`."""
    inits = {p for p in hostscan.init_pids() if hostscan.ppid(p) == d.proc.pid}
    found = [p for p in hostscan.find_pids(argv) if hostscan.sandbox_init_of(p) in inits]
    return found[0] if len(found) == 1 else None


def test_stream_flood_with_bounded_memory(plain_sandlotd):
    """50 MiB streamed to a client that does not read for a while: the
    command is held back, not buffered in the daemon.  Measured on the
    daemon as shipped: under ASan, freed buffers sit in its quarantine (up
    to 256 MiB by default), so resident memory says nothing there."""
    d = plain_sandlotd
    sid = d.create()
    size = 50 << 20
    r = d.exec(sid, command=f"head -c {size} /dev/urandom > flood.bin; sha256sum flood.bin")
    want = r["stdout"].split()[0]
    pid = d.proc.pid
    base_rss = rss_kb(pid)
    c, r = open_stream(d, sid, {"argv": ["cat", "flood.bin"], "output": "base64"}, timeout=120)
    # Nothing is read: wait until cat is stuck writing, having read only a
    # part of the file (the pipes and socket buffers along the way are full).
    assert wait_until(lambda: our_process(d, ["cat", "flood.bin"]), 10)
    cat = our_process(d, ["cat", "flood.bin"])
    assert wait_until(held_back(cat), 20, interval=0.1), "cat was never held back"
    read_so_far = hostscan.io_counter(cat, "rchar")
    assert read_so_far < size // 2, f"cat read {read_so_far} bytes with no client reading"
    peak = rss_kb(pid)
    h = hashlib.sha256()
    got = 0
    n = 0
    exit_ev = None
    for line in r:
        ev = json.loads(line)
        if ev["type"] == "stdout":
            data = base64.b64decode(ev["data"])
            h.update(data)
            got += len(data)
            n += 1
            if n % 50 == 0:
                peak = max(peak, rss_kb(pid))
        elif ev["type"] == "exit":
            exit_ev = ev
    c.close()
    assert got == size, got
    assert h.hexdigest() == want
    assert exit_ev and exit_ev["result"]["exit_code"] == 0, exit_ev
    assert peak < 100 * 1024, f"sandlotd RSS reached {peak} kB (started at {base_rss} kB)"
    assert peak - base_rss < 60 * 1024, f"sandlotd grew by {peak - base_rss} kB"


def test_stream_slow_reader_gets_everything(sb):
    d, sid = sb
    c, r = open_stream(d, sid, {"command": "seq 1 200000"})
    lines = []
    for i, line in enumerate(r):
        if i < 5:
            time.sleep(0.3)
        lines.append(json.loads(line))
    c.close()
    assert stream_output(lines) == "".join(f"{i}\n" for i in range(1, 200001))
    assert lines[-1]["type"] == "exit" and lines[-1]["result"]["exit_code"] == 0


@pytest.mark.ns_only(reason="twenty sandboxes at once: twenty VMs of 512M under TCG is more than a test machine should carry")
def test_100_concurrent_streams_across_20_sandboxes(sandlotd):
    d = sandlotd
    # Small disks: twenty default ones reserve 20 GiB of real space in the
    # storage pool, which a test machine's disk may not have.
    sids = [d.create(disk="64M") for _ in range(20)]
    results = {}
    errors = []

    def one(i):
        sid = sids[i % 20]
        try:
            c, r = open_stream(d, sid, {"command": f"for k in 1 2 3; do echo {i}-$k; sleep 0.2; done; "
                                                   f"echo err{i} >&2; exit {i % 7}"},
                               timeout=120)
            ev = read_events(r)
            c.close()
            results[i] = ev
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    elapsed = time.monotonic() - t0
    assert not errors, errors[:5]
    assert len(results) == 100
    for i, ev in results.items():
        assert ev[0]["type"] == "start", ev
        assert stream_output(ev) == f"{i}-1\n{i}-2\n{i}-3\n", (i, ev)
        assert stream_output(ev, "stderr") == f"err{i}\n", (i, ev)
        assert ev[-1]["type"] == "exit" and ev[-1]["result"]["exit_code"] == i % 7, (i, ev)
    assert len({ev[0]["exec_id"] for ev in results.values()}) == 100
    assert elapsed < 60, elapsed


# ---- background execs -------------------------------------------------------

@pytest.mark.backends(check=True)
def test_background_stdin_status_follow(sb):
    d, sid = sb
    r = post_exec(d, sid, {"command": "read a; echo got $a; read b; echo got $b >&2; sleep 0.3; echo bye",
                           "background": True})
    assert r.status == 202, r
    st = r.json()
    eid = st["exec_id"]
    assert EXEC_ID.match(eid) and st["state"] == "running", st
    assert st["command"] == ["/bin/sh", "-c", st["command"][2]]
    base = f"/v1/sandboxes/{sid}/execs/{eid}"

    lst = d.get(f"/v1/sandboxes/{sid}/execs").json()["execs"]
    assert lst[0]["exec_id"] == eid and lst[0]["state"] == "running", lst

    # Two followers at once, attached before any output: each has read its
    # start event before the first input goes in.
    follows = []
    attached = threading.Semaphore(0)

    def follow():
        c, fr = d.stream("GET", base + "?follow=1", timeout=30)
        assert fr.status == 200
        first = json.loads(fr.readline())
        attached.release()
        follows.append([first] + read_events(fr))
        c.close()

    ft = [threading.Thread(target=follow) for _ in range(2)]
    for t in ft:
        t.start()
    for _ in ft:
        assert attached.acquire(timeout=10), "a follower did not attach"
    assert d.request("POST", base + "/stdin", body=b"").status == 204  # empty body: a no-op
    r = d.request("POST", base + "/stdin", body=b"one\n")
    assert r.status == 204, r
    assert wait_until(lambda: "got one" in d.get(base).json().get("stdout", ""), 5)
    r = d.request("POST", base + "/stdin?eof=1", body=b"two\n")
    assert r.status == 204, r
    for t in ft:
        t.join(30)
    assert len(follows) == 2
    for ev in follows:
        assert ev[0]["type"] == "start" and ev[0]["exec_id"] == eid
        assert stream_output(ev) == "got one\nbye\n", ev
        assert stream_output(ev, "stderr") == "got two\n", ev
        assert ev[-1]["type"] == "exit" and ev[-1]["result"]["exit_code"] == 0

    st = d.get(base).json()
    assert st["state"] == "exited", st
    assert st["stdout"] == "got one\nbye\n" and st["stderr"] == "got two\n", st
    assert st["result"]["exit_code"] == 0 and st["result"]["exec_id"] == eid
    # A late follower replays everything.
    c, fr = d.stream("GET", base + "?follow=1")
    ev = read_events(fr)
    c.close()
    assert stream_output(ev) == "got one\nbye\n" and ev[-1]["type"] == "exit"
    # stdin of an exec that has ended: 409
    r = d.request("POST", base + "/stdin", body=b"late\n")
    assert_error(r, 409)


@pytest.mark.backends(check=True)
def test_background_kill(sb):
    d, sid = sb
    tag = f"{random.randint(100000, 999999)}"
    eids = []
    for _ in range(3):
        r = post_exec(d, sid, {"command": f"echo up; sleep 100.{tag}", "background": True})
        assert r.status == 202, r
        eids.append(r.json()["exec_id"])
    base = f"/v1/sandboxes/{sid}/execs/"
    assert wait_until(lambda: all(d.get(base + e).json()["stdout"] == "up\n" for e in eids),
                      5 * slack(d))
    if isolation_of(d) == "ns":
        assert wait_until(lambda: len(sleeps(tag)) == 3, 5), sleeps(tag)
    assert running(d, sid, f"100.{tag}")
    assert d.post(base + eids[0] + "/kill", json_body={"signal": "TERM"}).status == 204
    assert d.post(base + eids[1] + "/kill", json_body={"signal": 2}).status == 204
    assert d.request("POST", base + eids[2] + "/kill").status == 204  # no body: SIGKILL
    for eid, sig in zip(eids, (15, 2, 9)):
        assert wait_until(lambda: d.get(base + eid).json()["state"] == "exited", 5 * slack(d))
        st = d.get(base + eid).json()
        assert st["result"]["signal"] == sig and st["stdout"] == "up\n", st
    assert not running(d, sid, f"100.{tag}")
    assert_error(d.post(base + eids[0] + "/kill", json_body={}), 409)
    assert_error(d.post(base + eids[0] + "/kill", json_body={"signal": "NOPE"}), 400, "signal")
    assert_error(d.post(base + eids[0] + "/kill", json_body={"sig": 9}), 400, "sig")


def test_background_stdin_conflicts(sb):
    d, sid = sb
    r = d.exec(sid, argv=["true"])
    assert_error(d.request("POST", f"/v1/sandboxes/{sid}/execs/{r['exec_id']}/stdin", body=b"x"), 409)
    r = post_exec(d, sid, {"argv": ["cat"], "background": True, "stdin": "given\n"})
    eid = r.json()["exec_id"]
    # stdin given in the request is fed, then closed: cat ends by itself.
    assert wait_until(lambda: d.get(f"/v1/sandboxes/{sid}/execs/{eid}").json()["state"] == "exited", 5)
    st = d.get(f"/v1/sandboxes/{sid}/execs/{eid}").json()
    assert st["stdout"] == "given\n" and st["result"]["exit_code"] == 0


@pytest.mark.ns_only(reason="the daemon's handler pool under 264 waiting feeds: daemon code that does not depend on the backend")
def test_stdin_feeds_that_wait_do_not_hold_up_other_requests(sandlotd):
    """More stdin uploads than the daemon has handler threads, each to a
    command that never reads: they wait on a pool of their own, and every
    other request is still served at once."""
    import threading
    d = sandlotd
    n = 264  # more than the 256 threads of the handlers' pool
    sids = [d.create(pids=200, memory="256M"), d.create(pids=200, memory="256M")]
    execs = []
    for i in range(n):
        r = post_exec(d, sids[i % 2], {"argv": ["sleep", "600"], "background": True})
        assert r.status == 202, r
        execs.append((sids[i % 2], r.json()["exec_id"]))
    body = b"x" * (1 << 20)  # beyond what init takes before the command reads
    done = []

    def feed(sid, eid):
        try:
            r = d.request("POST", f"/v1/sandboxes/{sid}/execs/{eid}/stdin", body=body, timeout=120)
            done.append(r.status)
        except Exception as e:  # noqa: BLE001 - the sandbox goes away under it
            done.append(repr(e))
    threads = [threading.Thread(target=feed, args=x, daemon=True) for x in execs]
    for t in threads:
        t.start()

    def busy_workers():
        for line in d.get("/metrics").body.decode().splitlines():
            if line.startswith('sandlot_http_workers{state="busy"} '):
                return float(line.split()[-1])
        return 0
    # every feed that found a thread is stuck in the sandbox's stdin
    assert wait_until(lambda: busy_workers() >= 256, 60, interval=0.2), busy_workers()
    assert not done, done[:3]
    t0 = time.monotonic()
    assert d.get("/v1/health", timeout=10).status == 200
    other = d.create()
    assert d.exec(other, argv=["true"])["exit_code"] == 0
    assert d.delete(f"/v1/sandboxes/{other}").status == 204
    assert time.monotonic() - t0 < 10
    for sid in sids:
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    for t in threads:
        t.join(60)
    assert len(done) == n


def test_background_keeps_running_and_buffers_capped(sb):
    d, sid = sb
    r = post_exec(d, sid, {"command": "head -c 300000 /dev/zero | tr '\\0' z; echo; sleep 0.5; echo end",
                           "background": True, "output_limit": 1000})
    eid = r.json()["exec_id"]
    base = f"/v1/sandboxes/{sid}/execs/{eid}"
    assert wait_until(lambda: d.get(base).json()["state"] == "exited", 10)
    st = d.get(base).json()
    assert st["stdout"] == "z" * 1000 and st["truncated"] is True, st
    assert st["result"]["truncated"] is True


def test_exec_history_is_bounded(sb):
    d, sid = sb
    first = d.exec(sid, argv=["true"])["exec_id"]
    for _ in range(70):
        d.exec(sid, argv=["true"])
    execs = d.get(f"/v1/sandboxes/{sid}/execs").json()["execs"]
    assert 1 <= len(execs) <= 64, len(execs)
    assert first not in {e["exec_id"] for e in execs}
    assert_error(d.get(f"/v1/sandboxes/{sid}/execs/{first}"), 404)


# ---- errors and ended sandboxes ------------------------------------------------

@pytest.mark.parametrize("body, field", [
    ({}, "command"),
    ([], "object"),
    ("echo", None),  # not an object: refused by the JSON layer or the route
    ({"command": "echo", "argv": ["echo"]}, "argv"),
    ({"argv": []}, "argv"),
    ({"argv": "echo hi"}, "argv"),
    ({"argv": ["echo", 1]}, "argv"),
    ({"argv": [""]}, "argv"),
    ({"command": 5}, "command"),
    ({"command": "true", "bogus": 1}, "bogus"),
    ({"command": "true", "timeout_ms": "5"}, "timeout_ms"),
    ({"command": "true", "timeout_ms": -1}, "timeout_ms"),
    ({"command": "true", "timeout_ms": 1.5}, "timeout_ms"),
    ({"command": "true", "env": {"A": 1}}, "env"),
    ({"command": "true", "env": ["A=1"]}, "env"),
    ({"command": "true", "env": {"A=B": "1"}}, "env"),
    ({"command": "true", "cwd": 7}, "cwd"),
    ({"command": "true", "cwd": ""}, "cwd"),
    ({"command": "true", "stdin": 7}, "stdin"),
    ({"command": "true", "stdin": "a", "stdin_base64": "YQ=="}, "stdin"),
    ({"command": "true", "stdin_base64": "!!!"}, "stdin_base64"),
    ({"command": "true", "background": "yes"}, "background"),
    ({"command": "true", "output": "hex"}, "output"),
    ({"command": "true", "output_limit": 1 << 40}, "output_limit"),
    ({"command": "true", "output_limit": -5}, "output_limit"),
])
def test_malformed_exec_bodies(sb, body, field):
    d, sid = sb
    r = d.post(exec_path(sid), json_body=body)
    assert_error(r, 400, field)


def test_malformed_json_and_ids(sb):
    d, sid = sb
    r = d.request("POST", exec_path(sid), body=b'{"command": "tru', headers={"Content-Type": "application/json"})
    assert_error(r, 400)
    r = d.request("POST", exec_path(sid), body=b"")
    assert_error(r, 400)
    r = d.post(exec_path("sb-" + "a" * 26), json_body={"command": "true"})
    assert_error(r, 404)
    assert d.get(f"/v1/sandboxes/{sid}/execs/ex-{'a' * 26}").status == 404
    assert d.get(f"/v1/sandboxes/{sid}/execs/nonsense").status in (400, 404)
    assert_error(d.get(f"/v1/sandboxes/{sid}/execs/ex-{'a' * 26}?follow=2"), 400, "follow")
    # The daemon is fine afterwards.
    assert d.exec(sid, argv=["true"])["exit_code"] == 0


def test_exec_on_deleted_sandbox_is_410(sandlotd):
    d = sandlotd
    sid = d.create()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert_error(d.post(exec_path(sid), json_body={"command": "true"}), 410)
    assert_error(d.get(f"/v1/sandboxes/{sid}/execs"), 410)


def test_delete_while_execs_run(sandlotd):
    d = sandlotd
    sid = d.create()
    tag = f"{random.randint(100000, 999999)}"
    out = {}

    def buffered():
        out["buffered"] = post_exec(d, sid, {"command": f"sleep 200.{tag}"}, timeout=30)

    t = threading.Thread(target=buffered)
    t.start()
    c, r = open_stream(d, sid, {"command": f"echo go; sleep 201.{tag}"}, timeout=30)
    assert json.loads(r.readline())["type"] == "start"
    bg = post_exec(d, sid, {"command": f"sleep 202.{tag}", "background": True})
    assert bg.status == 202
    if isolation_of(d) == "ns":
        assert wait_until(lambda: len(sleeps(tag)) == 3, 5), sleeps(tag)
    else:
        assert wait_until(lambda: running(d, sid, f"202.{tag}") and running(d, sid, f"200.{tag}"),
                          5 * slack(d))
    t0 = time.monotonic()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    t.join(20)
    assert not t.is_alive(), "a buffered exec hung after its sandbox was deleted"
    b = out["buffered"]
    assert b.status == 410 or (b.status == 200 and b.json()["signal"] == 9), b
    events = read_events(r)  # ends (with an exit event, or cut short)
    c.close()
    if events and events[-1]["type"] == "exit":
        assert events[-1]["result"]["signal"] == 9
    assert time.monotonic() - t0 < 15
    assert not hostscan.find_pids_containing(f".{tag}")


def test_sigterm_with_execs_of_every_kind_running(tmp_path):
    """A clean shutdown while a buffered, a streamed, a followed and a
    background exec run: every command is killed, every client gets an
    answer or a closed connection, sandlotd exits 0 (and, in a sanitizer
    build, reports no leak)."""
    from daemon import Daemon
    d = Daemon(tmp_path / "d").start()
    try:
        sid = d.create()
        tag = f"{random.randint(100000, 999999)}"
        out = {}

        def buffered():
            try:
                out["buffered"] = post_exec(d, sid, {"command": f"sleep 300.{tag}"}, timeout=30)
            except OSError as e:
                out["buffered"] = e

        t = threading.Thread(target=buffered)
        t.start()
        c, r = open_stream(d, sid, {"command": f"echo go; sleep 301.{tag}"}, timeout=30)
        assert json.loads(r.readline())["type"] == "start"
        bg = post_exec(d, sid, {"command": f"echo bg; sleep 302.{tag}", "background": True}).json()
        fc, fr = d.stream("GET", f"/v1/sandboxes/{sid}/execs/{bg['exec_id']}?follow=1", timeout=30)
        assert json.loads(fr.readline())["type"] == "start"
        assert wait_until(lambda: len(sleeps(tag)) == 3, 5), sleeps(tag)
        t0 = time.monotonic()
        rc = d.stop()
        assert rc == 0, f"sandlotd exited with {rc}:\n{d.logs()}"
        assert time.monotonic() - t0 < 15
        t.join(20)
        assert not t.is_alive()
        for resp, conn in ((r, c), (fr, fc)):
            try:
                read_events(resp)
            except (OSError, http.client.HTTPException):
                pass
            conn.close()
        assert not sleeps(tag)
    finally:
        if d.proc is not None:
            d.kill9()


@pytest.mark.ns_only(reason="watches the command's host process (its I/O counters): a guest's processes are not the host's")
def test_delete_is_not_held_back_by_a_stalled_stream(sb):
    """A client that stops reading a stream pauses the command (bounded
    memory) but cannot keep its sandbox from being deleted promptly."""
    d, sid = sb
    base_rss = rss_kb(d.proc.pid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(d.sock))
    body = json.dumps({"argv": ["yes"]}).encode()
    s.sendall(f"POST {exec_path(sid)} HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    try:
        # yes floods, we read nothing: the exec is held back
        assert wait_until(lambda: our_process(d, ["yes"]), 10)
        yes = our_process(d, ["yes"])
        assert wait_until(held_back(yes), 20, interval=0.1)
        assert rss_kb(d.proc.pid) - base_rss < 60 * 1024
        t0 = time.monotonic()
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
        assert time.monotonic() - t0 < 3, "DELETE waited for the stalled stream"
        assert wait_until(lambda: hostscan.cmdline(yes) != [b"yes"], 3)
    finally:
        s.close()
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "deleted"


def test_background_exec_keeps_the_sandbox_from_idling(sandlotd):
    d = sandlotd

    def state(sid):  # a GET is not activity
        return d.get(f"/v1/sandboxes/{sid}").json()["state"]

    sid = d.create(idle_timeout_seconds=1)
    r = post_exec(d, sid, {"command": "sleep 120", "background": True})
    assert r.status == 202, r
    eid = r.json()["exec_id"]
    # No API call on sid from here: a sandbox made now with the same idle
    # timeout expires after sid would have; once the reaper has ended it,
    # sid was past its idle deadline too, and only the exec kept it.
    control = d.create(idle_timeout_seconds=1)
    assert wait_until(lambda: state(control) == "expired", 20)
    assert state(sid) == "running"
    r = d.post(f"/v1/sandboxes/{sid}/execs/{eid}/kill", json_body={})
    assert r.status == 204, r
    assert wait_until(lambda: state(sid) == "expired", 10)
    assert d.get(f"/v1/sandboxes/{sid}").json()["end_reason"] == "idle"
