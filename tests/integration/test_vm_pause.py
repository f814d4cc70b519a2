"""Pause and resume of vm sandboxes (docs/vm.md, "Pause and resume"):
through sandlotd, a pause with {"memory": true} saves the running guest
(QEMU's migration stream into the kept workspace, beside its disk) and a
resume loads it, with a new control connection, the guest's clock set and
its RNG reseeded; a pause without it keeps the disk only and the resume
boots afresh on it.  Processes, their memory and /tmp live through a
memory pause, a restart of the daemon and the resume.

Under TCG every boot and restore costs seconds: the cases share what they
can.
"""
import time

import pytest

import hostscan
from conftest import wait_until
from test_vm import BOOT, vm_daemon, vm_env  # noqa: F401 (fixture)
from vmguest import busybox_root, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


@pytest.fixture(scope="module")
def vm_root(tmp_path_factory):
    """test_vm.py's busybox root, with the few more applets used here."""
    return busybox_root(tmp_path_factory.mktemp("vmroot-pause"),
                        ("tr", "od", "date"))


def run(d, sid, command):
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": command}, timeout=BOOT)
    assert r.status == 200, r
    out = r.json()
    assert out["exit_code"] == 0, out
    return out["stdout"]


def kept_dir(d, sid):
    return d.data_dir / "vm" / "kept" / sid


def test_memory_pause_survives_a_daemon_restart(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "memory": 256 << 20},
                   timeout=BOOT)
        assert r.status == 201, r
        sid = r.json()["id"]
        # A process whose state is only in its memory: a value it made
        # itself, written out only when asked (SIGUSR1), and /tmp.
        pid = run(d, sid, "sh -c 'x=$(cat /proc/sys/kernel/random/uuid); echo $x > /tmp/x0; "
                          "trap \"echo \\$x > /tmp/x1\" USR1; while :; do sleep 1; done' "
                          ">/dev/null 2>&1 & echo $!").strip()
        assert wait_until(lambda: run(d, sid, "cat /tmp/x0 2>/dev/null; true").strip(), BOOT)
        x0 = run(d, sid, "cat /tmp/x0").strip()
        rand_before = run(d, sid, "od -An -N16 -tx1 /dev/urandom")
        boot_id = run(d, sid, "cat /proc/sys/kernel/random/boot_id")

        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memory": True}, timeout=BOOT)
        assert r.status == 200, r
        assert r.json()["state"] == "paused", r.json()
        assert sid not in hostscan.qemu_guests().values()
        files = sorted(p.name for p in kept_dir(d, sid).iterdir())
        assert files == ["disk.img", "lock", "state", "state.meta"], files
        assert "memory=268435456" in (kept_dir(d, sid) / "state.meta").read_text()

        # The daemon goes and comes back; time passes meanwhile (the
        # guest's clock must catch up at the resume, not go on from the
        # saved one's).
        assert d.stop() == 0, d.logs()
        time.sleep(5)
        d.start()
        assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        r = d.post(f"/v1/sandboxes/{sid}/resume", json_body={}, timeout=BOOT)
        assert r.status == 200, r
        assert r.json()["state"] == "running", r.json()
        # The state was loaded, not booted: same boot, same process.
        assert run(d, sid, "cat /proc/sys/kernel/random/boot_id") == boot_id
        assert run(d, sid, f"cat /proc/{pid}/cmdline | tr '\\0' ' '").startswith("sh -c x=")
        run(d, sid, f"kill -USR1 {pid}")
        assert wait_until(lambda: run(d, sid, "cat /tmp/x1 2>/dev/null; true").strip(), 30) == x0
        # The state was consumed: a later resume would not go back in time.
        assert not (kept_dir(d, sid) / "state").exists()
        # Clock set from the host's, RNG reseeded.
        guest_now = int(run(d, sid, "date +%s"))
        assert abs(guest_now - time.time()) < 3, (guest_now, time.time())
        assert run(d, sid, "od -An -N16 -tx1 /dev/urandom") != rand_before
        # The control connection is a new one and works as before.
        assert run(d, sid, "echo after; id -u").split() == ["after", "1000"]

        r = d.delete(f"/v1/sandboxes/{sid}")
        assert r.status in (200, 204), r
        assert sid not in hostscan.qemu_guests().values()
        assert not kept_dir(d, sid).exists()
    finally:
        assert d.stop() == 0, d.logs()


