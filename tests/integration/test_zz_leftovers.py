"""Runs last (files are collected in name order): after the whole session,
nothing of ours is left on the host — processes, mounts, cgroups, loop
devices, workspaces, network namespaces — and once the session's storage
pools are unmounted, not even their mounts and loop devices."""
import os
import shutil
import subprocess

import pytest

from conftest import drain_spares, session_baseline, wait_cleanup, wait_until
import hostscan


@pytest.mark.leftovers
def test_nothing_left_behind(session_dirs, sandlot):
    # One more run, so the check holds even when this file runs alone.
    r = sandlot.run(["--", "true"])
    assert r.rc == 0, r
    data_dir = session_dirs["data_dir"]
    before = session_baseline()
    wait_cleanup(data_dir)
    wait_until(lambda: not hostscan.leftovers(before, data_dir), 10)
    problems = hostscan.leftovers(before, data_dir)

    # No sandbox init of ours orphaned (hostscan.Owner: other users' are not ours).
    own = hostscan.owner()
    for pid in hostscan.init_pids() - before["inits"]:
        if hostscan.ppid(pid) in (0, 1) and own.is_our_init(pid):
            problems.append(f"orphaned sandlot-init {pid}")
    # losetup agrees with /sys/block.
    losetup = shutil.which("losetup") or "/usr/sbin/losetup"
    if os.access(losetup, os.X_OK):
        out = subprocess.run([losetup, "-a"], capture_output=True, text=True).stdout
        for ln in out.splitlines():
            if str(data_dir) in ln and "/storage/pool.img" not in ln:
                problems.append(f"losetup: {ln}")
    # No mount of ours in the host's mount table, sandlot-named or from a
    # loop device backed by our storage, but the storage pools' own.
    ours = {dev for dev, bf in hostscan.loop_backing_files().items()
            if bf.startswith(str(data_dir)) and not hostscan.is_pool_image(bf)}
    for ln in open("/proc/self/mountinfo"):
        if hostscan.is_pool_mount(ln):
            continue
        if any(f" {dev} " in ln for dev in ours) or str(data_dir) in ln:
            problems.append(f"mount: {ln.strip()}")
    # Every sandbox cgroup of ours made during the session is gone.
    for cg in hostscan.sandbox_cgroups() - before["cgroups"]:
        if own.is_ours(hostscan.sandbox_id(cg)):
            problems.append(f"cgroup left: {cg} (procs {hostscan.cgroup_procs(cg)})")
    drain_spares(data_dir)
    # No prepared cgroup kept for our data dirs once every daemon of the
    # session has stopped and `sandlot drain` removed the runs' spares (hostscan.leftovers() names only those whose
    # preparer is gone).
    for pool, pool_dd in hostscan.cgroup_pools().items():
        if pool_dd == str(data_dir) or pool_dd.startswith(str(data_dir) + "/"):
            for name in sorted(hostscan.prepared_cgroups(pool)):
                problems.append(f"prepared cgroup left: {name} in {pool}")
    problems += hostscan.pool_problems(data_dir)
    # The spare network namespaces and cgroups runs keep for the next ones
    # (bounded, checked by leftovers() above) go with `sandlot drain`.
    for pool, pool_dd in hostscan.spare_pools().items():
        if pool_dd == str(data_dir) or pool_dd.startswith(str(data_dir) + "/"):
            problems.append(f"spare network namespaces left after sandlot drain: {pool}")
    for ln in open("/proc/self/mountinfo"):
        if hostscan.NETNS_SPARE_BASE in ln and any(
                ln.split()[4].startswith(hostscan.spare_pool_of(d) + "/")
                for d in [data_dir]):
            problems.append(f"spare mount left after sandlot drain: {ln.strip()}")
    # The pools themselves go when unmounted: then no loop device, no mount.
    hostscan.unmount_pools(data_dir)

    # A pool's loop device may outlive its unmount while another mount
    # namespace (anyone's, made while the pool was mounted) still holds a
    # copy of the mount: that is the other namespace's hold, and it goes
    # with it.  A device no namespace holds is a leak.
    def pool_remains():
        left = hostscan.lingering_pool_loops(data_dir)
        left += [f"pool mount {mp}" for mp in hostscan.pool_mounts(data_dir)]
        return left
    # A copy lazily detached by a sandbox starting elsewhere (its old root)
    # shows in no mountinfo but holds the device until it goes: over 10 s
    # once on a host with a load of 8.
    wait_until(lambda: not pool_remains(), 30)
    problems += pool_remains()
    # Nothing of the network tests' fake internet (fakenet.py): its network
    # namespaces, veths and processes, and no egress nftables table outside
    # a sandbox's own namespace.
    problems += hostscan.network_leftovers(before)

    assert not problems, "left behind after the session:\n  " + "\n  ".join(sorted(set(problems)))
