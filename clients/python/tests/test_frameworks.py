"""The adapters in the real frameworks, against a real sandlotd: a LangChain
agent (langchain v1 create_agent) calling SandlotTool, sync and async; a
Deep Agents agent (create_deep_agent) on SandlotBackend; a CodeAct agent
(langgraph-codeact create_codeact) with the sandlot eval function, sync and
async.  The models are scripted fakes (langchain_core's
GenericFakeChatModel) that call the tools as a real model would.

These need the frameworks: scripts/check.sh runs this file with the
virtualenv scripts/python-frameworks.sh makes (versions pinned in
constraints.txt).  Run by hand:

    /usr/bin/python3 -m pytest ... is not enough here; use
    $(scripts/python-frameworks.sh) -m pytest -q clients/python/tests
"""
import asyncio
import time

import pytest

pytest.importorskip("langchain", reason="the frameworks' tests run in the venv of "
                                        "scripts/python-frameworks.sh (make check does that)")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402

import sandlot  # noqa: E402
from sandlot.codeact import create_async_sandlot_eval, create_sandlot_eval  # noqa: E402
from sandlot.deepagents import SandlotBackend  # noqa: E402
from sandlot.langchain import SandlotTool  # noqa: E402


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers with the given messages in turn, taking
    tools like a real one (bind_tools) without using them."""

    def bind_tools(self, tools, **kwargs):
        return self


def call(name, args, i):
    return {"name": name, "args": args, "id": f"call-{i}", "type": "tool_call"}


def script(*turns):
    """The model's turns: a list of tool calls each, then a final text."""
    msgs = [AIMessage(content="", tool_calls=[call(n, a, f"{k}-{j}") for j, (n, a) in enumerate(t)])
            for k, t in enumerate(turns)]
    return ScriptedModel(messages=iter(msgs + [AIMessage(content="done")]))


def tool_outputs(result):
    return [m.content for m in result["messages"] if isinstance(m, ToolMessage)]


async def ticking(coro, period=0.05):
    """Run coro while a ticker ticks; returns (its result, the longest gap)."""
    ticks, done = [], asyncio.Event()

    async def tick():
        while not done.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(period)
    t = asyncio.ensure_future(tick())
    try:
        out = await coro
    finally:
        done.set()
        await t
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    return out, max(gaps) if gaps else 0.0


# ---- LangChain ---------------------------------------------------------------

def test_langchain_agent_runs_the_tool(client, sb):
    tool = SandlotTool(sb, timeout_seconds=120)
    assert isinstance(tool, BaseTool) and tool.name == "sandlot_run_code"
    assert "interrupted after 120 seconds" in tool.description
    assert set(tool.args_schema.model_json_schema()["properties"]) == {"code", "language", "timeout",
                                                                       "packages"}
    agent = create_agent(script(
        [("sandlot_run_code", {"code": "x = 6 * 7\nprint(x)"})],
        [("sandlot_run_code", {"code": "x + 1"}),
         ("sandlot_run_code", {"code": "console.log([1, 2].map(v => v * 10).join(','))",
                               "language": "javascript"})],
        [("sandlot_run_code", {"code": "puts 1", "language": "ruby"})],
        [("sandlot_run_code", {"code": "while True: pass", "timeout": 0.5})],
        [("sandlot_run_code", {"code": "x"})],
    ), tools=[tool])
    result = agent.invoke({"messages": [{"role": "user", "content": "compute"}]})
    out = tool_outputs(result)
    assert out[0] == "42" and out[1] == "Out: 43" and out[2] == "10,20"
    assert out[3] == "unsupported language 'ruby': use one of python, javascript, bash"
    assert "timed out" in out[4] and "kept" in out[4]
    assert out[5] == "Out: 42"
    assert result["messages"][-1].content == "done"
    tool.close()                                     # a given sandbox is left alone
    assert sb.refresh().state == "running"


def test_langchain_agent_async_runs_natively(client, monkeypatch):
    """ainvoke goes through _arun on sandlot.aio: the sync _run is never
    called, and the event loop keeps ticking while a 2 s cell runs."""
    def no_sync(*a, **k):
        raise AssertionError("the sync _run was called from ainvoke")
    monkeypatch.setattr(SandlotTool, "_run", no_sync)
    tool = SandlotTool(client=client, memory_mb=256)
    assert tool.sandbox_options == {"memory": "256M"}
    agent = create_agent(script(
        [("sandlot_run_code", {"code": "import time\ntime.sleep(2)\nn = 5\nprint('slept')"})],
        [("sandlot_run_code", {"code": "n * 2"}),
         ("sandlot_run_code", {"code": "echo $((n + 1))", "language": "bash"})],
    ), tools=[tool])

    async def main():
        try:
            return await ticking(agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}))
        finally:
            sid = tool.current_sandbox.id
            await tool.aclose()
            assert (await sandlot.aio.AsyncClient(client.host).get(sid)).state == "deleted"
    result, gap = asyncio.run(main())
    assert tool_outputs(result)[:2] == ["slept", "Out: 10"]
    assert gap < 1.0, f"the event loop stalled for {gap:.2f}s"


def test_langchain_tool_reports_an_ended_sandbox(client):
    s = client.create()
    tool = SandlotTool(s.id, client=client)
    s.destroy()
    agent = create_agent(script([("sandlot_run_code", {"code": "1"})]), tools=[tool])
    out = tool_outputs(agent.invoke({"messages": [{"role": "user", "content": "x"}]}))
    assert out[0].startswith("sandlot: ") and "has ended" in out[0]


