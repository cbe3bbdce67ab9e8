"""A tenant's share of the gateway's memory for uploads (services/gateway/upload_memory.py), and the
spool files wait in (ragmesh/spool.py)."""
from __future__ import annotations

import asyncio
import os
import stat

import pytest

from ragmesh.errors import ResourceExhausted
from ragmesh.spool import Spool
from services.gateway.upload_memory import TenantBytes


def test_a_tenant_past_its_share_waits_for_its_own_uploads_and_never_for_anothers() -> None:
    async def scenario() -> None:
        memory = TenantBytes(100)
        assert await memory.take("a", 60) == 60
        second = asyncio.ensure_future(memory.take("a", 60))
        await asyncio.sleep(0.01)
        assert not second.done()  # a's second file waits for its first to be sent
        assert await asyncio.wait_for(memory.take("b", 100), 1) == 100  # b is not held up by a
        memory.give("a", 60)
        assert await asyncio.wait_for(second, 1) == 60
        big = asyncio.ensure_future(memory.take("a", 500))  # over the whole share: goes alone
        await asyncio.sleep(0.01)
        assert not big.done()
        memory.give("a", 60)
        assert await asyncio.wait_for(big, 1) == 100
        memory.give("a", 100)
        memory.give("b", 100)
        assert memory.held("a") == memory.held("b") == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_takes_nothing_and_lets_the_next_in() -> None:
    async def scenario() -> None:
        memory = TenantBytes(100)
        await memory.take("a", 100)
        first = asyncio.ensure_future(memory.take("a", 50))
        second = asyncio.ensure_future(memory.take("a", 50))
        await asyncio.sleep(0.01)
        first.cancel()
        memory.give("a", 100)
        assert await asyncio.wait_for(second, 1) == 50
        with pytest.raises(asyncio.CancelledError):
            await first
        assert memory.held("a") == 50

    asyncio.run(scenario())


def test_taken_now_or_refused_naming_the_share_never_past_a_waiter() -> None:
    async def scenario() -> None:
        memory = TenantBytes(100)
        assert memory.take_now("a", 60) == 60
        with pytest.raises(ResourceExhausted, match="UPLOAD_MEMORY_PER_TENANT_MB") as refused:
            memory.take_now("a", 60)
        assert refused.value.retry_after_s >= 1 and memory.held("a") == 60
        assert memory.take_now("b", 500) == 100  # another tenant's share; over it: the whole share
        waiter = asyncio.ensure_future(memory.take("a", 60))
        await asyncio.sleep(0.01)
        memory.give("a", 20)  # room for 40 now, but a's waiter is first
        with pytest.raises(ResourceExhausted):
            memory.take_now("a", 10)
        memory.give("a", 40)
        assert await asyncio.wait_for(waiter, 1) == 60

    asyncio.run(scenario())


def test_spooled_bytes_are_in_a_private_nameless_file_gone_once_read_and_leftovers_go_at_start(tmp_path) -> None:
    folder = tmp_path / "spool" / "retriever"
    folder.mkdir(parents=True)
    (folder / "left-by-a-crash").write_bytes(b"x")
    spool = Spool(folder)
    assert not any(folder.iterdir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    spooled = spool.put(b"secret" * 1000)
    assert not any(folder.iterdir())  # no name: nothing to find, nothing left if the process dies
    fd = spooled._file.fileno()
    assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
    assert spooled.read() == spooled.take() == b"secret" * 1000
    with pytest.raises(OSError):
        os.fstat(fd)  # closed: its disk space is freed
    dropped = spool.put(b"y")
    fd = dropped._file.fileno()
    del dropped  # a failed or cancelled upload: its file goes with it
    with pytest.raises(OSError):
        os.fstat(fd)
