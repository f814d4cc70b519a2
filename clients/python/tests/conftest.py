"""Fixtures for the sandlot Python package's tests: a real sandlotd.

`sandlotd` (session) starts build/bin/sandlotd on a unix socket in a
temporary directory with its own data dir, the way tests/integration/daemon.py
does; after each test no sandbox of it may still run, and at the end it must
stop cleanly with nothing left in its storage.  `Daemon` starts further ones
(TCP with a token).  Run as root after `make`:

    /usr/bin/python3 -m pytest -q clients/python/tests
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# SANDLOT_MUST_WORK=1 makes unlisted skips fail (tests/mustwork.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from mustwork import pytest_runtest_makereport  # noqa: E402,F401

from .pyclient_daemon import Daemon, SANDLOTD  # noqa: E402


@pytest.fixture(scope="session")
def base_dir():
    if os.geteuid() != 0:
        pytest.skip("sandlotd needs root (uid maps, cgroups, loop devices); run the tests as root")
    if not os.access(SANDLOTD, os.X_OK):
        pytest.fail(f"not built: {SANDLOTD} (run `make` first)", pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="sandlot-py-", dir="/var/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sandlotd(base_dir):
    d = Daemon(base_dir / "main").start()
    yield d
    rc = d.stop()
    assert rc == 0, f"sandlotd exited with {rc} on SIGTERM:\n{d.logs()}"
    assert not d.leftovers(), f"storage left after the session: {d.leftovers()}"


@pytest.fixture
def client(sandlotd):
    """A Client of the session's daemon; after the test no sandbox may run
    (each test destroys what it created)."""
    c = sandlotd.client()
    yield c
    left = c.list(state="running") + c.list(state="paused")
    for sb in left:
        sb.destroy(missing_ok=True)
    assert not left, f"sandboxes left running by the test: {[s.id for s in left]}"


@pytest.fixture
def sb(client):
    s = client.create(memory="256M", metadata={"test": "python-client"})
    yield s
    s.destroy(missing_ok=True)


@pytest.fixture
def fresh_modules():
    """Import sandlot's adapter modules afresh inside the test (e.g. with a
    fake framework on sys.path), and put sys.path and sys.modules back."""
    saved_path = list(sys.path)
    saved = dict(sys.modules)

    def load(*fake_dirs):
        for d in fake_dirs:
            sys.path.insert(0, str(d))
        for name in list(sys.modules):
            if name.startswith(("sandlot.langchain", "sandlot.deepagents", "sandlot.codeact",
                                "langchain_core", "deepagents")):
                del sys.modules[name]
        import importlib
        return importlib

    yield load
    sys.path[:] = saved_path
    for name in list(sys.modules):
        if name not in saved:
            del sys.modules[name]
    sys.modules.update(saved)
