"""sandlot.aio (AsyncClient, AsyncSandbox) against a real sandlotd: the
same calls as the sync client over asyncio streams (unix socket, TCP with a
token), NDJSON streaming, chunked uploads, errors — and the event loop keeps
running while a call waits."""
import asyncio
import os
import time

import pytest

import sandlot
from sandlot.aio import AsyncClient, AsyncSandbox

from .pyclient_daemon import Daemon, free_port


def run(coro):
    return asyncio.run(coro)


async def ticker(stop, ticks, period=0.05):
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(period)


def test_aio_session(sandlotd, client):
    async def main():
        c = AsyncClient(f"unix:{sandlotd.sock}")
        assert (await c.health())["status"] == "ok"
        async with await c.create(memory="256M", metadata={"test": "aio"}) as sb:
            assert isinstance(sb, AsyncSandbox) and sb.state == "running"
            r = await sb.exec("echo out; echo err >&2; exit 3")
            assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
            r = await sb.exec(argv=["cat"], stdin=b"\x00\xffbin", output="base64")
            assert r.stdout_bytes == b"\x00\xffbin"
            # files: bytes, an async iterable (sent chunked), a sync iterable
            await sb.write_file("a.txt", "hello\n")

            async def parts():
                for i in range(200):
                    yield bytes([i]) * 1000
            w = await sb.write_file("dir/big.bin", parts())
            assert w["size"] == 200_000
            await sb.write_file("dir/c.txt", iter([b"x", b"", b"yz"]))
            assert await sb.read_file("dir/big.bin") == b"".join(bytes([i]) * 1000 for i in range(200))
            assert await sb.read_text("dir/c.txt") == "xyz"
            assert (await sb.stat("a.txt"))["size"] == 6
            assert sorted(e["name"] for e in await sb.list_dir("dir")) == ["big.bin", "c.txt"]
            assert await sb.exists("dir/c.txt") and not await sb.exists("nope")
            with pytest.raises(sandlot.NotFoundError) as ei:
                await sb.read_file("missing.txt")
            assert "missing.txt" in str(ei.value)
            await sb.remove("dir", recursive=True)
            assert not await sb.exists("dir")
            # changes, net and without caches
            await sb.exec("mkdir -p .cache/x && echo c > .cache/x/f && echo r > result.txt && rm a.txt")
            net = await sb.changes(0, net=True, exclude_hidden=True)
            kinds = {ch["path"]: ch["kind"] for ch in net["changes"]}
            assert kinds == {"/home/user/result.txt": "created"}, net
            assert net["hidden"] == 3
            # code cells keep state
            await sb.run_code("n = 41")
            assert (await sb.run_code("n + 1")).value == "42"
            ctx = await sb.create_context("python")
            assert ctx["id"] in [x["id"] for x in await sb.list_contexts()]
            await sb.delete_context(ctx)
            sid = sb.id
        assert (await c.get(sid)).state == "deleted"
        with pytest.raises(sandlot.SandboxEndedError):
            await c.sandbox(sid).exec("true")
    run(main())


def test_aio_pause_memory_is_sent(sb):
    # An ns sandbox pauses its files only: the memory pause is refused.
    async def main():
        s = AsyncClient(sb.client.host).sandbox(sb.id)
        with pytest.raises(sandlot.APIError) as ei:
            await s.pause(memory=True)
        assert ei.value.status == 501 and ei.value.code == "not_supported", ei.value
        assert (await s.pause()).state == "paused"
        assert (await s.resume()).state == "running"
    run(main())


def test_aio_exec_stream_is_live_and_close_kills(sb):
    async def main():
        s = AsyncClient(sb.client.host).sandbox(sb.id)
        t0 = time.monotonic()
        async with await s.exec_stream("echo a; sleep 1.5; echo b") as stream:
            first_out = None
            async for ev in stream:
                if ev["type"] == "stdout" and first_out is None:
                    first_out = (ev["data"], time.monotonic() - t0)
        assert first_out[0] == "a\n" and first_out[1] < 1.0, first_out
        assert stream.result.exit_code == 0 and stream.exec_id.startswith("ex-")
        # leaving the block early kills the command
        async with await s.exec_stream("echo started; sleep 60") as stream:
            async for ev in stream:
                if ev["type"] == "stdout":
                    break
        eid = stream.exec_id
        for _ in range(100):
            st = await s.exec_status(eid)
            if st["state"] != "running":
                break
            await asyncio.sleep(0.05)
        assert st["state"] != "running", st
        cs = await s.run_code_stream("print('x'); 6 * 7")
        res = await cs.wait()
        assert res.value == "42" and res.stdout == "x\n"
    run(main())


