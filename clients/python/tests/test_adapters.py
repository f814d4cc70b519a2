"""The framework adapters against a real sandlotd, WITHOUT their frameworks:
SandlotTool and SandlotBackend with langchain_core, deepagents and pydantic
made unimportable (what the real packages cannot show: that the modules
import and work without them), and create_sandlot_eval driven the way
langgraph-codeact's sandbox node calls it, in detail.  The adapters in the
real frameworks: test_frameworks.py and test_deepagents_standard.py.
"""
import importlib
import math
import sys
import time

import pytest

import sandlot

class _Block:
    """A meta path finder that makes the named top-level packages unimportable."""

    def __init__(self, *names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"{name} is blocked for this test")
        return None


@pytest.fixture
def without_frameworks(fresh_modules):
    block = _Block("langchain_core", "deepagents", "pydantic")
    sys.meta_path.insert(0, block)
    fresh_modules()
    yield
    sys.meta_path.remove(block)


# ---- LangChain -----------------------------------------------------------------

def _tool_session(tool):
    """What an agent does with the tool; returns the observations."""
    return [
        tool.invoke({"code": "x = 6 * 7\nprint(x)"}),
        tool.invoke({"code": "x + 1"}),
        tool.invoke({"code": "console.log([1, 2].map(v => v * 10).join(','))", "language": "javascript"}),
        tool.invoke({"code": "cd /tmp && echo $PWD", "language": "bash"}),
        tool.invoke({"code": "1/0"}),
        tool.invoke({"code": "while True: pass", "timeout": 0.5}),
        tool.invoke({"code": "x"}),
        tool.invoke({"code": "puts 1", "language": "ruby"}),
    ]


def _check_observations(obs):
    assert obs[0] == "42"
    assert obs[1] == "Out: 43"
    assert obs[2] == "10,20"
    assert obs[3] == "/tmp"
    assert obs[4].startswith("Traceback") and obs[4].endswith("ZeroDivisionError: division by zero")
    assert "timed out" in obs[5] and "kept" in obs[5]
    assert obs[6] == "Out: 42"                         # state survived the timeout
    assert obs[7] == "unsupported language 'ruby': use one of python, javascript, bash"


def test_langchain_tool_without_langchain(without_frameworks, client):
    mod = importlib.import_module("sandlot.langchain")
    assert mod.HAVE_LANGCHAIN is False and mod.SandlotTool.__mro__[1] is object
    with mod.SandlotTool(client=client, sandbox_options={"memory": "256M"}) as tool:
        assert tool.name == "sandlot_run_code" and "sandbox" in tool.description
        assert tool.args_schema["required"] == ["code"]
        assert set(tool.args_schema["properties"]) == {"code", "language", "timeout", "packages"}
        _check_observations(_tool_session(tool))
        assert tool.run("print('plain string input')") == "plain string input"
        with pytest.raises(mod.ToolException):
            tool._run("1", language="cobol")
        tool.handle_tool_error = False
        with pytest.raises(mod.ToolException):
            tool.invoke({"code": "1", "language": "cobol"})
        sid = tool.current_sandbox.id
        assert client.get(sid).state == "running"
    assert client.get(sid).state == "deleted"         # the tool created it, close() destroyed it
    with pytest.raises(TypeError):
        mod.SandlotTool(client=client, colour="red")


def test_langchain_tool_network_and_packages(without_frameworks, client):
    mod = importlib.import_module("sandlot.langchain")
    with mod.SandlotTool(client=client, allowed_domains=["api.github.com"]) as tool:
        assert "Network access: api.github.com only." in tool.description
        net = tool.current_sandbox.info["options"]["network"]
        assert net == {"mode": "allowlist", "allow": ["api.github.com"], "deny": []}
        out = tool.run({"code": "print(1)", "packages": ["--index-url=https://evil.example"]})
        assert "invalid pip package" in out, out
        out = tool.run({"code": "echo 1", "language": "bash", "packages": ["x"]})
        assert "not bash" in out, out
    with mod.SandlotTool(client=client, allow_network=True) as tool:
        assert "public internet" in tool.description
        assert tool.current_sandbox.info["options"]["network"]["mode"] == "open"
    with mod.SandlotTool(client=client) as tool:
        assert "There is no network access." in tool.description
        assert tool.current_sandbox.info["options"]["network"]["mode"] == "none"