def test_files_only_pause_boots_afresh_on_the_disk(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm"}, timeout=BOOT)
        assert r.status == 201, r
        sid = r.json()["id"]
        boot_id = run(d, sid, "cat /proc/sys/kernel/random/boot_id")
        # Written and not synced by anyone: the pause syncs the guest.
        run(d, sid, "echo home > /home/user/h; echo tmp > /tmp/t; sleep 1000 >/dev/null 2>&1 &")
        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={}, timeout=BOOT)
        assert r.status == 200, r
        files = sorted(p.name for p in kept_dir(d, sid).iterdir())
        assert files == ["disk.img", "lock"], files
        r = d.post(f"/v1/sandboxes/{sid}/resume", json_body={}, timeout=BOOT)
        assert r.status == 200, r
        assert run(d, sid, "cat /home/user/h /tmp/t").split() == ["home", "tmp"]
        assert run(d, sid, "cat /proc/sys/kernel/random/boot_id") != boot_id
        assert "sleep" not in run(d, sid, "cat /proc/[0-9]*/comm")
        # Bad bodies are refused, naming the field.
        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memory": "yes"})
        assert r.status == 400 and 'field "memory" must be true or false' in r.json()["error"]["message"], r
        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memroy": True})
        assert r.status == 400 and 'unknown field "memroy"' in r.json()["error"]["message"], r
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
        assert not kept_dir(d, sid).exists()
    finally:
        assert d.stop() == 0, d.logs()


def test_ns_sandboxes_refuse_a_memory_pause(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        sid = d.create()
        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memory": True})
        assert r.status == 501 and r.error_code() == "not_supported", r
        assert "ns sandboxes pause their files only" in r.json()["error"]["message"], r
        assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    finally:
        assert d.stop() == 0, d.logs()


def test_from_snapshot_of_a_paused_vm_sandbox(session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "disk": "256M"}, timeout=BOOT)
        assert r.status == 201, r
        src = r.json()["id"]
        run(d, src, "echo kept > /home/user/k")
        boot_id = run(d, src, "cat /proc/sys/kernel/random/boot_id")
        # Running: nothing to copy yet.
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "from_snapshot": src})
        assert r.status == 409 and "is running; pause it first" in r.json()["error"]["message"], r
        # E2B's pause keeps the memory unless told not to (its default).
        r = d.post(f"/e2b/sandboxes/{src}/pause", json_body={"memory": "yes"})
        assert r.status == 400 and '"memory" must be true or false' in r.json()["message"], r
        r = d.post(f"/e2b/sandboxes/{src}/pause", json_body={}, timeout=BOOT)
        assert r.status == 204, r
        assert d.get(f"/v1/sandboxes/{src}").json()["state"] == "paused"
        assert (kept_dir(d, src) / "state").exists()

        # The copy boots afresh on a copy of the disk (a memory pause's
        # running state is the source's alone), with the snapshot's size.
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "from_snapshot": src},
                   timeout=BOOT)
        assert r.status == 201, r
        new = r.json()["id"]
        assert new != src and r.json()["options"]["from_snapshot"] == src, r.json()
        assert r.json()["options"]["disk"] == 256 << 20, r.json()
        assert run(d, new, "cat /home/user/k").strip() == "kept"
        run(d, new, "echo new > /home/user/k")
        assert sorted(p.name for p in kept_dir(d, new).iterdir()) == ["disk.img", "lock"]
        r = d.post(f"/e2b/sandboxes/{new}/pause", json_body={"memory": False}, timeout=BOOT)
        assert r.status == 204, r
        assert sorted(p.name for p in kept_dir(d, new).iterdir()) == ["disk.img", "lock"]

        # Mistakes are named: another disk size, another isolation.
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "from_snapshot": src,
                                               "disk": "512M"})
        assert r.status == 400 and "has the disk size of the snapshot" in r.json()["error"]["message"], r
        r = d.post("/v1/sandboxes", json_body={"isolation": "ns", "from_snapshot": src})
        assert r.status == 400, r
        assert f"sandbox {src} is a vm sandbox" in r.json()["error"]["message"], r
        assert not [p for p in (d.data_dir / "vm" / "kept").iterdir()
                    if p.name not in (src, new)]

        # The source is untouched: it resumes its own memory and files.
        r = d.post(f"/v1/sandboxes/{src}/resume", json_body={}, timeout=BOOT)
        assert r.status == 200, r
        assert run(d, src, "cat /proc/sys/kernel/random/boot_id") == boot_id
        assert run(d, src, "cat /home/user/k").strip() == "kept"
        for sid in (src, new):
            assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
            assert not kept_dir(d, sid).exists()
            assert sid not in hostscan.qemu_guests().values()
    finally:
        assert d.stop() == 0, d.logs()


