"""SANDLOT_MUST_WORK=1 makes unlisted skips fail (tests/mustwork.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mustwork import pytest_runtest_makereport  # noqa: E402,F401
