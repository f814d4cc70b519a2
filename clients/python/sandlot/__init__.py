"""sandlot: a Python client for sandlotd, the sandbox daemon (standard library only).

    from sandlot import Client
    with Client().create() as sb:
        print(sb.exec("python3 -c 'print(6 * 7)'").stdout)

Framework adapters live in submodules that import cleanly without their
framework: ``sandlot.langchain`` (SandlotTool), ``sandlot.deepagents``
(SandlotBackend) and ``sandlot.codeact`` (create_sandlot_eval).
"""
from .client import (  # noqa: F401
    DEFAULT_HOST, Client, CodeResult, CodeStream, ExecResult, ExecStream, Sandbox,
)
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

__all__ = ["Client", "Sandbox", "ExecResult", "CodeResult", "ExecStream", "CodeStream",
           "DEFAULT_HOST", *_errors_all]
