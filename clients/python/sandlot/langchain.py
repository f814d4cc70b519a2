"""A LangChain tool that runs code in a sandlot sandbox: ``SandlotTool``.

    from sandlot import Client
    from sandlot.langchain import SandlotTool

    tool = SandlotTool(Client().create())        # or SandlotTool() to create one on first use
    tool.invoke({"code": "x = 6 * 7\\nprint(x)"})  # -> "42\\n"
    tool.invoke({"code": "x + 1"})                 # state is kept: "Out: 43"

With ``langchain_core`` installed, SandlotTool is a ``langchain_core.tools.
BaseTool`` (name, description, args_schema, ``_run``), usable by any
LangChain / LangGraph agent; errors the model can fix (a bad language) are
``ToolException``s, which ``handle_tool_error=True`` (the default here) hands
back to the model as the observation.  Without it, SandlotTool is a plain
class with the same attributes and ``invoke``/``run`` methods.

The arguments are ``code``, ``language`` ("python", "javascript" or "bash";
default python) and ``timeout`` (seconds; default the tool's
``timeout_seconds``, 300, which the description tells the model).  Each
language has one long-lived interpreter in the sandbox (its default code
context), so variables, imports and functions survive between calls.
``ainvoke`` runs natively on asyncio (sandlot.aio): it never blocks the
event loop.
"""
from ._format import format_code_result
from ._owned import OwnedSandbox
from .errors import SandlotError

try:  # the framework is optional
    from langchain_core.tools import BaseTool as _BaseTool
    from langchain_core.tools import ToolException
    HAVE_LANGCHAIN = True
except ImportError:
    HAVE_LANGCHAIN = False
    _BaseTool = object

    class ToolException(Exception):
        """Stands in for langchain_core.tools.ToolException."""

__all__ = ["SandlotTool", "HAVE_LANGCHAIN", "LANGUAGES", "ARGS_JSON_SCHEMA", "ToolException",
           "DEFAULT_TIMEOUT"]

LANGUAGES = ("python", "javascript", "bash")

DESCRIPTION = (
    "Run code in an isolated sandbox and get its output. Languages: python (default), "
    "javascript, bash. Each language keeps one long-lived interpreter, so variables, imports "
    "and functions defined in one call can be used in the next. Print what you want to see; "
    "the value of a final expression is shown as 'Out: ...'. Files live in /home/user. "
    "There is no network access."
)

DEFAULT_TIMEOUT = 300.0


def _describe(timeout):
    """The description with the default timeout the model should know."""
    if not timeout:
        return DESCRIPTION + " Runs have no time limit."
    return DESCRIPTION + (f" A run is interrupted after {timeout:g} seconds (its variables are "
                          f"kept); pass timeout for a different limit.")

ARGS_JSON_SCHEMA = {
    "title": "SandlotToolInput",
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "the code to run"},
        "language": {"type": "string", "enum": list(LANGUAGES), "default": "python",
                     "description": "python, javascript or bash"},
        "timeout": {"type": "number", "minimum": 0,
                    "description": "seconds before the run is interrupted (optional)"},
        "packages": {"type": "array", "items": {"type": "string"},
                     "description": "packages to install first: pip requirements for python "
                                    "(e.g. pandas==2.2.0), npm packages for javascript"},
    },
    "required": ["code"],
}


def _args_schema():
    """A pydantic model when pydantic is there (it always is with
    langchain_core; every langchain_core version takes one), else the JSON
    schema as a dict (accepted by langchain_core 0.3 and later)."""
    try:
        from typing import Optional

        from pydantic import BaseModel, Field
    except ImportError:
        return ARGS_JSON_SCHEMA

    class SandlotToolInput(BaseModel):
        """Code to run in the sandbox."""
        code: str = Field(..., description="the code to run")
        language: str = Field("python", description="python, javascript or bash")
        timeout: Optional[float] = Field(None, description="seconds before the run is interrupted")
        packages: Optional[list] = Field(
            None, description="packages to install first: pip requirements for python "
                              "(e.g. pandas==2.2.0), npm packages for javascript")

    return SandlotToolInput


def _install_failed(e):
    """The observation for packages that could not be installed: the error
    and the end of what the installers printed."""
    out = getattr(e, "output", "")
    return f"sandlot: {e}" + (f"\n{out[-4000:]}" if out else "")


