"""The E2B-compatible in-sandbox API on the wire, without E2B's SDKs (those
run in tests/e2b): Connect's envelopes and errors, and the races of
process.Process (many streams at once, a client that goes away, a sandbox
deleted while its commands run) — the cases the ThreadSanitizer run takes
(tests/tsan-tests.txt)."""
import base64
import json
import random
import struct
import threading
import time

import hostscan
from conftest import wait_until

STREAM = "application/connect+json"


def envelope(msg, flags=0):
    data = json.dumps(msg).encode()
    return bytes([flags]) + struct.pack(">I", len(data)) + data


def headers(sid, port=49983, ctype=STREAM):
    return {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(port), "Content-Type": ctype}


def frames(raw):
    """The envelopes of a stream's body: [(flags, message)]."""
    out, i = [], 0
    while i < len(raw):
        assert len(raw) - i >= 5, raw[i:]
        flags, n = raw[i], struct.unpack(">I", raw[i + 1:i + 5])[0]
        out.append((flags, json.loads(raw[i + 5:i + 5 + n])))
        i += 5 + n
    return out


def start(d, sid, command, stdin=False, timeout=60):
    body = envelope({"process": {"cmd": "/bin/bash", "args": ["-c", command]}, "stdin": stdin})
    return d.request("POST", "/e2b/process.Process/Start", body=body, headers=headers(sid),
                     timeout=timeout)


def events(raw):
    """(stdout, stderr, end event, end-of-stream message) of a Start stream."""
    fs = frames(raw)
    assert fs and fs[-1][0] == 0x02, fs
    out, err, end = b"", b"", None
    assert "start" in fs[0][1]["event"], fs[0]
    for flags, m in fs[1:-1]:
        ev = m["event"]
        if "data" in ev:
            d = ev["data"]
            out += base64.b64decode(d.get("stdout", ""))
            err += base64.b64decode(d.get("stderr", ""))
        elif "end" in ev:
            end = ev["end"]
    return out, err, end, fs[-1][1]


