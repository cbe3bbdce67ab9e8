"""Micro-batching for the embedder: concurrent Embed calls of the same task share one model call.

Serving one request per model call left the model idle between tiny batches: 200 concurrent searches
ran at ~26/s, while the same model embeds dozens of short queries in about the time of one. Requests
wait at most a short window (or until a batch is full), then ONE backend.embed call runs in a worker
thread; requests that arrive while it runs form the next batch. A request that finds the model idle
runs at once: the window only pays while requests keep coming. One call at a time, because on a
couple of cores the model already uses every core for one batch.

A request larger than a batch runs alone, in one backend call: the backend chunks it its own way
(Gemini packs 100 texts per HTTP request, its API's limit), and ingest sends at most
EMBED_BATCH_SIZE texts a call anyway.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ragmesh.errors import RagmeshError, ResourceExhausted, Unavailable
from services.embedder.backends import EmbeddingBackend


class DeadlineExceeded(RagmeshError):
    """The caller's deadline passed while its texts were still waiting: embedding them helps nobody."""

    code = "DEADLINE_EXCEEDED"
    http_status = 504


@dataclass(eq=False)
class _Request:
    """One caller's texts, waiting for a batch (queued) until taken into one."""

    texts: list[str]
    task: str
    deadline: float | None  # time.monotonic() by which the caller gives up; None = never
    arrived: float
    future: asyncio.Future[np.ndarray]
    queued: bool = True


class MicroBatcher:
    """Collects concurrent embed requests per task and runs them as bounded batches, one at a time.

    Single event loop: the queues are touched only from the loop; only backend.embed runs in a thread.
    """

    def __init__(self, backend: EmbeddingBackend, window_ms: float = 5.0, max_batch: int = 64,
                 max_queue: int = 4096) -> None:
        if window_ms < 0:
            raise ValueError("EMBED_BATCH_WINDOW_MS must be 0 or more")
        if max_batch < 1:
            raise ValueError("EMBED_MAX_BATCH must be at least 1")
        if max_queue < 1:
            raise ValueError("EMBED_MAX_QUEUE must be at least 1")
        self.backend = backend
        self.window_s = window_ms / 1000
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batches = 0  # backend calls made
        self.dropped = 0  # requests abandoned (cancelled, past their deadline) before their batch ran
        self._queues: dict[str, deque[_Request]] = {}
        self._waiting = 0  # texts queued and not yet taken into a batch, over all tasks
        self._waiting_by_task: dict[str, int] = {}
        self._arrived = asyncio.Event()  # remade with each worker: it belongs to the worker's loop
        self._worker: asyncio.Task[None] | None = None

    async def embed(self, texts: list[str], task: str, deadline: float | None = None) -> np.ndarray:
        """(len(texts), dimensions) rows for this caller, in order. Raises ResourceExhausted when the
        queue is full, and whatever the backend raised for a batch this request was part of."""
        if not texts:
            return np.zeros((0, self.backend.dimensions), dtype=np.float32)
        # A lone request larger than the queue is still admitted: MAX_TEXTS bounds it, and refusing
        # it would fail it forever.
        if self._waiting and self._waiting + len(texts) > self.max_queue:
            raise ResourceExhausted(f"embedder: queue full ({self._waiting} texts waiting, at most "
                                    f"{self.max_queue}); retry shortly", retry_after_s=1.0)
        loop = asyncio.get_running_loop()
        request = _Request(list(texts), task, deadline, loop.time(), loop.create_future())
        request.future.add_done_callback(lambda _: self._forget(request))
        self._queues.setdefault(task, deque()).append(request)
        self._count(task, len(texts))
        if self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = asyncio.create_task(self._run(self._arrived), name="embed-batcher")
        self._arrived.set()
        # A cancelled caller cancels the future too, so the worker skips it.
        return await request.future

    async def close(self) -> None:
        """Stops the worker; callers still waiting get UNAVAILABLE rather than hang."""
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        for queue in self._queues.values():
            for request in queue:
                if not request.future.done():
                    request.future.set_exception(Unavailable("embedder: shutting down"))

    def _count(self, task: str, n: int) -> None:
        self._waiting += n
        self._waiting_by_task[task] = self._waiting_by_task.get(task, 0) + n

    def _forget(self, request: _Request) -> None:
        """A request that finished while queued (cancelled, past its deadline, shut down) no longer
        counts against the queue."""
        if request.queued:
            request.queued = False
            self._count(request.task, -len(request.texts))
            future = request.future
            if future.cancelled() or isinstance(future.exception(), DeadlineExceeded):
                self.dropped += 1

    def _head(self, task: str) -> _Request | None:
        """The oldest live request of a task; abandoned ones are discarded on the way."""
        queue = self._queues.get(task)
        while queue:
            request = queue[0]
            if request.future.done():
                queue.popleft()
            elif request.deadline is not None and time.monotonic() >= request.deadline:
                queue.popleft()
                request.future.set_exception(DeadlineExceeded("embedder: deadline passed while queued"))
            else:
                return request
        return None

    def _oldest(self) -> _Request | None:
        heads = [h for h in map(self._head, list(self._queues)) if h is not None]
        return min(heads, key=lambda h: h.arrived, default=None)

    async def _run(self, arrived: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last_end = float("-inf")  # when the last batch finished (loop time)
        while True:
            head = self._oldest()
            if head is None:
                arrived.clear()
                await arrived.wait()
                continue
            # Wait for company until the oldest request's window closes or its task fills a batch, but
            # only while requests keep coming (it arrived while a batch ran): a request that found the
            # model idle runs at once, and the ones arriving meanwhile form the next batch.
            delay = head.arrived + self.window_s - loop.time()
            busy = head.arrived <= last_end
            if busy and delay > 0 and self._waiting_by_task[head.task] < self.max_batch:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), delay)
                except TimeoutError:
                    pass
                continue
            await self._run_batch(head.task)
            last_end = loop.time()

    def _take(self, task: str) -> list[_Request]:
        """The oldest requests of one task, up to max_batch texts; a larger request alone."""
        batch: list[_Request] = []
        room = self.max_batch
        while (request := self._head(task)) is not None and (not batch or len(request.texts) <= room):
            self._queues[task].popleft()
            request.queued = False
            self._count(task, -len(request.texts))
            batch.append(request)
            room -= len(request.texts)
        return batch

    async def _run_batch(self, task: str) -> None:
        batch = self._take(task)
        if not batch:
            return
        texts = [t for request in batch for t in request.texts]
        self.batches += 1
        try:
            vectors = await asyncio.to_thread(self.backend.embed, texts, task)
            if len(vectors) != len(texts):  # rows would go to the wrong callers
                raise RuntimeError(f"backend returned {len(vectors)} vectors for {len(texts)} texts")
        except asyncio.CancelledError:
            self._fail(batch, Unavailable("embedder: shutting down"))
            raise
        except Exception as exc:  # noqa: BLE001 - this batch's callers get the backend's error, no one else
            self._fail(batch, exc)
            return
        row = 0
        for request in batch:
            if not request.future.done():  # a caller cancelled while its batch ran
                request.future.set_result(vectors[row : row + len(request.texts)])
            row += len(request.texts)

    @staticmethod
    def _fail(batch: list[_Request], error: BaseException) -> None:
        for request in batch:
            if not request.future.done():
                request.future.set_exception(error)
