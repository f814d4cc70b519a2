"""The Deep Agents sandbox providers' standard tests (langchain-tests'
SandboxIntegrationTests, the version pinned in constraints.txt) against
SandlotBackend on a real sandlotd: every test of the suite, sync and async.
Needs the frameworks' venv (scripts/python-frameworks.sh; make check runs it).
"""
import pytest

pytest.importorskip("langchain_tests", reason="the frameworks' tests run in the venv of "
                                              "scripts/python-frameworks.sh (make check does that)")

from langchain_tests.integration_tests import SandboxIntegrationTests  # noqa: E402

from sandlot.deepagents import SandlotBackend  # noqa: E402


class TestSandlotBackendStandard(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self, sandlotd):
        backend = SandlotBackend(client=sandlotd.client(), sandbox_options={
            "memory": "1G", "metadata": {"test": "deepagents-standard"}})
        try:
            yield backend
        finally:
            backend.close()
