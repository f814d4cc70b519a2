"""Cold vm creates restored from a template (docs/vm.md, "Fast creates"):
sandlotd with vm sandboxes as its default saves a booted template VM, and
cold creates of the same machine restore it instead of booting, each with
a workspace disk, a clock and random state of its own; a template whose
files changed is not used.
"""
import os
import time

import hostscan
from conftest import wait_until
from test_vm import BOOT, guest_release, pytestmark, qemu_of, vm_daemon, vm_env, vm_root  # noqa: F401

PROBE = ("cat /proc/sys/kernel/random/boot_id; "
         "busybox head -c 32 /dev/urandom | busybox od -An -tx1 | busybox tr -d ' \\n'; echo; "
         "busybox date +%s; ls -A /home/user; uname -r")


def restored(sid):
    """Whether the sandbox's QEMU was started on a saved state."""
    argv = hostscan.cmdline(qemu_of(sid))
    return b"-incoming" in argv and b"fd:5" in argv


def templates(d):
    return sorted(p.name for p in (d.data_dir / "vm" / "templates").glob("*.key"))


def test_clones_of_a_template_have_their_own_disk_clock_and_randomness(
        session_dirs, tmp_path_factory, vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env, "--default-isolation", "vm")
    try:
        assert wait_until(lambda: templates(d), BOOT), d.logs()
        # No VM of the template's making is left running.
        assert wait_until(lambda: not [s for p, s in hostscan.qemu_guests().items()
                                       if hostscan.is_descendant(p, d.pid)], 10)
        before = int(time.time())
        out = {}
        for name in ("a", "b"):
            r = d.post("/v1/sandboxes", json_body={}, timeout=BOOT)
            assert r.status == 201, r
            sid = r.json()["id"]
            assert restored(sid), hostscan.cmdline(qemu_of(sid))
            res = d.exec(sid, command=PROBE)
            assert res["exit_code"] == 0, res
            out[name] = (sid, res["stdout"].split("\n"))
        (sa, a), (sb, b) = out["a"], out["b"]
        # Their own random state: boot ids and random bytes differ.
        assert a[0] != b[0], (a, b)
        assert len(a[1]) == 64 and a[1] != b[1], (a, b)
        # Their own clock: the host's at the create, not the template's.
        for lines in (a, b):
            assert before - 2 <= int(lines[2]) <= int(time.time()) + 2, (before, lines)
        # A fresh workspace each (ls printed nothing), and the guest's kernel.
        assert a[3] == b[3] == guest_release(), (a, b)
        assert d.exec(sa, command="echo mine > /home/user/f; cat /home/user/f")["stdout"] == "mine\n"
        res = d.exec(sb, command="ls -A /home/user")
        assert res["stdout"] == "", res
        for sid in (sa, sb):
            assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
        # A changed root image (here: its mtime) is another machine: the
        # template is not used, the create boots.
        root = vm_env["SANDLOT_VM_ROOT"]
        st = os.stat(root)
        os.utime(root, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        r = d.post("/v1/sandboxes", json_body={}, timeout=BOOT)
        assert r.status == 201, r
        sid = r.json()["id"]
        assert not restored(sid)
        assert d.exec(sid, argv=["uname", "-r"])["stdout"].strip() == guest_release()
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
    finally:
        assert d.stop() == 0, d.logs()
    assert not [s for p, s in hostscan.qemu_guests().items() if hostscan.is_descendant(p, d.pid)]