class SandlotTool(_BaseTool):
    """Runs ``code`` in a sandlot sandbox (see the module doc).

    Constructor: ``SandlotTool(sandbox=None, *, client=None,
    sandbox_options=None, timeout_seconds=300, memory_mb=None,
    max_output_chars=20000, allow_network=False, allowed_domains=None)``.
    ``sandbox`` is a sandlot.Sandbox (or an id); without one, a sandbox is
    created with ``client`` (default ``Client()``) and ``sandbox_options``
    (create's keyword arguments; ``memory_mb`` is a shorthand for its
    memory) on first use, and destroyed by ``close()``.  ``timeout_seconds``
    is the default limit of a run (0 = none), and the description says so.
    ``allowed_domains`` (["api.github.com", "*.githubusercontent.com"])
    gives the sandbox it creates an allowlist; ``allow_network=True``
    without domains the public internet (docs/network.md).  Packages the
    model asks for are installed whatever the network: sandlotd downloads
    them, not the sandbox.
    """

    name: str = "sandlot_run_code"
    description: str = DESCRIPTION
    args_schema: object = _args_schema()
    handle_tool_error: object = True
    sandbox: object = None
    client: object = None
    sandbox_options: object = None
    timeout_seconds: object = DEFAULT_TIMEOUT
    memory_mb: object = None
    max_output_chars: int = 20000
    allow_network: bool = False
    allowed_domains: object = None

    # The sandbox holder: a private attribute of the pydantic model when
    # BaseTool is one (a leading underscore keeps it out of the fields).
    _holder: object = None

    def __init__(self, sandbox=None, **kwargs):
        kwargs["sandbox"] = sandbox
        timeout = kwargs.get("timeout_seconds", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout_seconds must be a number of seconds >= 0, got {timeout!r}")
        description = _describe(timeout)
        memory_mb = kwargs.get("memory_mb")
        if memory_mb is not None:
            if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb <= 0:
                raise ValueError(f"memory_mb must be a whole number of MiB > 0, got {memory_mb!r}")
            kwargs["sandbox_options"] = {**(kwargs.get("sandbox_options") or {}),
                                         "memory": f"{memory_mb}M"}
        domains = kwargs.get("allowed_domains")
        if domains is not None or kwargs.get("allow_network"):
            if isinstance(domains, str):
                raise TypeError("allowed_domains must be a list of host names")
            opts = dict(kwargs.get("sandbox_options") or {})
            if domains:
                opts["allowed_domains"] = list(domains)
            else:
                opts["network"] = "open"
            kwargs["sandbox_options"] = opts
            description = description.replace(
                "There is no network access.",
                f"Network access: {', '.join(domains)} only." if domains
                else "It can reach the public internet.")
        kwargs.setdefault("description", description)
        if HAVE_LANGCHAIN:
            super().__init__(**kwargs)
        else:
            for k, v in kwargs.items():
                if not hasattr(type(self), k):
                    raise TypeError(f"SandlotTool() got an unexpected keyword argument {k!r}")
                setattr(self, k, v)
        holder = OwnedSandbox(self.sandbox, self.client, self.sandbox_options)
        try:
            self._holder = holder
        except (AttributeError, ValueError, TypeError):   # a model that refuses new attributes
            object.__setattr__(self, "_holder", holder)

    # -- the tool --------------------------------------------------------
    def _check(self, code, language, timeout, packages):
        if not isinstance(code, str) or not code.strip():
            raise ToolException("code must be a non-empty string")
        language = (language or "python").lower()
        if language not in LANGUAGES:
            raise ToolException(f"unsupported language {language!r}: use one of {', '.join(LANGUAGES)}")
        if timeout is None:
            timeout = self.timeout_seconds
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ToolException(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if packages:
            if isinstance(packages, str) or not all(isinstance(p, str) for p in packages):
                raise ToolException("packages must be a list of strings")
            if language == "bash":
                raise ToolException("packages are for python (pip) or javascript (npm), not bash")
            packages = {"pip" if language == "python" else "npm": list(packages)}
        return language, timeout or None, packages

    def _run(self, code, language="python", timeout=None, packages=None, run_manager=None):
        language, timeout, packages = self._check(code, language, timeout, packages)
        if packages:
            try:
                self._holder.sandbox.install_packages(**packages)
            except SandlotError as e:
                raise ToolException(_install_failed(e)) from e
        try:
            r = self._holder.sandbox.run_code(code, language=language, timeout=timeout)
        except SandlotError as e:
            raise ToolException(f"sandlot: {e}") from e
        return format_code_result(r, self.max_output_chars)

    async def _arun(self, code, language="python", timeout=None, packages=None, run_manager=None):
        language, timeout, packages = self._check(code, language, timeout, packages)
        try:
            sb = await self._holder.asandbox()
            if packages:
                try:
                    await sb.install_packages(**packages)
                except SandlotError as e:
                    raise ToolException(_install_failed(e)) from e
            r = await sb.run_code(code, language=language, timeout=timeout)
        except SandlotError as e:
            raise ToolException(f"sandlot: {e}") from e
        return format_code_result(r, self.max_output_chars)

    if not HAVE_LANGCHAIN:
        def run(self, tool_input, **kwargs):
            """Run with a dict of arguments, or a string of code."""
            if isinstance(tool_input, str):
                tool_input = {"code": tool_input}
            if not isinstance(tool_input, dict):
                raise TypeError("tool input must be a dict or a string of code")
            unknown = set(tool_input) - set(ARGS_JSON_SCHEMA["properties"])
            if unknown:
                raise ToolException(f"unknown argument(s): {', '.join(sorted(unknown))}")
            if "code" not in tool_input:
                raise ToolException("missing argument: code")
            try:
                return self._run(**tool_input)
            except ToolException as e:
                if self.handle_tool_error:
                    return str(e)
                raise

        def invoke(self, input, config=None, **kwargs):
            return self.run(input, **kwargs)

        async def ainvoke(self, input, config=None, **kwargs):
            tool_input = {"code": input} if isinstance(input, str) else input
            if not isinstance(tool_input, dict) or "code" not in tool_input:
                raise ToolException("missing argument: code")
            try:
                return await self._arun(**tool_input)
            except ToolException as e:
                if self.handle_tool_error:
                    return str(e)
                raise

    # -- lifecycle -------------------------------------------------------
    @property
    def current_sandbox(self):
        """The sandbox the tool runs code in (created now if needed)."""
        return self._holder.sandbox

    def close(self):
        """Destroy the sandbox if the tool created it."""
        self._holder.close()

    async def aclose(self):
        """close() without blocking the event loop."""
        await self._holder.aclose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
