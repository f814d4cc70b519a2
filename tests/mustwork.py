"""SANDLOT_MUST_WORK=1 (set by .ci/run) for the pytest suites: a skipped test
fails unless tests/must-work-skips.txt lists it with a reason.  Each
suite's conftest.py imports pytest_runtest_makereport from here."""
import os
from pathlib import Path

import pytest

LIST = Path(__file__).resolve().parent / "must-work-skips.txt"


def allowed_skips():
    """Node ids (without parametrisation) listed with a reason."""
    out = set()
    try:
        lines = LIST.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        entry, sep, reason = line.partition("#")
        entry = entry.strip()
        if entry and sep and reason.strip() and "::" in entry:
            out.add(entry)
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or os.environ.get("SANDLOT_MUST_WORK") != "1":
        return
    if hasattr(rep, "wasxfail"):
        return
    nodeid = item.nodeid.split("[", 1)[0]
    if nodeid in allowed_skips() or item.nodeid in allowed_skips():
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    rep.outcome = "failed"
    rep.longrepr = (f"skipped ({reason}), and SANDLOT_MUST_WORK=1: a skip must be listed "
                    f"in tests/must-work-skips.txt with its reason")
