"""Shared by every pytest suite under tests/ (integration, interp):
SANDLOT_MUST_WORK=1 makes unlisted skips fail (mustwork.py).

It lives here rather than in each suite's directory: the suites import their
own conftest by name (`from conftest import ...`), so a second conftest.py
in a sibling directory would shadow the integration suite's when both run in
one pytest invocation, as scripts/check.sh runs them."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mustwork import pytest_runtest_makereport  # noqa: E402,F401
