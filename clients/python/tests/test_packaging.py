"""The package as `pip install ./clients/python` installs it (the venv of
scripts/python-frameworks.sh does that): its modules, py.typed, the extras,
no dependencies of the core."""
import importlib.metadata as md

import pytest


def test_installed_package():
    try:
        dist = md.distribution("sandlot")
    except md.PackageNotFoundError:
        pytest.skip("sandlot is not pip-installed in this interpreter (make check's venv has it)")
    files = {str(f) for f in dist.files}
    for name in ("__init__.py", "client.py", "aio.py", "errors.py", "langchain.py", "deepagents.py",
                 "codeact.py", "py.typed"):
        assert f"sandlot/{name}" in files, sorted(files)
    assert set(dist.metadata.get_all("Provides-Extra")) == {"langchain", "deepagents", "codeact"}
    requires = dist.requires or []
    assert all("extra ==" in r for r in requires), requires     # the core needs nothing
    assert dist.version == __import__("sandlot").__version__