def test_start_stream_and_unary_errors(sandlotd):
    d = sandlotd
    sid = d.create()
    r = start(d, sid, "echo out; echo err >&2; exit 5")
    assert r.status == 200 and r.headers["Content-Type"] == STREAM
    out, err, end, eos = events(r.body)
    assert (out, err) == (b"out\n", b"err\n")
    assert end == {"exitCode": 5, "exited": True, "status": "exit status 5"}
    assert eos == {}
    # unary errors: Connect's {"code", "message"} with the status of the code
    r = d.request("POST", "/e2b/process.Process/SendSignal",
                  body=json.dumps({"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}).encode(),
                  headers=headers(sid, ctype="application/json"))
    assert r.status == 404 and r.json()["code"] == "not_found", r
    r = d.request("POST", "/e2b/filesystem.Filesystem/Stat", body=b'{"path": ',
                  headers=headers(sid, ctype="application/json"))
    assert r.status == 400 and r.json()["code"] == "invalid_argument", r
    r = d.request("POST", "/e2b/filesystem.Filesystem/Stat", body=b"{}",
                  headers=headers(sid, ctype="application/proto"))
    assert r.status == 415, r
    # a stream's error is the end of the stream
    r = d.request("POST", "/e2b/process.Process/Start", body=envelope({"process": {}})[:-2],
                  headers=headers(sid))
    fs = frames(r.body)
    assert r.status == 200 and fs[-1][0] == 0x02 and fs[-1][1]["error"]["code"] == "invalid_argument"
    r = d.request("POST", "/e2b/process.Process/Start", body=envelope({"process": {"cmd": "x"}}, 1),
                  headers=headers(sid))
    assert "compressed" in frames(r.body)[-1][1]["error"]["message"]
    # the wrong port, an unknown sandbox
    r = d.request("POST", "/e2b/process.Process/List", body=b"{}",
                  headers=headers(sid, port=8080, ctype="application/json"))
    assert r.status == 502, r
    r = d.request("POST", "/e2b/process.Process/List", body=b"{}",
                  headers=headers("sb-nosuchsandboxnosuchsandbox", ctype="application/json"))
    assert r.status == 502 and r.json()["sandboxId"] == "sb-nosuchsandboxnosuchsandbox", r


def test_concurrent_streams_connects_and_kills(sandlotd):
    """Twenty commands at once in two sandboxes, each read by its Start
    stream and by a Connect, fed stdin by pid, then killed: every stream
    ends with its command's end, nothing is left running.  (Output is
    checked where the command wrote it long before the kill: what is still
    in flight from the sandbox when its process group is SIGKILLed may not
    arrive.)"""
    d = sandlotd
    sids = [d.create(), d.create()]
    tag = f"{random.randint(100000, 999999)}"
    results = {}

    def run(i):
        sid = sids[i % 2]
        cmd = f"for n in $(seq 1 200); do echo line-$n; done; read x; echo got-$x >got-{i}; exec sleep 300.$((0)){tag}"
        results[i] = start(d, sid, cmd, stdin=True, timeout=120)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()

    def listed():
        n = 0
        for sid in sids:
            r = d.request("POST", "/e2b/process.Process/List", body=b"{}",
                          headers=headers(sid, ctype="application/json"))
            n += len(r.json()["processes"])
        return n == 20

    assert wait_until(listed, 30)
    procs = []
    for sid in sids:
        r = d.request("POST", "/e2b/process.Process/List", body=b"{}",
                      headers=headers(sid, ctype="application/json"))
        procs += [(sid, p["pid"]) for p in r.json()["processes"]]
    connects = {}

    def follow(sid, pid):
        connects[(sid, pid)] = d.request("POST", "/e2b/process.Process/Connect",
                                         body=envelope({"process": {"pid": pid}}),
                                         headers=headers(sid), timeout=120)

    followers = [threading.Thread(target=follow, args=p) for p in procs]
    for t in followers:
        t.start()
    for k, (sid, pid) in enumerate(procs):
        stdin = base64.b64encode(f"{k}\n".encode()).decode()
        r = d.request("POST", "/e2b/process.Process/SendInput",
                      body=json.dumps({"process": {"pid": pid}, "input": {"stdin": stdin}}).encode(),
                      headers=headers(sid, ctype="application/json"))
        assert r.status == 200, r
    assert wait_until(lambda: len(hostscan.find_pids_containing(f"300.0{tag}")) == 20, 30)
    # every command read the line sent to its own pid (the sleep, not its
    # bash, whose command line shows $((0)): the line was written)
    got = sorted(d.exec(sid, "cat got-*")["stdout"].split() for sid in sids)
    sent = sorted(f"got-{k}" for k in range(20))
    assert sorted(sum(got, [])) == sent, got
    for sid, pid in procs:
        r = d.request("POST", "/e2b/process.Process/SendSignal",
                      body=json.dumps({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}).encode(),
                      headers=headers(sid, ctype="application/json"))
        assert r.status == 200, r
    for t in threads + followers:
        t.join(60)
        assert not t.is_alive()
    for i, r in results.items():
        out, _, end, eos = events(r.body)
        lines = out.decode().splitlines()
        assert end["exited"] is False and end["status"] == "signal: killed", end
        assert lines == [f"line-{n}" for n in range(1, 201)] or len(lines) < 200 and \
            lines == [f"line-{n}" for n in range(1, len(lines) + 1)], lines[-3:]
    for r in connects.values():
        fs = frames(r.body)
        assert "start" in fs[0][1]["event"] and fs[-1] == (0x02, {}), fs[-3:]
        assert any("end" in m.get("event", {}) for _, m in fs), fs[-3:]
    assert not hostscan.find_pids_containing(f"300.0{tag}")


def test_client_gone_and_sandbox_deleted_while_commands_run(sandlotd):
    """A Start stream whose client hangs up leaves its command running
    (as envd does); deleting the sandbox then ends it and every stream on
    it promptly, and nothing is left."""
    d = sandlotd
    sid = d.create()
    tag = f"{random.randint(100000, 999999)}"
    body = envelope({"process": {"cmd": "/bin/bash", "args": ["-c", f"exec sleep 301.{tag}"]}})
    c = d.conn(30)
    c.request("POST", "/e2b/process.Process/Start", body=body, headers=headers(sid))
    r = c.getresponse()
    head = r.read(5)
    assert head[0] == 0
    c.close()  # gone before the command ends
    assert wait_until(lambda: hostscan.find_pids_containing(f"301.{tag}"), 10)
    out = {}

    def streamed():
        out["r"] = start(d, sid, f"yes | head -c 100000000 >/dev/null; exec sleep 302.{tag}", timeout=60)

    t = threading.Thread(target=streamed)
    t.start()
    assert wait_until(lambda: hostscan.find_pids_containing(f"302.{tag}"), 20)
    t0 = time.monotonic()
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    t.join(30)
    assert not t.is_alive(), "a Start stream hung after its sandbox was deleted"
    fs = frames(out["r"].body)
    assert fs[-1][0] == 0x02, fs[-2:]
    assert time.monotonic() - t0 < 15
    assert not hostscan.find_pids_containing(f".{tag}")
