"""Fast vm creates (docs/vm.md, "Fast creates"): sandlotd's warm pool of
booted vm sandboxes (--pool vm:IMAGE=N), handed out to requests with
"isolation": "vm" only, and nothing of a pooled VM left after a kill -9.

Under TCG every boot costs seconds: each test boots as few VMs as it can.
"""
import os
import time

import hostscan
from conftest import wait_until
from test_vm import BOOT, guest_release, pytestmark, qemu_of, vm_daemon, vm_env, vm_root  # noqa: F401


def guests_of(d):
    """Ids of the vm sandboxes whose QEMU this daemon started (other
    daemons on the host may have theirs)."""
    return [s for p, s in hostscan.qemu_guests().items() if hostscan.is_descendant(p, d.pid)]


def pool_state(d, name):
    r = d.get("/v1/health")
    assert r.status == 200, r
    return r.json()["pool"][name]


def test_vm_pool_hands_out_booted_vms_to_vm_requests_only(session_dirs, tmp_path_factory,
                                                          vm_env):
    d = vm_daemon(session_dirs, tmp_path_factory, vm_env, "--pool", "vm:1")
    try:
        assert wait_until(lambda: pool_state(d, "vm:host")["ready"] == 1, BOOT), d.logs()
        # A vm pool makes the daemon save a vm template too (its own VM, gone
        # once saved): the pool's refills restore it.
        assert wait_until(lambda: list((d.data_dir / "vm" / "templates").glob("*.key")), BOOT)
        assert wait_until(lambda: len(guests_of(d)) == 1, 10), guests_of(d)
        pooled = guests_of(d)
        # An ns request is not served by the vm pool (and there is no ns pool).
        r = d.post("/v1/sandboxes", json_body={})
        assert r.status == 201, r
        assert r.json()["isolation"] == "ns"
        assert "Sandlot-Pool" not in r.headers, r.headers
        assert d.delete(f"/v1/sandboxes/{r.json()['id']}").status in (200, 204)
        # A vm request the pool cannot serve (other limits) is a miss that
        # the cold create answers, and the pooled VM stays.
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "memory": "64M"})
        assert r.status == 400, r
        assert "a vm sandbox needs at least 128M of memory" in r.json()["error"]["message"], r
        assert pool_state(d, "vm:host")["ready"] == 1
        # A vm request with the default options gets the booted VM at once.
        t0 = time.monotonic()
        r = d.post("/v1/sandboxes", json_body={"isolation": "vm", "env": {"WHO": "pooled"}})
        handout = time.monotonic() - t0
        assert r.status == 201, r
        assert r.headers.get("Sandlot-Pool") == "hit", r.headers
        sid = r.json()["id"]
        assert r.json()["isolation"] == "vm" and r.json()["accel"] in ("tcg", "kvm"), r.json()
        qemu_of(sid)
        assert [sid] == pooled, (sid, pooled)
        # Far below a boot under TCG (seconds); generous for a loaded host.
        assert handout < 1.0, handout
        out = d.exec(sid, command='uname -r; echo "$WHO"; id -u; ls -A /home/user')
        assert out["stdout"].split() == [guest_release(), "pooled", "1000"], out
        # The pool refills behind the hand-out with a VM of its own.
        assert wait_until(lambda: pool_state(d, "vm:host")["ready"] == 1, BOOT), d.logs()
        refill = [s for s in guests_of(d) if s != sid]
        assert len(refill) == 1, guests_of(d)
        m = d.get("/metrics").body.decode()
        assert 'sandlot_pool_hits_total{image="vm:host"} 1' in m, m
        assert 'sandlot_pool_misses_total{image="vm:host",reason="options"} 1' in m, m
        assert d.delete(f"/v1/sandboxes/{sid}").status in (200, 204)
        assert wait_until(lambda: sid not in hostscan.qemu_guests().values(), 10)
    except BaseException:
        d.stop()
        raise
    # kill -9 with a pooled VM: it dies with the daemon, and the next start
    # (without a pool) removes its files, link, cgroup and marker.
    d.kill9()
    assert wait_until(lambda: refill[0] not in hostscan.qemu_guests().values(), 10), \
        "a pooled QEMU outlived its daemon"
    assert (d.data_dir / "vm" / refill[0]).exists(), "nothing left: the test tests nothing"
    assert (d.data_dir / "pool" / refill[0]).exists()
    d.extra_args = []
    d.start()
    try:
        assert wait_until(lambda: not (d.data_dir / "vm" / refill[0]).exists(), 10)
        assert wait_until(lambda: not (d.data_dir / "pool" / refill[0]).exists(), 10)
        assert not os.path.lexists(f"/run/sandlot/vm/{refill[0]}")
        assert not [cg for cg in hostscan.sandbox_cgroups() if cg.endswith("/" + refill[0])]
    finally:
        assert d.stop() == 0, d.logs()


def test_pool_isolation_prefix_is_checked(session_dirs, tmp_path_factory, vm_env):
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-vmpool-bad", numbered=True)
    d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / base.name, env=vm_env,
               extra_args=["--pool", "xen:host=1"])
    try:
        d.start()
    except RuntimeError as e:
        assert 'invalid --pool "xen:host=1"' in str(e), e
    else:
        d.stop()
        raise AssertionError("sandlotd accepted --pool xen:host=1")
