"""Trying a call again when it did not reach a ready service: the service was restarting, warming
up or draining (it refused with UNAVAILABLE before running anything: ragmesh.readiness), or the
connection was lost. The clients (ragmesh.clients) use this for every call: it is the one place a
call is tried again. (Work that must outlast a longer outage retries whole steps on its own terms:
the retriever's ingest embedding, the gateway's memory writes.)

Each try gets what is left of the caller's deadline; between tries a backoff that grows from 50 ms
to 1 s, jittered so restarted services are not hit in step, and never past the deadline (nor past
RETRY_FOR_S, longer than the slowest service's restart, so a service that is down for good fails
its callers in seconds, not at a long stream's deadline). What is not retried: an UNAVAILABLE the
service answered itself (`grpc-retry-pushback-ms: -1`: its own dependency failed, and it retried
that already within the same deadline; retrying at every hop would multiply the load), any other
code, and a stream whose caller has already seen some of its messages (it fails; replaying it
would repeat them)."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any, Protocol, runtime_checkable

import grpc

from ragmesh.serving import RETRY_PUSHBACK_HEADER

log = logging.getLogger(__name__)

RETRY_FOR_S = 20.0
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
MIN_TRY_S = 0.05  # a try with less time than this left could not succeed: not made
# How much of a client stream is kept to send again (a document is at most INGEST_MAX_BYTES, 50 MB).
REPLAY_BYTES = 64 * 1024 * 1024


# grpc-python ends a client stream whose service ended the call while a message was being sent (it refused
# the call while not ready, or went away) with this status of its own, not the service's: the call did not
# get through.
LOST_SEND = (grpc.StatusCode.INTERNAL, "Internal error from Core")


def lost_send(exc: grpc.aio.AioRpcError) -> bool:
    """Whether the call failed on our side, sending to a call the service had already ended."""
    return (exc.code(), exc.details()) == LOST_SEND


def pushback_s(exc: grpc.aio.AioRpcError) -> float | None:
    """How long to wait before trying `exc`'s call again (0: the backoff decides); None: not at all."""
    if lost_send(exc):
        return 0.0
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    value = (exc.trailing_metadata() or {}).get(RETRY_PUSHBACK_HEADER)
    if value is None:
        return 0.0
    try:
        millis = int(value)
    except ValueError:
        return None
    return millis / 1000 if millis >= 0 else None


class Attempts:
    """The tries of one call, within its deadline."""

    def __init__(self, deadline: float, target: str, retry_for_s: float = RETRY_FOR_S) -> None:
        self.deadline = deadline
        self.give_up_at = min(deadline, time.monotonic() + retry_for_s)
        self.target = target
        self.tries = 0
        self.backoff_s = FIRST_BACKOFF_S

    def timeout(self) -> float:
        """The next try's timeout: what is left of the deadline."""
        self.tries += 1
        return max(0.001, self.deadline - time.monotonic())

    async def wait(self, exc: grpc.aio.AioRpcError) -> None:
        """Returns when the call may be tried again; raises `exc` when it must not be, or no time is left."""
        pushback = pushback_s(exc)
        if pushback is None:
            raise exc
        # The last try comes sooner than the backoff says rather than not at all.
        delay = min(max(pushback, self.backoff_s * random.uniform(0.5, 1.0)),
                    self.give_up_at - MIN_TRY_S - time.monotonic())
        if delay < 0:
            raise exc
        self.backoff_s = min(self.backoff_s * 2, MAX_BACKOFF_S)
        log.info("call not through; retrying", extra={"address": self.target, "try": self.tries,
                                                      "delay_s": round(delay, 3), "error": exc.details()})
        await asyncio.sleep(delay)


@runtime_checkable
class Deferred(Protocol):
    """A stream message made only as it is sent (its bytes read back from a spool, within a memory
    share) and let go once sent: what a Replay keeps to send it again is this, not its bytes."""

    async def message(self) -> Any:
        """The message, made now (it may wait for memory)."""

    def sent(self) -> None:
        """The message was sent (or its try ended): what it held is given back."""


class Replay:
    """The messages of a client stream, kept from its start until the service's first reply, so that
    a try the service never took can be sent again whole. Once a reply came (`commit`), or more than
    `limit` bytes were sent, nothing is kept and the stream cannot be tried again.

    A Deferred message is kept as itself and made anew by each try that sends it: a stream of
    spooled files is always replayable, and holds one file in memory at a time.

    Each try reads through `attempt()`; the source is read by a task of its own, so gRPC cancelling
    a failed try's sending never cancels the source itself. A source that raises ends the try
    (`on_error` cancels its call) and its error is kept in `error` for the caller."""

    def __init__(self, source: AsyncIterable[Any], limit: int = REPLAY_BYTES) -> None:
        self._source = aiter(source)
        self._limit = limit
        self._kept: list[Any] = []
        self._first = 0  # the position in the stream of _kept[0]
        self._size = 0
        self._pulling: asyncio.Future | None = None
        self._ended = False
        self._try = 0
        self.committed = False
        self.error: Exception | None = None

    @property
    def replayable(self) -> bool:
        return not self.committed and self._first == 0 and self._size <= self._limit

    def commit(self) -> None:
        """The service replied: what it was sent is never sent again."""
        self.committed = True

    async def _pull(self) -> None:
        try:
            message = await anext(self._source)
        except StopAsyncIteration:
            self._ended = True
            return
        except Exception as exc:  # noqa: BLE001 - the source's own error, handed to the caller
            self.error, self._ended = exc, True
            return
        self._kept.append(message)
        self._size += 0 if isinstance(message, Deferred) else message.ByteSize()

    async def attempt(self, on_error: Callable[[], None]) -> AsyncIterator[Any]:
        """One try's messages: those kept, then the source's next ones. Only the latest try reads."""
        self._try += 1
        mine, position = self._try, 0 if self.replayable else self._first
        while mine == self._try:
            if position < self._first + len(self._kept):
                message = self._kept[position - self._first]
                position += 1
                if not self.replayable:  # nothing will be sent again: drop what this try has sent
                    del self._kept[: position - self._first]
                    self._first = position
                if isinstance(message, Deferred):
                    try:
                        yield await message.message()
                    finally:  # gRPC asks for the next message once this one is written
                        message.sent()
                else:
                    yield message
            elif self.error is not None:
                on_error()
                return
            elif self._ended:
                return
            else:
                if self._pulling is None or self._pulling.done():
                    self._pulling = asyncio.ensure_future(self._pull())
                await asyncio.shield(self._pulling)

    def close(self) -> None:
        """Stops reading the source (the call is over)."""
        if self._pulling is not None and not self._pulling.done():
            self._pulling.cancel()