# ---- Deep Agents --------------------------------------------------------------

def test_deep_agent_on_sandlot_backend(client, sb):
    from deepagents import create_deep_agent
    from deepagents.backends.sandbox import BaseSandbox
    backend = SandlotBackend(sb)
    assert isinstance(backend, BaseSandbox)
    agent = create_deep_agent(model=script(
        [("write_file", {"file_path": "/home/user/primes.py",
                         "content": "print([n for n in range(2, 30) if all(n % d for d in range(2, n))])\n"})],
        [("execute", {"command": "cd /home/user && python3 primes.py && echo err >&2 && exit 3"})],
        [("edit_file", {"file_path": "/home/user/primes.py", "old_string": "30", "new_string": "12"}),
         ("ls", {"path": "/home/user"})],
        [("read_file", {"file_path": "/home/user/primes.py"}),
         ("grep", {"pattern": "range(2, 12)", "path": "/home/user", "output_mode": "content"}),
         ("glob", {"pattern": "*.py", "path": "/home/user"})],
    ), backend=backend)
    result = agent.invoke({"messages": [{"role": "user", "content": "primes"}]})
    out = tool_outputs(result)
    assert "[2, 3, 5, 7, 11, 13, 17, 19, 23, 29]" in out[1] and "err" in out[1]
    assert "3" in out[1].split("[2, 3, 5")[1]            # the exit code is reported
    assert "primes.py" in out[3]                          # ls
    assert "range(2, 12)" in out[4]                       # read_file after the edit
    assert "primes.py" in out[5] and "primes.py" in out[6]
    assert sb.read_text("primes.py").startswith("print([n for n in range(2, 12)")
    assert sb.exec("python3 primes.py").stdout == "[2, 3, 5, 7, 11]\n"


def test_deep_agent_async_on_sandlot_backend(client, monkeypatch):
    from deepagents import create_deep_agent

    def no_sync(*a, **k):
        raise AssertionError("a sync member was called from the async agent")
    for name in ("execute", "upload_files", "download_files"):
        monkeypatch.setattr(SandlotBackend, name, no_sync)
    backend = SandlotBackend(client=client, sandbox_options={"memory": "256M"})
    agent = create_deep_agent(model=script(
        [("write_file", {"file_path": "/home/user/a.txt", "content": "alpha\n"})],
        [("execute", {"command": "sleep 2; cat /home/user/a.txt"})],
        [("read_file", {"file_path": "/home/user/a.txt"})],
    ), backend=backend)

    async def main():
        try:
            return await ticking(agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}))
        finally:
            await backend.aclose()
    result, gap = asyncio.run(main())
    out = tool_outputs(result)
    assert "alpha" in out[1] and "alpha" in out[2]
    assert gap < 1.0, f"the event loop stalled for {gap:.2f}s"


# ---- CodeAct ------------------------------------------------------------------

def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def codeact_script(*codes):
    return ScriptedModel(messages=iter(
        [AIMessage(content=f"Step:\n```python\n{c}\n```") for c in codes] + [AIMessage(content="done")]))


def run_codeact(eval_fn, codes, context=None, asynchronous=False):
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph_codeact import create_codeact
    agent = create_codeact(codeact_script(*codes), [add], eval_fn).compile(checkpointer=MemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    state = {"messages": [{"role": "user", "content": "go"}]}
    if context is not None:
        state["context"] = context
    if asynchronous:
        result = asyncio.run(agent.ainvoke(state, cfg))
    else:
        result = agent.invoke(state, cfg)
    observations = [m.content for m in result["messages"] if m.type == "human"][1:]
    return result, observations


def test_codeact_agent_carries_variables_both_ways(client, sb):
    eval_fn = create_sandlot_eval(sb, functions="source")
    result, obs = run_codeact(eval_fn, [
        "import statistics\nnums = [3, 1, 4, 1, 5]\nprint(statistics.mean(nums))",
        "total = add(sum(nums), seed)\nprint(total)",
        "print(type(pair).__name__, pair)",
    ], context={"seed": 100, "pair": (1, 2)})
    assert obs == ["2.8", "114", "list [1, 2]"]
    # out of the sandbox into the agent's state ...
    ctx = result["context"]
    assert ctx["nums"] == [3, 1, 4, 1, 5] and ctx["total"] == 114 and ctx["seed"] == 100
    # ... and the state's values into the sandbox (seed, pair came from it)
    assert sb.run_code(f"'nums' in globals()").value == "False"      # its own context
    eval_fn.close()
    assert sb.refresh().state == "running"


def test_codeact_agent_async(client):
    eval_fn = create_async_sandlot_eval(client=client, functions="stub", timeout=30)
    try:
        result, obs = run_codeact(eval_fn, [
            "x = 20\nimport time; time.sleep(1)\nprint(x)",
            "y = x + 22\ny",
            "add(1, 2)",
        ], asynchronous=True)
        assert obs[0] == "20" and obs[1] == "Out: 42"
        assert "add is a tool of the agent host" in obs[2]
        assert result["context"]["y"] == 42
        sid = eval_fn.evaluator.sandbox.id
    finally:
        asyncio.run(eval_fn.aclose())
    assert client.get(sid).state == "deleted"
