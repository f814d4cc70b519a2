"""sandlotd in a memory cgroup of its own, started by hand as docs/daemon.md
says (a cgroup with a limit, the daemon's pid written into it before it
starts): it reports the limit, and sandboxes are not charged to it — a
command in a sandbox allocates far more than the daemon's limit and the
daemon's cgroup never comes near it.
"""
import os
import re
import stat
import uuid
from pathlib import Path

import pytest

import daemon as daemon_mod
from test_daemon_core import own_daemon  # noqa: F401

LIMIT = 192 << 20


def cgroup_dir():
    """A new memory cgroup for the daemon: (its directory, v1 or v2)."""
    name = "sandlot-test-daemon-" + uuid.uuid4().hex[:10]
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists():
        d = v1 / name
        d.mkdir()
        (d / "memory.limit_in_bytes").write_text(str(LIMIT))
        return d, 1
    root = Path("/sys/fs/cgroup")
    if "memory" in (root / "cgroup.controllers").read_text().split() \
            if (root / "cgroup.controllers").exists() else False:
        d = root / name
        d.mkdir()
        (d / "memory.max").write_text(str(LIMIT))
        return d, 2
    pytest.skip("no cgroup memory controller on this host (neither v1 memory nor v2 with memory)")


def test_daemon_in_a_cgroup_of_its_own_is_not_charged_for_sandboxes(own_daemon, tmp_path,
                                                                     monkeypatch):
    cg, version = cgroup_dir()
    # "By hand": a wrapper that joins the cgroup, then becomes sandlotd.
    wrapper = tmp_path / "sandlotd-in-cgroup"
    wrapper.write_text(f"#!/bin/sh\necho $$ > {cg}/cgroup.procs && exec {daemon_mod.SANDLOTD} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(daemon_mod, "SANDLOTD", wrapper)
    d = own_daemon()
    try:
        d.start()
        cgroup_lines = Path(f"/proc/{d.proc.pid}/cgroup").read_text()
        rel = "/" + cg.name
        assert re.search(rf"^\d+:(.*,)?memory(,.*)?:{rel}$" if version == 1 else rf"^0::{rel}$",
                         cgroup_lines, re.M), cgroup_lines
        assert f'memory_cgroup="{rel}" memory_limit={LIMIT}' in d.logs()
        r = d.post("/v1/sandboxes", json_body={"memory": "1G", "disk": "64M"})
        assert r.status == 201, r
        sid = r.json()["id"]
        # 400 MiB touched in the sandbox, twice the daemon's limit.
        r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"argv": [
            "python3", "-c",
            "b = bytearray(400 << 20)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "print(sum(b[::4096]))"]})
        assert r.status == 200, r
        res = r.json()
        assert res["exit_code"] == 0 and not res["oom_killed"], res
        assert res["stdout"].strip() == str((400 << 20) // 4096)
        if version == 1:
            assert int((cg / "memory.failcnt").read_text()) == 0
            assert int((cg / "memory.max_usage_in_bytes").read_text()) < LIMIT
        else:
            events = dict(ln.split() for ln in (cg / "memory.events").read_text().splitlines())
            assert events["max"] == "0" and events["oom"] == "0", events
        assert d.get("/v1/health").status == 200
        assert d.delete(f"/v1/sandboxes/{sid}").status == 204
        assert d.stop() == 0
    finally:
        if d.proc is not None:
            d.stop()
        os.rmdir(cg)