def test_langchain_tool_sandbox_errors(without_frameworks, client):
    mod = importlib.import_module("sandlot.langchain")
    s = client.create()
    tool = mod.SandlotTool(s.id, client=client)
    s.destroy()
    obs = tool.invoke({"code": "1"})
    assert obs.startswith("sandlot: ") and "has ended" in obs


# ---- Deep Agents ------------------------------------------------------------------

def _backend_checks(mod, backend):
    r = backend.execute("echo out; echo err >&2; exit 4")
    assert isinstance(r, mod.ExecuteResponse)
    assert r.exit_code == 4 and sorted(r.output.splitlines()) == ["err", "out"] and not r.truncated
    t = time.monotonic()
    r = backend.execute("echo before; sleep 20", timeout=1)
    assert time.monotonic() - t < 10
    assert r.exit_code == 124 and r.output.startswith("before\n") and "timed out after 1 s" in r.output
    r = backend.execute("no-such-cmd")
    assert r.exit_code == 127 and "not found" in r.output
    r = backend.execute("head -c 5000 /dev/zero | tr '\\0' a")
    assert r.output == "a" * 4096 and r.truncated is True     # max_output_bytes=4096 below
    r = backend.execute("kill -9 $$")
    assert r.exit_code == 137

    up = backend.upload_files([
        ("/home/user/a.txt", b"alpha"),
        ("/home/user/sub/dir/b.bin", bytes(range(256))),
        ("/etc/nope", b"x"),
        ("/home/user/a.txt/child", b"x"),
        ("", b"x"),
        ("/home/user/nul\0name", b"x"),
        ("relative.txt", b"x"),
    ])
    assert all(isinstance(u, mod.FileUploadResponse) for u in up)
    assert [(u.path, u.error) for u in up] == [
        ("/home/user/a.txt", None), ("/home/user/sub/dir/b.bin", None),
        ("/etc/nope", "permission_denied"), ("/home/user/a.txt/child", "invalid_path"),
        ("", "invalid_path"), ("/home/user/nul\0name", "invalid_path"), ("relative.txt", "invalid_path")]
    down = backend.download_files(["/home/user/a.txt", "/home/user/sub/dir/b.bin", "/home/user/missing",
                                   "/home/user/sub", "relative-missing"])
    assert all(isinstance(d, mod.FileDownloadResponse) for d in down)
    assert [(d.path, d.content, d.error) for d in down] == [
        ("/home/user/a.txt", b"alpha", None), ("/home/user/sub/dir/b.bin", bytes(range(256)), None),
        ("/home/user/missing", None, "file_not_found"), ("/home/user/sub", None, "is_directory"),
        ("relative-missing", None, "invalid_path")]


def test_deepagents_backend_without_deepagents(without_frameworks, client):
    mod = importlib.import_module("sandlot.deepagents")
    assert mod.HAVE_DEEPAGENTS is False
    with mod.SandlotBackend(client=client, max_output_bytes=4096) as backend:
        assert backend.id.startswith("sb-")
        _backend_checks(mod, backend)
        sid = backend.id
    assert client.get(sid).state == "deleted"


def test_deepagents_dead_sandbox_reports_per_file(without_frameworks, client):
    mod = importlib.import_module("sandlot.deepagents")
    s = client.create()
    backend = mod.SandlotBackend(s)
    s.destroy()
    up = backend.upload_files([("/home/user/x", b"1")])
    assert up[0].error and "has ended" in up[0].error
    down = backend.download_files(["/home/user/x"])
    assert down[0].content is None and "has ended" in down[0].error
    with pytest.raises(sandlot.SandboxEndedError):
        backend.execute("true")


# ---- CodeAct ----------------------------------------------------------------------

def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def sine(a: float) -> float:
    """Sine of a (radians)."""
    return math.sin(a)


