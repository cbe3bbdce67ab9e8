"""An answer's text streamed in fewer, larger pieces: every piece costs a gRPC message here and in the
gateway, a citation and answer-guard step, an SSE event and a socket write, whatever its size, so the text
a backend yields within one window of the last piece sent goes out as one piece. The first piece (and
any piece after a pause as long as the window) goes out the moment it comes, so the time to the first
token is unchanged; the text, and the order of the events, are the backend's."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace

from ragmesh.types import GenEvent

TEXT = ("thinking", "content")


class _End:
    """The backend's stream ended (or failed, with its exception)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


async def coalesced(events: AsyncIterator[GenEvent], window_s: float) -> AsyncIterator[GenEvent]:
    """`events` with the thinking and content text that comes within `window_s` of the last piece sent
    joined into one piece (of each kind, in order); 0 sends every piece as it comes."""
    if window_s <= 0:
        async with aclosing(events):
            async for event in events:
                yield event
        return
    queue: asyncio.Queue[GenEvent | _End] = asyncio.Queue()
    pump = asyncio.create_task(_pump(events, queue))
    loop = asyncio.get_running_loop()
    sent = float("-inf")  # when the last text piece went out
    end: _End | None = None
    try:
        while end is None:
            item = await queue.get()
            if isinstance(item, _End):
                end = item
                break
            if item.kind not in TEXT:
                yield item
                continue
            if (wait := sent + window_s - loop.time()) > 0:
                await asyncio.sleep(wait)  # the pieces that come meanwhile join this one
            batch = [item]
            while end is None and not queue.empty():
                following = queue.get_nowait()
                if isinstance(following, _End):
                    end = following
                else:
                    batch.append(following)
            sent = loop.time()
            for event in _joined(batch):
                yield event
        if end.error is not None:
            raise end.error
    finally:
        pump.cancel()  # the caller went: the backend's stream closes now
        await asyncio.gather(pump, return_exceptions=True)


async def _pump(events: AsyncIterator[GenEvent], queue: asyncio.Queue[GenEvent | _End]) -> None:
    try:
        async with aclosing(events):
            async for event in events:
                queue.put_nowait(event)
    except asyncio.CancelledError as exc:  # the caller is never left waiting for a stream cancelled elsewhere
        queue.put_nowait(_End(exc))
        raise
    except Exception as exc:  # the backend's failure reaches the caller as it would unpaced
        queue.put_nowait(_End(exc))
        return
    queue.put_nowait(_End())


def _joined(batch: list[GenEvent]) -> list[GenEvent]:
    """Adjacent text events of one kind as one event; every other event as it is, in order."""
    out: list[GenEvent] = []
    for event in batch:
        if out and event.kind in TEXT and out[-1].kind == event.kind:
            out[-1] = replace(out[-1], text=out[-1].text + event.text)
        else:
            out.append(event)
    return out