def test_aio_does_not_block_the_event_loop(sb):
    """A 2 s exec, a 2 s streamed exec and a 2 s cell run while a ticker
    ticks every 50 ms: no gap between ticks comes near the call's length."""
    async def main():
        s = AsyncClient(sb.client.host).sandbox(sb.id)
        for call in (lambda: s.exec("sleep 2"),
                     lambda: _drain(s.exec_stream("sleep 2; echo done")),
                     lambda: s.run_code("import time; time.sleep(2)")):
            stop, ticks = asyncio.Event(), []
            t = asyncio.ensure_future(ticker(stop, ticks))
            t0 = time.monotonic()
            await call()
            took = time.monotonic() - t0
            stop.set()
            await t
            gaps = [b - a for a, b in zip(ticks, ticks[1:])]
            assert took >= 1.9 and len(ticks) >= 15, (took, len(ticks))
            assert max(gaps) < 1.0, f"the loop stalled {max(gaps):.2f}s during a {took:.2f}s call"
        # and two long execs at once take the time of one
        t0 = time.monotonic()
        r1, r2 = await asyncio.gather(s.exec("sleep 1.5; echo 1"), s.exec("sleep 1.5; echo 2"))
        assert (r1.stdout, r2.stdout) == ("1\n", "2\n") and time.monotonic() - t0 < 2.9
    run(main())


async def _drain(aw):
    stream = await aw
    return await stream.wait()


def test_aio_tcp_with_token_and_errors(base_dir, tmp_path):
    token = "py-aio-token-" + os.urandom(8).hex()
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    port = free_port()
    d = Daemon(base_dir / "aio-tcp", ["--listen", f"tcp:127.0.0.1:{port}", "--token-file", tf]).start()

    async def main():
        c = AsyncClient(f"tcp:127.0.0.1:{port}", token=token)
        sb = await c.create()
        try:
            assert (await sb.exec("echo tcp")).stdout == "tcp\n"
            stream = await sb.exec_stream("seq 1 3")
            out = "".join([ev["data"] async for ev in stream if ev["type"] == "stdout"])
            assert out == "1\n2\n3\n"
            with pytest.raises(sandlot.AuthError) as ei:
                await AsyncClient(f"tcp:127.0.0.1:{port}").list()
            assert "needs a token" in str(ei.value)
            with pytest.raises(sandlot.AuthError) as ei:
                await AsyncClient(f"tcp:127.0.0.1:{port}", token="wrong-token-xxxx").list()
            assert "refused the token" in str(ei.value)
            with pytest.raises(sandlot.BadRequestError) as ei:
                await c.create(memory="12Q")
            assert "memory" in ei.value.message
            # an upload to an unknown sandbox: the daemon's answer, not a broken pipe
            with pytest.raises(sandlot.NotFoundError):
                await c.sandbox("sb-" + "b" * 26).write_file("x", b"y" * (4 << 20))
            # no answer within the wait given to the call
            with pytest.raises(sandlot.RequestTimeoutError) as ei:
                await c._call("POST", f"/v1/sandboxes/{sb.id}/exec", json_body={"command": "sleep 3"},
                              timeout=0.5)
            assert "0.5s" in str(ei.value)
        finally:
            await sb.destroy()
    try:
        run(main())
    finally:
        assert d.stop() == 0


def test_aio_unreachable(tmp_path):
    async def main():
        with pytest.raises(sandlot.DaemonUnreachableError) as ei:
            await AsyncClient(f"unix:{tmp_path}/none.sock").health()
        assert "cannot reach sandlotd" in str(ei.value) and "none.sock" in str(ei.value)
    run(main())
