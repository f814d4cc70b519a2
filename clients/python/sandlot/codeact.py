"""A CodeAct eval function backed by a sandlot sandbox: ``create_sandlot_eval``.

    from langgraph_codeact import create_codeact
    from sandlot.codeact import create_sandlot_eval

    eval_fn = create_sandlot_eval()              # creates a sandbox on first use
    agent = create_codeact(model, tools, eval_fn).compile()
    ...
    eval_fn.close()                              # destroys that sandbox

``eval_fn(code, _locals) -> (output, new_vars)`` is the interface of
langgraph-codeact's ``eval_fn`` (it needs nothing from the framework):

- The code runs in one persistent Python context in the sandbox (a long-lived
  interpreter), so every variable, import, function and object stays there
  between turns — data frames and open files included.
- ``_locals``: values that are JSON-serialisable (None, bool, int, float,
  str, lists/tuples and dicts of those) are set as globals of the context
  before the code runs; tuples arrive as lists and dict keys as strings.  A
  value is sent only when it differs from what the context reported last
  (so the context's own objects are not overwritten by their JSON copies).
  Callables (CodeAct's tools) cannot be called inside the sandbox: by
  default each becomes a stub there that raises an error saying so
  (``functions="stub"``), or with ``functions="source"`` plain Python
  functions are re-defined there from their source (with the modules they
  use imported), which suits small self-contained tools.  Other values
  (objects, modules) are skipped, and their names are listed in
  ``eval_fn.skipped``.
- ``output``: what the code printed (stdout, then stderr), the value of a
  final expression as "Out: ...", and the error report if it failed.
- ``new_vars``: read back from the context after the run: every global whose
  name does not start with "_", that is not a module, function or class, and
  whose value is JSON-serialisable in at most ``max_value_chars`` characters,
  as the JSON round trip gives it.
"""
import ast
import asyncio
import inspect
import json
import keyword
import textwrap
import threading
import types
import weakref

from ._format import format_code_result
from ._owned import OwnedSandbox
from .errors import SandlotError

__all__ = ["create_sandlot_eval", "create_async_sandlot_eval", "SandlotEval"]

_NO_OUTPUT = "<code ran, no output printed to stdout>"

# Runs in the context after each cell: prints the simple globals as one JSON
# line between markers.  It leaves no name behind and does not touch `_`.
_COLLECT = r'''
def __sandlot_collect(limit):
    import json as j, types as t
    out = {}
    for k, v in list(globals().items()):
        if k.startswith("_") or isinstance(v, (t.ModuleType, t.FunctionType, t.BuiltinFunctionType, type)):
            continue
        try:
            s = j.dumps(v, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            continue
        if len(s) <= limit:
            out[k] = s
    print("@@sandlot-vars@@ " + j.dumps(out))
__sandlot_collect(%d)
del __sandlot_collect
'''

_MARK = "@@sandlot-vars@@ "


