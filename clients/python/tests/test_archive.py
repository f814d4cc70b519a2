"""Sandbox.archive() and resume(from_archive=True): a paused sandbox moved
from one daemon to another through a shared file:// archive store
(docs/fleet-move.md), with the sync and the asyncio clients."""
import asyncio

import pytest

import sandlot
from sandlot import aio

from .pyclient_daemon import Daemon


@pytest.fixture
def two(base_dir, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    ds = [Daemon(base_dir / f"archive-{tmp_path.name}-{n}",
                 extra_args=["--archive", f"file://{store}", "--node-id", n]).start()
          for n in ("pa", "pb")]
    yield ds
    for d in ds:
        assert d.stop() == 0, d.logs()
        assert not d.leftovers(), d.leftovers()


def test_move_with_the_client(two):
    a, b = (d.client() for d in two)
    sb = a.create()
    sb.write_file("moved.txt", b"across")
    sb.pause()
    info = sb.archive()
    assert info["generation"] == 1 and info["node"] == "pa" and len(info["sha256"]) == 64
    assert sb.state == "paused"
    other = b.sandbox(sb.id)
    assert other.resume(from_archive=True).state == "running"
    assert other.read_file("moved.txt") == b"across"
    with pytest.raises(sandlot.APIError) as ei:
        sb.resume()
    assert ei.value.status == 410 and ei.value.code == "sandbox_moved"
    other.destroy()


def test_move_with_the_asyncio_client(two):
    async def run():
        async with aio.AsyncClient(f"unix:{two[0].sock}") as a, \
                aio.AsyncClient(f"unix:{two[1].sock}") as b:
            sb = await a.create()
            await sb.write_file("m.txt", b"x")
            await sb.pause()
            assert (await sb.archive())["node"] == "pa"
            other = b.sandbox(sb.id)
            await other.resume(from_archive=True)
            assert await other.read_file("m.txt") == b"x"
            await other.destroy()
    asyncio.run(run())