class _CodeActLoop:
    """langgraph-codeact's sandbox node: the context it passes is the
    variables so far plus the tools; it merges new_vars back."""

    def __init__(self, eval_fn, tools):
        self.eval_fn = eval_fn
        self.tools = {t.__name__: t for t in tools}
        self.context = {}

    def step(self, script):
        output, new_vars = self.eval_fn(script, {**self.context, **self.tools})
        self.context = {**self.context, **new_vars}
        return output


def test_codeact_eval_persistent_context(client, sb):
    from sandlot.codeact import create_sandlot_eval
    eval_fn = create_sandlot_eval(sb)
    loop = _CodeActLoop(eval_fn, [add, sine])
    out = loop.step("import statistics\nnums = [3, 1, 4, 1, 5]\npair = (1, 2)\n"
                    "mean = statistics.mean(nums)\nprint('mean', mean)")
    assert out == "mean 2.8"
    assert loop.context == {"nums": [3, 1, 4, 1, 5], "pair": [1, 2], "mean": 2.8}
    # the sandbox keeps its own objects: the tuple stays a tuple, the module is there
    assert loop.step("print(type(pair).__name__, statistics.median(nums))") == "tuple 3"
    # a variable the agent's state changes is sent in before the run
    loop.context["nums"] = [10, 20]
    assert loop.step("print(sum(nums))") == "30"
    # tools run on the agent's host: inside the sandbox a stub says so
    out = loop.step("add(1, 2)")
    assert "RuntimeError: add is a tool of the agent host" in out
    # errors, no output, the last expression
    assert loop.step("1/0").endswith("ZeroDivisionError: division by zero")
    assert loop.step("z = 5") == "<code ran, no output printed to stdout>"
    assert loop.step("z * 2") == "Out: 10"
    assert loop.context["z"] == 5
    # what cannot travel as JSON is not injected and not returned
    out, new_vars = eval_fn("import datetime\nnow = datetime.datetime.now()\nprint(type(now).__name__)",
                            {"obj": object(), "ok": {"k": [1, None, True]}})
    assert out == "datetime" and "now" not in new_vars and "obj" not in new_vars
    assert new_vars["ok"] == {"k": [1, None, True]} and eval_fn.skipped == ["obj"]
    assert eval_fn("print(ok['k'][2])", {})[0] == "True"
    # the context is a separate interpreter from the sandbox's default one
    assert sb.run_code("'nums' in globals()").value == "False"
    ctx = eval_fn.context
    assert ctx in [c["id"] for c in sb.list_contexts()]
    eval_fn.close()
    assert ctx not in [c["id"] for c in sb.list_contexts()]   # its context is deleted
    assert sb.refresh().state == "running"                     # the given sandbox is not


def test_codeact_eval_source_functions_timeout_and_crash(client):
    from sandlot.codeact import create_sandlot_eval
    with create_sandlot_eval(client=client, functions="source", timeout=1) as eval_fn:
        loop = _CodeActLoop(eval_fn, [add, sine])
        assert loop.step("print(add(2, 3), round(sine(math.pi / 2), 3))") == "5 1.0"
        t = time.monotonic()
        out = loop.step("x = 1\nwhile True: pass")
        assert time.monotonic() - t < 10 and "timed out" in out
        assert loop.context["x"] == 1
        # the interpreter dies: the next run starts fresh, the agent's
        # variables and the tools are sent again
        out = loop.step("import os\nos._exit(3)")
        assert "state is lost" in out
        assert loop.step("print(x, add(x, 1))") == "1 2"
        sid = eval_fn.sandbox.id
    assert client.get(sid).state == "deleted"


def test_codeact_eval_bad_arguments(client):
    from sandlot.codeact import create_sandlot_eval
    with pytest.raises(ValueError):
        create_sandlot_eval(client=client, functions="maybe")
    with pytest.raises(TypeError):
        create_sandlot_eval(42)
    ev = create_sandlot_eval(client.sandbox("sb-" + "c" * 26))
    with pytest.raises(sandlot.NotFoundError):
        ev("print(1)", {})