def test_e2b_pause_of_an_ns_sandbox_keeps_its_files_only(session_dirs, tmp_path_factory, vm_env):
    # E2B's SDKs send {"memory": true} by default: an ns sandbox pauses its
    # files, as it always has there.
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env)
    try:
        sid = d.create()
        r = d.post(f"/e2b/sandboxes/{sid}/pause", json_body={"memory": True})
        assert r.status == 204, r
        assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        # Its workspace is an ns one: a vm cannot start on a copy of it.
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "from_snapshot": sid})
        assert r.status == 400, r
        assert f"sandbox {sid} is an ns sandbox" in r.json()["error"]["message"], r
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    finally:
        assert d.stop() == 0, d.logs()


def test_code_context_survives_pause_daemon_restart_resume(session_dirs, tmp_path_factory,
                                                           vm_guest_env):
    """A Python context's variables live through pause {"memory": true}, a
    restart of sandlotd and the resume: the new daemon re-attaches to the
    interpreter still running in the guest (init's ATTACH)."""
    d = vm_daemon(session_dirs, tmp_path_factory, vm_guest_env)
    try:
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "memory": 512 << 20},
                   timeout=BOOT)
        assert r.status == 201, r
        sid = r.json()["id"]
        r = d.post(f"/v1/sandboxes/{sid}/contexts", json_body={"language": "python"},
                   timeout=BOOT)
        assert r.status in (200, 201), r
        cid = r.json()["id"]

        def cell(src, **kw):
            r = d.post(f"/v1/sandboxes/{sid}/code",
                       json_body={"language": "python", "code": src, **kw}, timeout=BOOT)
            assert r.status == 200, r
            return r.json()

        assert cell("x = 41", context=cid)["status"] == "ok"
        assert cell("import os; os.getpid()", context=cid)["status"] == "ok"
        host_pid = cell("os.getpid()", context=cid)["value"]
        assert cell("y = 'default'")["status"] == "ok"

        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memory": True}, timeout=BOOT)
        assert r.status == 200, r
        assert d.stop() == 0, d.logs()
        d.start()
        r = d.post(f"/v1/sandboxes/{sid}/resume", json_body={}, timeout=BOOT)
        assert r.status == 200, r

        r = cell("x + 1", context=cid)
        assert r["status"] == "ok" and r["value"] == "42" and r["state_lost"] is False, r
        assert cell("os.getpid()", context=cid)["value"] == host_pid
        # Output and further cells flow on the new connection.
        r = cell("print('out', x); x = 7", context=cid)
        assert r["status"] == "ok" and "out 41" in r["stdout"], r
        assert cell("x", context=cid)["value"] == "7"
        # The default context was re-attached the same way.
        r = cell("y")
        assert r["value"] == "'default'" and r["state_lost"] is False, r
        # A pause and resume within one sandlotd re-attaches the same way.
        r = d.post(f"/v1/sandboxes/{sid}/pause", json_body={"memory": True}, timeout=BOOT)
        assert r.status == 200, r
        r = d.post(f"/v1/sandboxes/{sid}/resume", json_body={}, timeout=BOOT)
        assert r.status == 200, r
        r = cell("x * 6", context=cid)
        assert r["value"] == "42" and r["state_lost"] is False, r
        # A deleted context is gone for good, in the registry too.
        assert d.delete(f"/v1/sandboxes/{sid}/contexts/{cid}").status in (200, 204)
        r = d.post(f"/v1/sandboxes/{sid}/code",
                   json_body={"language": "python", "code": "1", "context": cid}, timeout=BOOT)
        assert r.status == 404, r

        r = d.delete(f"/v1/sandboxes/{sid}")
        assert r.status in (200, 204), r
        assert sid not in hostscan.qemu_guests().values()
    finally:
        assert d.stop() == 0, d.logs()
