"""Runs last (files are collected in name order): after the whole session,
nothing of ours is left on the host — processes, mounts, cgroups, loop
devices, storage images, network namespaces."""
import os
import shutil
import subprocess

import pytest

from conftest import session_baseline, wait_until
import hostscan


@pytest.mark.leftovers
def test_nothing_left_behind(session_dirs, sandlot):
    # One more run, so the check holds even when this file runs alone.
    r = sandlot.run(["--", "true"])
    assert r.rc == 0, r
    data_dir = session_dirs["data_dir"]
    before = session_baseline()
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
            if str(data_dir) in ln:
                problems.append(f"losetup: {ln}")
    # No mount of ours in the host's mount table, sandlot-named or from a
    # loop device backed by our storage.
    ours = {dev for dev, bf in hostscan.loop_backing_files().items() if bf.startswith(str(data_dir))}
    for ln in open("/proc/self/mountinfo"):
        if any(f" {dev} " in ln for dev in ours) or str(data_dir) in ln:
            problems.append(f"mount: {ln.strip()}")
    # Every sandbox cgroup of ours made during the session is gone.
    for cg in hostscan.sandbox_cgroups() - before["cgroups"]:
        if own.is_ours(hostscan.sandbox_id(cg)):
            problems.append(f"cgroup left: {cg} (procs {hostscan.cgroup_procs(cg)})")
    # Nothing of the network tests' fake internet (fakenet.py): its network
    # namespaces, veths and processes, and no egress nftables table outside
    # a sandbox's own namespace.
    problems += hostscan.network_leftovers(before)
    storage = data_dir / "storage"
    if storage.is_dir() and list(storage.iterdir()):
        problems.append(f"storage images left: {sorted(os.listdir(storage))}")

    assert not problems, "left behind after the session:\n  " + "\n  ".join(sorted(set(problems)))
