"""vm sandboxes in sandlotd when something outside them goes wrong: a QEMU
killed from the host fails only its own sandbox, and a daemon killed with
SIGKILL leaves no QEMU, disk, cgroup or link behind once it restarts, and
reports its vm sandboxes lost; from inside the guest, its limits and kills.

These need what test_vm.py needs (build/vm, QEMU); the guest's root is the
image of the session (vm-root.recipe: conftest.py's vm_guest_env), as for the vm runs
of the cross-backend tests.
"""
import os
import signal
import time
from pathlib import Path

import pytest

import hostscan
from conftest import wait_until
from vmguest import missing

BOOT = 320  # bound on one boot under TCG: the backend's own is 300 s (vm-boot.c)

pytestmark = [pytest.mark.vm, pytest.mark.skipif(missing() is not None, reason=missing() or "")]


@pytest.fixture
def vm_daemon(session_dirs, tmp_path_factory, vm_guest_env):
    """Factory: a sandlotd whose sandboxes are vm sandboxes by default;
    every one still running at the end is stopped (exit 0 checked)."""
    from daemon import Daemon
    made = []

    def make(*extra):
        base = tmp_path_factory.mktemp("sandlotd-vmlife", numbered=True)
        d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name,
                   env=vm_guest_env, extra_args=["--default-isolation", "vm", *extra])
        made.append(d)
        return d.start()

    yield make
    for d in made:
        if d.proc is not None:
            assert d.stop() == 0, d.logs()


def create(d, **opts):
    r = d.post("/v1/sandboxes", json_body=opts, timeout=BOOT)
    assert r.status == 201, r
    assert r.json()["isolation"] == "vm", r.json()
    return r.json()["id"]


def state(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200, r
    return r.json()


def qemu_of(sid):
    pids = [p for p, s in hostscan.qemu_guests().items() if s == sid]
    assert len(pids) == 1, f"QEMU processes of {sid}: {pids}"
    return pids[0]


def traces_of(sid, d):
    """What is left on the host of vm sandbox `sid` of daemon `d`."""
    out = []
    if sid in hostscan.qemu_guests().values():
        out.append("its QEMU")
    if (d.data_dir / "vm" / sid).exists():
        out.append(f"{d.data_dir / 'vm' / sid}")
    if os.path.lexists(f"/run/sandlot/vm/{sid}"):
        out.append(f"/run/sandlot/vm/{sid}")
    out += [cg for cg in hostscan.sandbox_cgroups() if cg.endswith("/" + sid)]
    return out


def test_qemu_killed_from_outside_fails_only_its_sandbox(vm_daemon):
    d = vm_daemon()
    victim, other = create(d), create(d)
    os.kill(qemu_of(victim), signal.SIGKILL)
    assert wait_until(lambda: state(d, victim)["state"] == "failed", 30), state(d, victim)
    assert wait_until(lambda: not traces_of(victim, d), 10), traces_of(victim, d)
    r = d.post(f"/v1/sandboxes/{victim}/exec", json_body={"argv": ["true"]})
    assert r.status == 410, r
    # The other one goes on.
    r = d.post(f"/v1/sandboxes/{other}/exec", json_body={"command": "echo still here"}, timeout=BOOT)
    assert r.status == 200 and r.json()["stdout"] == "still here\n", r


def test_kill9_of_the_daemon_then_restart_reports_them_lost(vm_daemon):
    d = vm_daemon()
    ids = [create(d), create(d)]
    # A command running in one of them: it dies with its VM.
    r = d.post(f"/v1/sandboxes/{ids[0]}/exec", json_body={"command": "sleep 600", "background": True})
    assert r.status == 202, r
    qemus = {qemu_of(sid) for sid in ids}
    d.kill9()
    # QEMU dies with the daemon (its parent-death signal), at once.
    assert wait_until(lambda: not (qemus & set(hostscan.qemu_guests())), 10), "QEMU outlived sandlotd"
    assert any(traces_of(sid, d) for sid in ids), "nothing left to clean up: the test tests nothing"
    d.start()
    for sid in ids:
        s = state(d, sid)
        assert s["state"] == "lost" and s["end_reason"] == "lost: sandlotd restarted", s
    assert wait_until(lambda: not any(traces_of(sid, d) for sid in ids), 10), \
        {sid: traces_of(sid, d) for sid in ids}
    # The restarted daemon makes vm sandboxes again.
    sid = create(d)
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": ["true"]}, timeout=BOOT)
    assert r.status == 200 and r.json()["exit_code"] == 0, r


def test_inside_the_guest(vm_daemon):
    """What code in a vm sandbox sees and meets: the guest's own kernel,
    uid 1000 with no capabilities, none of the host's mounts, the
    sandbox's limits (memory, pids, disk) with the same results as ns (the
    timeouts are the cross-backend tests': test_daemon_exec, test_limits)."""
    d = vm_daemon()
    sid = create(d, memory="256M", pids=32, disk="64M")

    def run(command, **kw):
        r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": command, **kw}, timeout=BOOT)
        assert r.status == 200, r
        return r.json()

    out = run("uname -r; id -u; grep CapEff /proc/self/status; cat /proc/mounts")
    lines = out["stdout"].splitlines()
    assert lines[0] != os.uname().release, lines
    assert lines[1] == "1000" and lines[2].split() == ["CapEff:", "0000000000000000"], lines
    mounts = "\n".join(lines[3:])
    for ln in Path("/proc/self/mounts").read_text().splitlines():
        point = ln.split()[1]
        if point.startswith(("/var/tmp", "/work", "/home", "/srv", "/opt")):
            assert f" {point} " not in mounts, f"host mount {point} in the guest:\n{mounts}"
    assert str(d.data_dir) not in mounts
    # Memory: the command is OOM-killed, the sandbox lives.
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": [
        "python3", "-c", "b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"]},
        timeout=BOOT)
    assert r.status == 200, r
    out = r.json()
    assert out["oom_killed"] is True and out["signal"] == 9, out
    assert run("echo alive")["stdout"] == "alive\n"
    # Disk: ENOSPC at the disk's size, a clean error, not a kill.
    out = run("dd if=/dev/zero of=/home/user/big bs=1M count=100 2>&1; echo rc=$?; rm -f /home/user/big")
    assert "No space left on device" in out["stdout"] and "rc=1" in out["stdout"], out
    # Pids: forks beyond the limit fail, and are counted (last: the
    # sleeps that did start hold their pids for a while).
    out = run("for i in $(seq 1 64); do sleep 5 & done 2>/dev/null; wait; echo done")
    assert out["pids_limited"] is True, out


@pytest.mark.vm(slow=True)
def test_a_boot_slowed_by_the_host_is_waited_for(vm_daemon):
    """A boot takes QEMU about 2.5 s of CPU under TCG; how long on the
    clock depends on what it gets.  A sandbox of 0.03 CPU (its cgroup
    covers QEMU) boots in well over a minute, past the first 45 s wait: it
    boots all the same, since QEMU is still short of a boot's worth of
    CPU then (vm-boot.c), and the same holds for a machine so loaded
    that QEMU gets that little."""
    d = vm_daemon()
    t0 = time.monotonic()
    sid = create(d, cpus=0.03)
    took = time.monotonic() - t0
    print(f"boot at 0.03 CPU: {took:.1f} s")
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": "echo up"}, timeout=BOOT)
    assert r.status == 200 and r.json()["stdout"] == "up\n", r
    assert took > 45, f"booted in {took:.1f} s: not slow enough to test the wait past 45 s"
