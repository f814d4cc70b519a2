"""The E2B-compatible API's control plane driven by E2B's own Python SDK
(PyPI `e2b`, pinned in tests/e2b/requirements.txt): the same flows as
tests/e2b/control.test.mjs.  What the SDK did is checked over sandlot's own
/v1 API on the unix socket."""
import datetime
import time

import pytest
from e2b import (AsyncSandbox, AuthenticationException, NotFoundException, Sandbox,
                 SandboxException, SandboxQuery, SandboxState)


def test_create_with_env_vars_and_metadata(e2bd, monkeypatch):
    # Pointed at sandlotd by E2B's own environment variables.
    monkeypatch.setenv("E2B_API_KEY", e2bd.token)
    monkeypatch.setenv("E2B_API_URL", e2bd.api_url)
    monkeypatch.setenv("E2B_SANDBOX_URL", e2bd.api_url)
    sbx = Sandbox.create("base", timeout=90, envs={"GREETING": "hi from python"},
                         metadata={"owner": "bob"})
    try:
        rec = e2bd.record(sbx.sandbox_id)
        assert rec["state"] == "running"
        assert rec["ttl_seconds"] == 90
        assert rec["metadata"] == {"owner": "bob"}
        assert e2bd.sh(sbx.sandbox_id, 'printf %s "$GREETING"')["stdout"] == "hi from python"
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.metadata == {"owner": "bob"}
        assert info.state == SandboxState.RUNNING
        assert abs((info.end_at - info.started_at).total_seconds() - 90) < 2
    finally:
        assert sbx.kill() is True
    assert e2bd.record(sbx.sandbox_id)["state"] == "deleted"
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)


def test_set_timeout_pause_connect(e2bd):
    sbx = Sandbox.create("base", timeout=60, **e2bd.opts())
    try:
        sbx.set_timeout(500)
        assert e2bd.record(sbx.sandbox_id)["ttl_seconds"] == 500
        e2bd.sh(sbx.sandbox_id, "echo kept > /home/user/note.txt")
        assert sbx.pause() is True
        assert e2bd.record(sbx.sandbox_id)["state"] == "paused"
        assert Sandbox.get_info(sbx.sandbox_id, **e2bd.opts()).state == SandboxState.PAUSED
        again = Sandbox.connect(sbx.sandbox_id, timeout=200, **e2bd.opts())
        assert again.sandbox_id == sbx.sandbox_id
        rec = e2bd.record(sbx.sandbox_id)
        assert rec["state"] == "running" and rec["ttl_seconds"] == 200
        assert e2bd.sh(sbx.sandbox_id, "cat /home/user/note.txt")["stdout"] == "kept\n"
    finally:
        sbx.kill()


def test_list_filters_and_pages(e2bd):
    tag = f"py-list-{time.monotonic_ns()}"
    t0 = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    made = [Sandbox.create("base", timeout=120, metadata={"tag": tag, "n": str(i)}, **e2bd.opts())
            for i in range(3)]
    try:
        pager = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2, **e2bd.opts())
        first = pager.next_items()
        assert len(first) == 2 and pager.has_next
        rest = pager.next_items()
        assert len(rest) == 1 and not pager.has_next
        assert [s.sandbox_id for s in first + rest] == [s.sandbox_id for s in reversed(made)]

        odd = Sandbox.create("base", timeout=120, metadata={"k/1": "a b&c=d%e+f"}, **e2bd.opts())
        made.append(odd)
        found = Sandbox.list(query=SandboxQuery(metadata={"k/1": "a b&c=d%e+f"}),
                             **e2bd.opts()).next_items()
        assert [s.sandbox_id for s in found] == [odd.sandbox_id]

        made[2].pause()
        paused = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.PAUSED]),
                              **e2bd.opts()).next_items()
        assert [s.sandbox_id for s in paused] == [made[2].sandbox_id]
        # started_after: all three started after t0, none after now.
        after_t0 = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, started_after=t0),
                                **e2bd.opts()).next_items()
        assert len(after_t0) == 3
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=5)
        assert Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, started_after=later),
                            **e2bd.opts()).next_items() == []
    finally:
        for s in made:
            s.kill()


@pytest.mark.anyio
async def test_async_sdk(e2bd):
    sbx = await AsyncSandbox.create("base", timeout=60, metadata={"via": "async"}, **e2bd.opts())
    try:
        info = await sbx.get_info()
        assert info.metadata == {"via": "async"}
        assert await sbx.pause() is True
        resumed = await AsyncSandbox.connect(sbx.sandbox_id, **e2bd.opts())
        assert resumed.sandbox_id == sbx.sandbox_id
        assert e2bd.record(sbx.sandbox_id)["state"] == "running"
    finally:
        assert await sbx.kill() is True


def test_bad_inputs(e2bd):
    with pytest.raises(AuthenticationException):
        Sandbox.create("base", **{**e2bd.opts(), "api_key": e2bd.token + "x"})
    with pytest.raises(NotFoundException):
        Sandbox.connect("sb-doesnotexist", **e2bd.opts())
    with pytest.raises(SandboxException, match='unknown image "no-such-image"'):
        Sandbox.create("no-such-image", **e2bd.opts())
    with pytest.raises(SandboxException, match='"timeout" must be'):
        Sandbox.create("base", timeout=-3, **e2bd.opts())
    with pytest.raises(SandboxException, match='not supported by sandlotd'):
        Sandbox.create("base", allow_internet_access=True, **e2bd.opts())
    status, body = e2bd.request("GET", "/v1/sandboxes")
    assert status == 200 and body["sandboxes"] == []
