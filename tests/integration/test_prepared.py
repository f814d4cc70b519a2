"""Prepared cgroups (src/linux/cgroup.h, "prepared cgroups"; docs/daemon.md,
"Prepared resources"): sandlotd keeps a set per data dir, a sandbox takes
one, and none outlives the daemon — drained when it stops, taken over by
the next daemon of the data dir or reclaimed by a stale collector when it
was killed.  `sandlot run`'s cleanup helper keeps a bounded few for the
next runs (the pool marked "spare"; test_spares.py)."""
import glob
import os
import time
from pathlib import Path

import pytest

import hostscan
from conftest import wait_cleanup, wait_until
from daemon import Daemon

PREPARED = 16  # PREPARED_SANDBOXES in src/daemon/daemon.h


@pytest.fixture
def own_daemon(session_dirs, tmp_path_factory):
    made = []

    def make():
        base = tmp_path_factory.mktemp("sandlotd-prep", numbered=True)
        d = Daemon(base, data_dir=session_dirs["data_dir"] / "daemon" / Path(base).name)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            d.stop()


def pool_of(data_dir):
    """The pool directory of `data_dir`, or None."""
    for pool, dd in hostscan.cgroup_pools().items():
        if dd == str(data_dir):
            return pool
    return None


def cgroup_dirs(name):
    out = []
    for g in hostscan.CGROUP_GLOBS:
        out += glob.glob(g.replace("sb-*", name))
    return out


def wait_full(d, n=PREPARED):
    """Wait until the daemon's pool holds n free cgroups; returns their names."""
    def full():
        pool = pool_of(d.data_dir)
        names = hostscan.prepared_cgroups(pool) if pool else set()
        return names if len(names) >= n else None
    names = wait_until(full, 30)
    assert names, f"the pool of {d.data_dir} never held {n} prepared cgroups: {pool_of(d.data_dir)}"
    return names


def test_daemon_prepares_cgroups_and_removes_them_when_it_stops(own_daemon):
    d = own_daemon().start()
    names = wait_full(d)
    pool = pool_of(d.data_dir)
    assert hostscan.pool_has_preparer(pool)
    for n in names:
        dirs = cgroup_dirs(n)
        assert dirs, f"prepared cgroup {n} has no directory"
        assert all(hostscan.cgroup_procs(c) == [] for c in dirs), dirs
    # A creation takes one: the sandbox is named after it, it is no longer
    # free, and the daemon prepares another in its place.
    sid = d.create(memory="64M", disk="16M")
    assert sid in names, (sid, sorted(names))
    assert sid not in hostscan.prepared_cgroups(pool)
    assert all(hostscan.cgroup_procs(c) for c in cgroup_dirs(sid)), "the sandbox is not in its cgroup"
    refilled = wait_full(d)
    assert sid not in refilled
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert wait_until(lambda: not cgroup_dirs(sid), 10), "the sandbox's cgroup outlived it"
    # Stopping removes every free one, from every hierarchy.
    assert d.stop() == 0
    assert hostscan.prepared_cgroups(pool) == set()
    left = [c for n in refilled for c in cgroup_dirs(n)]
    assert not left, f"prepared cgroups outlived sandlotd: {left}"
    assert not hostscan.pool_has_preparer(pool)
    assert pool_of(d.data_dir) is None, "the pool directory outlived sandlotd"


def test_killed_daemon_cgroups_are_taken_over_by_the_next(own_daemon):
    d = own_daemon().start()
    names = wait_full(d)
    d.kill9()
    orphaned = hostscan.orphaned_prepared_cgroups(d.data_dir)
    assert set().union(*orphaned.values()) == names, "the leftover check must see them"
    d.start()
    # The new daemon holds the pool and counts them as its own.
    assert not hostscan.orphaned_prepared_cgroups(d.data_dir)
    again = wait_full(d)
    assert names <= again and len(again) == PREPARED, (len(names & again), len(again))
    assert d.stop() == 0
    assert not [c for n in again for c in cgroup_dirs(n)]
    assert pool_of(d.data_dir) is None


def test_killed_daemon_cgroups_are_reclaimed_by_a_collector(own_daemon, sandlot):
    """With no daemon of that data dir started again, the next stale
    collection of any sandlot process (here `sandlot run` on another data
    dir) removes them."""
    d = own_daemon().start()
    names = wait_full(d)
    d.kill9()
    assert hostscan.orphaned_prepared_cgroups(d.data_dir)
    # Collections run at most once a minute per data dir: make the last
    # one look old instead of waiting.
    stamp = sandlot.data_dir / "gc.stamp"
    if stamp.exists():
        os.utime(stamp, (time.time() - 120, time.time() - 120))
    r = sandlot.run(["--", "true"])
    assert r.rc == 0, r
    wait_cleanup(sandlot.data_dir)  # the run's helper collects
    assert not hostscan.orphaned_prepared_cgroups(d.data_dir)
    left = [c for n in names for c in cgroup_dirs(n)]
    assert not left, f"reclaimed prepared cgroups still there: {left}"
    assert pool_of(d.data_dir) is None, "the reclaimed pool's directory is still there"


def test_sandlot_run_prepares_a_bounded_few(sandlot):
    """A run's cleanup helper leaves at most CGROUP_SPARE_MAX prepared
    cgroups for its data dir (test_spares.py has the rest), in a pool
    marked "spare" that no process holds and no leftover check calls an
    orphan; a run takes them as sandlotd's."""
    for _ in range(3):
        r = sandlot.run(["--", "true"])
        assert r.rc == 0, r
        wait_cleanup(sandlot.data_dir)
        pool = pool_of(sandlot.data_dir)
        assert pool is not None
        assert 1 <= len(hostscan.prepared_cgroups(pool)) <= hostscan.CGROUP_SPARE_MAX, pool
        assert hostscan.is_spare_pool(pool)
        assert not hostscan.pool_has_preparer(pool)
        assert hostscan.orphaned_prepared_cgroups(sandlot.data_dir) == {}
