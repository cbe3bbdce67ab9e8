"""Runs a vendor SDK's stream in a task of its own, so closing our stream closes theirs.

An SDK stream is a chain of async generators. aclose() on the outer one does not close
the inner ones, which hold the HTTP response, until the garbage collector gets to them.
Cancelling a task that is awaiting the stream raises CancelledError at the innermost
await instead, so every generator in the chain unwinds and the SDK closes its HTTP
response before we return. The task only ever awaits the stream (items go to an
unbounded queue, a few KB of text at most), so a cancel always lands inside it.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")
_END = object()


async def detached(source: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    """Yields what `source()` yields; closing or cancelling this closes the source at once."""
    queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source():
                queue.put_nowait((item, None))
            queue.put_nowait((_END, None))
        except Exception as exc:  # handed to the consumer, raised there
            queue.put_nowait((_END, exc))

    task = asyncio.create_task(pump())
    try:
        while True:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item  # type: ignore[misc]
    finally:
        task.cancel()
        await asyncio.wait({task})  # the source's own clean-up (closing its response) has run
