"""Spare network namespaces (src/linux/netns.h, "spare namespaces") and
cgroups (src/linux/cgroup.h, "spares of sandlot run"): the cleanup helper
of a `sandlot run` leaves a bounded few for the next runs of its data dir,
the next run's sandbox lives in them, `sandlot drain` removes them, a broken
one is refused, and those of a removed data dir are swept."""
import os
import re
import shutil
import subprocess

from conftest import SANDLOT, Sandlot, wait_cleanup
import hostscan

NETNS = ["--storage", "tmpfs", "--", "readlink", "/proc/self/ns/net"]


def run_netns(sl):
    r = sl.run(NETNS)
    assert r.rc == 0, r
    m = re.fullmatch(r"net:\[(\d+)\]\n", r.stdout)
    assert m, r
    return int(m.group(1))


def free_inodes(sl):
    """{name: namespace inode} of the free spares of sl's data dir."""
    pool = hostscan.spare_pool_of(sl.data_dir)
    free, mounted = hostscan.spares(pool)
    assert free <= mounted, (free, mounted)
    return {n: os.stat(os.path.join(pool, n + ".ns")).st_ino for n in free}


def drain(sl):
    r = subprocess.run([str(SANDLOT), "drain"], env=sl.env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r
    return int(r.stdout)


def test_next_run_lives_in_a_spare(session_dirs):
    sl = Sandlot(session_dirs["base"] / "spares-next")
    try:
        run_netns(sl)
        wait_cleanup(sl.data_dir)
        spare = free_inodes(sl)
        # Bounded, and each a network namespace of its own.
        assert 1 <= len(spare) <= hostscan.NETNS_SPARE_MAX, spare
        assert len(set(spare.values())) == len(spare)
        assert open(os.path.join(hostscan.spare_pool_of(sl.data_dir), "data-dir")).read() == \
            f"{sl.data_dir}\n"
        second = run_netns(sl)
        assert second in spare.values(), (second, spare)
        wait_cleanup(sl.data_dir)
        # The one taken is unmounted and gone; others were made in its place.
        after = free_inodes(sl)
        taken = [n for n, ino in spare.items() if ino == second]
        assert taken and taken[0] not in after, (taken, after)
        assert 1 <= len(after) <= hostscan.NETNS_SPARE_MAX, after
        assert hostscan.spare_problems(sl.data_dir) == []
    finally:
        wait_cleanup(sl.data_dir)
        drain(sl)


def test_drain_removes_them(session_dirs):
    sl = Sandlot(session_dirs["base"] / "spares-drain")
    run_netns(sl)
    wait_cleanup(sl.data_dir)
    n = len(free_inodes(sl))
    assert n >= 1
    cgroups = hostscan.prepared_cgroups(spare_cgroup_pool(sl.data_dir))
    assert cgroups
    assert drain(sl) == n + len(cgroups)
    assert spare_cgroup_pool(sl.data_dir) is None
    pool = hostscan.spare_pool_of(sl.data_dir)
    assert not os.path.exists(pool)
    assert pool not in open("/proc/self/mountinfo").read()
    assert drain(sl) == 0  # nothing left: a no-op
    r = subprocess.run([str(SANDLOT), "drain", "extra"], env=sl.env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and 'unexpected argument "extra"' in r.stderr, r


def test_a_spare_that_is_not_a_namespace_is_refused(session_dirs):
    """A marker whose mount point holds no namespace (an unmount under it,
    a failed fill) is taken, removed, and the run makes its own."""
    sl = Sandlot(session_dirs["base"] / "spares-bare")
    pool = hostscan.spare_pool_of(sl.data_dir)
    os.makedirs(pool, mode=0o700)
    try:
        with open(os.path.join(pool, "data-dir"), "w") as f:
            f.write(f"{sl.data_dir}\n")
        for suffix in (".ns", ".free"):
            open(os.path.join(pool, "bareone" + suffix), "w").close()
        bare = os.stat(os.path.join(pool, "bareone.ns")).st_ino
        ino = run_netns(sl)
        assert ino != bare
        wait_cleanup(sl.data_dir)
        left = os.listdir(pool)
        assert "bareone.ns" not in left and "bareone.free" not in left, left
        assert hostscan.spare_problems(sl.data_dir) == []
    finally:
        wait_cleanup(sl.data_dir)
        drain(sl)


def test_spares_of_a_removed_data_dir_are_swept(session_dirs):
    gone = Sandlot(session_dirs["base"] / "spares-gone")
    run_netns(gone)
    wait_cleanup(gone.data_dir)
    pool = hostscan.spare_pool_of(gone.data_dir)
    assert free_inodes(gone)
    shutil.rmtree(gone.data_dir)
    # A run of another data dir collects what is stale (the first run of a
    # data dir always does: at most once a minute per data dir after that).
    other = Sandlot(session_dirs["base"] / "spares-sweeper")
    try:
        run_netns(other)
        wait_cleanup(other.data_dir)
        assert not os.path.exists(pool)
        assert pool + "/" not in open("/proc/self/mountinfo").read()
    finally:
        wait_cleanup(other.data_dir)
        drain(other)


def spare_cgroup_pool(data_dir):
    pools = [p for p, dd in hostscan.cgroup_pools().items() if dd == str(data_dir)]
    assert len(pools) <= 1, pools
    return pools[0] if pools else None


def test_next_run_takes_a_spare_cgroup(session_dirs):
    sl = Sandlot(session_dirs["base"] / "spares-cgroup")
    try:
        r = sl.run(["--json", "--storage", "tmpfs", "--", "true"])
        assert r.rc == 0, r
        wait_cleanup(sl.data_dir)
        pool = spare_cgroup_pool(sl.data_dir)
        assert pool and hostscan.is_spare_pool(pool), pool
        names = hostscan.prepared_cgroups(pool)
        assert 1 <= len(names) <= hostscan.CGROUP_SPARE_MAX, names
        # Kept (no preparer, but bounded and its data dir is there) ...
        assert not hostscan.pool_has_preparer(pool)
        assert hostscan.orphaned_prepared_cgroups(sl.data_dir) == {}
        # ... and what the next run's sandbox is made of.
        r = sl.run(["--json", "--storage", "tmpfs", "--", "true"])
        assert r.rc == 0, r
        assert r.json()["sandbox_id"] in names, (r.json()["sandbox_id"], names)
        wait_cleanup(sl.data_dir)
        # `sandlot drain` removes them, cgroups and pool.  (On a host
        # shared with an older sandlot, whose stale collector drains every
        # pool without a preparer, there may be none left by now.)
        left = hostscan.prepared_cgroups(pool)
        drained = drain(sl)
        assert drained >= len(left)
        assert not os.path.exists(pool)
        for name in left:
            assert not any(cg.endswith("/" + name) for cg in hostscan.sandbox_cgroups()), name
    finally:
        wait_cleanup(sl.data_dir)
        drain(sl)


def test_spare_cgroups_of_a_removed_data_dir_are_drained(session_dirs):
    gone = Sandlot(session_dirs["base"] / "spares-cg-gone")
    assert gone.run(["--storage", "tmpfs", "--", "true"]).rc == 0
    wait_cleanup(gone.data_dir)
    pool = spare_cgroup_pool(gone.data_dir)
    names = hostscan.prepared_cgroups(pool)
    assert names
    shutil.rmtree(gone.data_dir)
    # Now an orphan, for the leftover checks and for the reclaim, which a
    # run of a new data dir does at once.
    assert hostscan.orphaned_prepared_cgroups(session_dirs["base"] / "spares-cg-gone")
    other = Sandlot(session_dirs["base"] / "spares-cg-sweeper")
    try:
        assert other.run(["--storage", "tmpfs", "--", "true"]).rc == 0
        wait_cleanup(other.data_dir)
        assert not os.path.exists(pool)
        for name in names:
            assert not any(cg.endswith("/" + name) for cg in hostscan.sandbox_cgroups()), name
    finally:
        wait_cleanup(other.data_dir)
        drain(other)