def _json_or_none(v):
    try:
        return json.dumps(v, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return None


def _function_source(fn):
    """Source of a plain function with its decorators removed, or None."""
    if not isinstance(fn, types.FunctionType) or fn.__closure__ or fn.__name__ == "<lambda>":
        return None
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    tree.body[0].decorator_list = []
    imports = []
    for name in sorted(set(fn.__code__.co_names)):
        mod = fn.__globals__.get(name)
        if isinstance(mod, types.ModuleType):
            imports.append(f"import {mod.__name__} as {name}" if mod.__name__ != name else f"import {name}")
    return "\n".join(imports + [ast.unparse(tree)])


class SandlotEval:
    """The eval function (callable as ``eval_fn(code, _locals)``).

    Attributes: ``sandbox`` (created on first use if none was given),
    ``context`` (the id of the Python context), ``skipped`` (names of the
    ``_locals`` last left out).  ``close()`` destroys a sandbox it created
    (and deletes the context it created in a given sandbox)."""

    def __init__(self, sandbox=None, *, client=None, sandbox_options=None, context=None,
                 timeout=None, functions="stub", max_value_chars=100_000, max_output_chars=20000):
        if functions not in ("stub", "source", "skip"):
            raise ValueError('functions must be "stub", "source" or "skip"')
        self._holder = OwnedSandbox(sandbox, client, sandbox_options)
        self.context = context
        self._own_context = context is None
        self.timeout = timeout
        self.functions = functions
        self.max_value_chars = max_value_chars
        self.max_output_chars = max_output_chars
        self.skipped = []
        self._reported = {}      # name -> JSON text the context last reported
        self._defined = {}       # name -> id() of the callable defined there
        self._lock = threading.Lock()
        self._alocks = weakref.WeakKeyDictionary()   # event loop -> asyncio.Lock

    @property
    def sandbox(self):
        return self._holder.sandbox

    def _prelude(self, _locals):
        """Code that sets the changed JSON values and defines the callables."""
        values, lines, skipped = {}, [], []
        for name, value in (_locals or {}).items():
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
                    or name.startswith("__"):
                skipped.append(str(name))
                continue
            if callable(value) and not isinstance(value, type):
                if self._defined.get(name) == id(value):
                    continue
                src = _function_source(value) if self.functions == "source" else None
                if src is not None:
                    lines.append(src if value.__name__ == name else f"{src}\n{name} = {value.__name__}")
                elif self.functions != "skip":
                    lines.append(
                        f"def {name}(*args, **kwargs):\n"
                        f"    raise RuntimeError({name!r} + ' is a tool of the agent host; it cannot "
                        f"be called from code running in the sandbox')")
                else:
                    skipped.append(name)
                    continue
                self._defined[name] = id(value)
                continue
            text = _json_or_none(value)
            if text is None:
                skipped.append(name)
                continue
            if self._reported.get(name) == text:
                continue
            values[name] = value
        if values:
            lines.insert(0, f"globals().update(__import__('json').loads({json.dumps(values)!r}))")
        self.skipped = skipped
        return "\n".join(lines)

    def _read_vars(self, r):
        for line in r.stdout.splitlines():
            if line.startswith(_MARK):
                raw = json.loads(line[len(_MARK):])
                self._reported = {k: json.dumps(json.loads(v), sort_keys=True) for k, v in raw.items()}
                return {k: json.loads(v) for k, v in raw.items()}
        raise RuntimeError(f"could not read the variables of context {self.context}: "
                           f"{(r.error_text or r.stderr or r.stdout)[:500]}")

    def _output(self, r):
        output = format_code_result(r, self.max_output_chars)
        if r.state_lost:
            # A fresh interpreter: nothing defined before is there now.
            self._reported, self._defined = {}, {}
        return output or _NO_OUTPUT

    def __call__(self, code, _locals=None):
        with self._lock:
            sb = self.sandbox
            if self.context is None:
                self.context = sb.create_context("python")["id"]
            prelude = self._prelude(_locals)
            if prelude:
                pr = sb.run_code(prelude, context=self.context, timeout=60)
                if not pr.ok:
                    return (f"Error while setting the variables: {pr.error_text}", {})
            output = self._output(sb.run_code(code, context=self.context, timeout=self.timeout))
            collected = sb.run_code(_COLLECT % self.max_value_chars, context=self.context, timeout=60)
            return output, self._read_vars(collected)

    async def acall(self, code, _locals=None):
        """__call__ on asyncio (sandlot.aio): the event loop runs on while
        the code does.  Turns of one eval function do not overlap."""
        sb = await self._holder.asandbox()
        loop = asyncio.get_running_loop()
        lock = self._alocks.get(loop)
        if lock is None:
            lock = self._alocks[loop] = asyncio.Lock()
        async with lock:
            if self.context is None:
                self.context = (await sb.create_context("python"))["id"]
            prelude = self._prelude(_locals)
            if prelude:
                pr = await sb.run_code(prelude, context=self.context, timeout=60)
                if not pr.ok:
                    return (f"Error while setting the variables: {pr.error_text}", {})
            output = self._output(await sb.run_code(code, context=self.context, timeout=self.timeout))
            collected = await sb.run_code(_COLLECT % self.max_value_chars, context=self.context,
                                          timeout=60)
            return output, self._read_vars(collected)

    def close(self):
        if self._own_context and self.context is not None and self._holder.created \
                and not self._holder.owned:
            try:
                self._holder.sandbox.delete_context(self.context)
            except SandlotError:  # the sandbox may be gone already
                pass
        self.context = None
        self._holder.close()

    async def aclose(self):
        """close() without blocking the event loop."""
        if self._own_context and self.context is not None and self._holder.created \
                and not self._holder.owned:
            try:
                await (await self._holder.asandbox()).delete_context(self.context)
            except SandlotError:
                pass
        self.context = None
        await self._holder.aclose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def create_sandlot_eval(sandbox=None, *, client=None, sandbox_options=None, context=None,
                        timeout=None, functions="stub", max_value_chars=100_000,
                        max_output_chars=20000):
    """Build a CodeAct ``eval_fn(code, _locals) -> (output, new_vars)``.

    ``sandbox``: a sandlot.Sandbox (or id); without one, a sandbox is created
    on first use (``client``, ``sandbox_options``) and ``close()`` destroys
    it.  ``context``: an existing Python context id (default: a new one).
    ``timeout``: seconds per run (the run is interrupted, state kept).
    ``functions``: "stub" (default), "source" or "skip" — what becomes of
    callables in ``_locals`` (see the module doc)."""
    return SandlotEval(sandbox, client=client, sandbox_options=sandbox_options, context=context,
                       timeout=timeout, functions=functions, max_value_chars=max_value_chars,
                       max_output_chars=max_output_chars)


def create_async_sandlot_eval(sandbox=None, **options):
    """The same eval function as a coroutine function, ``await
    eval_fn(code, _locals)``, for ``create_codeact`` on asyncio (it runs an
    ``async def`` eval_fn from an async sandbox node, and ``ainvoke`` never
    blocks the loop).  Same arguments as create_sandlot_eval; the
    SandlotEval behind it is ``eval_fn.evaluator`` (``sandbox``,
    ``context``, ``skipped``), and ``await eval_fn.aclose()`` (or
    ``eval_fn.close()``) ends it."""
    ev = create_sandlot_eval(sandbox, **options)

    async def eval_fn(code, _locals):
        return await ev.acall(code, _locals)

    eval_fn.evaluator = ev
    eval_fn.close = ev.close
    eval_fn.aclose = ev.aclose
    return eval_fn
