"""Micro-batching for the embedder: concurrent Embed calls of the same task share one model call, and
no tenant's calls stall another's.

Serving one request per model call left the model idle between tiny batches: 200 concurrent searches
ran at ~26/s, while the same model embeds dozens of short queries in about the time of one. Requests
wait at most a short window (or until a batch is full), then ONE backend.embed call runs in a worker
thread; requests that arrive while it runs form the next batch. A request that finds the model idle
runs at once: the window only pays while requests keep coming. One call at a time per tenant, because
on a couple of cores the model already uses every core for one batch.

Fairness between tenants (issue 23): one tenant calling Embed back to back with the largest call the
limits allow made another tenant's one-text upload wait 20x longer, behind the running 64-text call
and then merged into the next. So:

- each batch starts from the tenant served least recently among those with waiting work (round
  robin), and is filled with same-task requests of every tenant in that order, so many users'
  questions still share a model call;
- a backend call carries at most `slice_chars` characters (one text at least): a larger request runs
  in slices, one slice per turn of its tenant, so another tenant waits about one slice, not a whole
  call. Only the batch's first tenant may have its request cut; the others' requests join whole or
  wait for their own turn, so a small request never rides with another tenant's slice. Characters
  stand in for the model's work (a text of 2,000 characters takes about ten times a question's);
- another tenant's request joins a call only if it is of the same length class (SHORT_CHARS): a call
  is as slow as its longest text, padded, and the model takes a faster path for short texts, so a
  one-line upload that carried a rival's 800-character memory chunk took 30 times as long (4 -> 130 ms),
  and one that rode along a rival's long call waited for all of it;
- a request waits for company (the window) only while its own tenant's requests keep coming, never
  because another tenant's call is under way: one tenant's load made every other tenant's lone request
  wait out the window;
- a tenant alone on the model (no other tenant served in the last ACTIVE_S) gets slices ALONE_SLICE
  times as large, and its many small requests share calls of up to max_batch texts as before: nobody
  waits on them, and so a lone tenant's ingest (5 chunks a call embed as fast as 64) and its users'
  chats (their questions and memory chunks, 64 a call) lose nothing. Another tenant arriving then
  waits for one such call at most, and for one slice from then on.

A sliced request's rows are put back together in order: the caller sees one reply, as before.

The queue's places (max_queue texts waiting) are shared the same way: one key kept the queue full, and
another tenant's embeddings were refused. A tenant holds at most half of the places the other tenants
leave free, so whoever comes next always finds places.

A backend may take `lanes` calls at once (the local model: two, each on its share of the cores): a
batch of other tenants then starts beside a running slice instead of waiting for it to end, so
another tenant's one-text upload waits for no slice at all. Batches running together never share a
tenant, so a lone tenant keeps one call at a time on every core, and a request's slices still run in
order, one at a time.

Calls side by side share the cores (and the interpreter) thread by thread, so a call that starts beside
others holds their tenants back until it ends: none of them starts another call beside it. A rival
asking back to back (its questions, its answers' memory) used to start its next call the moment its last
one ended, beside the victim's upload still running, which then shared the cores with the rival's calls
one after another for as long as it ran: now the upload shares them with the one call it started beside
at most, and the rival's next call waits, in its turn, for the upload's to end. The call under way holds
nobody back: the victim's next upload starts beside it as the first did. Two busy tenants so take turns:
one's call starts alone, the other's beside it, and the first one's next waits for that one.

Side by side, the operating system still shares the cores between the calls thread by thread: the
victim's one-text call ran three times as long beside the rival's (14 -> 40 ms). So a call whose
tenants have all used the model more of late (backend seconds, halved every USE_HALF_LIFE_S) than
another tenant with work (waiting, running, or served in the last ACTIVE_S) runs on threads that give
way (ragmesh.thread_priority): beside the other tenant's call it gets what that one leaves, alone it
gets every core as before. (The local model then runs the call's questions on that thread alone: a
model's own helper threads run at the normal priority; backends/onnx.py.)
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ragmesh.errors import RagmeshError, ResourceExhausted, Unavailable
from ragmesh.thread_priority import giving_way_pool
from services.embedder.backends import EmbeddingBackend


ACTIVE_S = 1.0  # a tenant served this recently is still about: its next request is likely on its way
ALONE_SLICE = 2
# Texts of at most this many characters (about the 64 tokens of the model's short-text path) embed at
# about the same cost whatever their length: any of them share a call. Longer ones share a call with
# another tenant's only if neither is more than twice as long (a call's texts are padded to its longest).
SHORT_CHARS = 256
USE_HALF_LIFE_S = 2.0  # a tenant's use of the model (backend seconds) counts half after this long


class DeadlineExceeded(RagmeshError):
    """The caller's deadline passed while its texts were still waiting: embedding them helps nobody."""

    code = "DEADLINE_EXCEEDED"
    http_status = 504


@dataclass(eq=False)
class _Request:
    """One caller's texts, waiting (queued) until the last of them is taken into a batch."""

    texts: list[str]
    task: str
    tenant: str
    deadline: float | None  # time.monotonic() by which the caller gives up; None = never
    arrived: float
    future: asyncio.Future[np.ndarray]
    taken: int = 0  # texts handed to backend calls so far (the request's slices)
    rows: np.ndarray | None = None  # the vectors of the slices done, until the last one
    queued: bool = True

    def remaining_chars(self) -> int:
        return sum(map(len, self.texts[self.taken :]))


@dataclass
class _Piece:
    """The texts [start, stop) of one request in one backend call."""

    request: _Request
    start: int
    stop: int


@dataclass
class _Batch:
    task: str
    chars_limit: float  # characters the batch may carry beyond its first request
    pieces: list[_Piece] = field(default_factory=list)
    texts: int = 0
    chars: int = 0
    longest: int = 0  # characters of its longest text


def _alike(a: int, b: int) -> bool:
    """Whether texts of a and b characters cost about the same padded to each other (SHORT_CHARS)."""
    return max(a, b) <= max(2 * min(a, b), SHORT_CHARS)


class MicroBatcher:
    """Collects concurrent embed requests per task and runs them as bounded batches, at most `lanes` at
    a time and never two with the same tenant, taking tenants in turn.

    Single event loop: the queues are touched only from the loop; only backend.embed runs in a thread.
    """

    def __init__(self, backend: EmbeddingBackend, window_ms: float = 5.0, max_batch: int = 64,
                 max_queue: int = 4096, slice_chars: int = 0, lanes: int = 1) -> None:
        if window_ms < 0:
            raise ValueError("EMBED_BATCH_WINDOW_MS must be 0 or more")
        if max_batch < 1:
            raise ValueError("EMBED_MAX_BATCH must be at least 1")
        if max_queue < 1:
            raise ValueError("EMBED_MAX_QUEUE must be at least 1")
        if slice_chars < 0:
            raise ValueError("EMBED_SLICE_CHARS must be 0 (no limit) or more")
        if lanes < 1:
            raise ValueError("an embedding backend takes at least one call at a time")
        self.backend = backend
        self.window_s = window_ms / 1000
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.slice_chars = slice_chars  # 0: a request always runs as one call
        self.lanes = lanes  # backend calls at once, each for other tenants
        self.batches = 0  # backend calls made
        self.dropped = 0  # requests abandoned (cancelled, past their deadline) before their batch ran
        self._queues: dict[tuple[str, str], deque[_Request]] = {}  # (tenant, task): oldest first
        self._turns = 0  # requests (or slices) handed to backend calls so far
        self._served: dict[str, int] = {}  # tenant: the turn that last served it
        self._served_at: dict[str, float] = {}  # tenant: when its last backend call ended (loop time)
        self._waiting = 0  # texts queued and not yet taken into a batch, over all tasks
        self._waiting_by_task: dict[str, int] = {}
        self._waiting_by_tenant: dict[str, int] = {}
        self._arrived = asyncio.Event()  # remade with each worker: it belongs to the worker's loop
        self._running: dict[asyncio.Task[None], set[str]] = {}  # backend calls under way: their tenants
        self._holding: dict[asyncio.Task[None], set[str]] = {}  # and the tenants of the calls each started beside
        self._worker: asyncio.Task[None] | None = None
        self._used: dict[str, tuple[float, float]] = {}  # tenant: (backend seconds, decayed to this loop time)
        self._since: dict[str, float] = {}  # tenant: when its call under way started
        self._giving_way = giving_way_pool(lanes, "embed-giving-way")  # calls of tenants over their share
        self.gave_way = 0  # backend calls run on those threads

    @property
    def waiting(self) -> int:
        """Texts queued and not yet taken into a backend call."""
        return self._waiting

    async def embed(self, texts: list[str], task: str, deadline: float | None = None,
                    tenant: str = "") -> np.ndarray:
        """(len(texts), dimensions) rows for this caller, in order. Raises ResourceExhausted when the
        queue is full, and whatever the backend raised for a batch this request was part of."""
        if not texts:
            return np.zeros((0, self.backend.dimensions), dtype=np.float32)
        self._admit(tenant, len(texts))
        loop = asyncio.get_running_loop()
        request = _Request(list(texts), task, tenant, deadline, loop.time(), loop.create_future())
        request.future.add_done_callback(lambda _: self._forget(request))
        self._queues.setdefault((tenant, task), deque()).append(request)
        self._count(request, len(texts))
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
        self._giving_way.shutdown(wait=False)

    def _admit(self, tenant: str, n: int) -> None:
        """Raises ResourceExhausted unless `n` more texts of `tenant` may wait. A tenant's share is half
        the places the other tenants leave free: one tenant's calls never fill the queue, and whoever
        comes next finds at least as many places free as the busiest tenant holds (so the queue as a
        whole never holds more than max_queue either). A lone request at an empty queue is always
        admitted: the call limits bound it, and refusing it would fail it forever."""
        mine = self._waiting_by_tenant.get(tenant, 0)
        share = (self.max_queue - (self._waiting - mine)) // 2
        if self._waiting and mine + n > share:
            raise ResourceExhausted(f"embedder: queue full for this tenant ({self._waiting} texts waiting, {mine} "
                                    f"of them its own; a tenant holds at most half the places others leave of "
                                    f"EMBED_MAX_QUEUE, {self.max_queue}); retry shortly", retry_after_s=1.0)

    def _count(self, request: _Request, n: int) -> None:
        self._waiting += n
        self._waiting_by_task[request.task] = self._waiting_by_task.get(request.task, 0) + n
        held = self._waiting_by_tenant.get(request.tenant, 0) + n
        if held:
            self._waiting_by_tenant[request.tenant] = held
        else:
            self._waiting_by_tenant.pop(request.tenant, None)

    def _forget(self, request: _Request) -> None:
        """A request that finished while queued (cancelled, past its deadline, shut down, or failed in
        an earlier slice) no longer counts against the queue."""
        if request.queued:
            request.queued = False
            self._count(request, request.taken - len(request.texts))
            future = request.future
            if future.cancelled() or isinstance(future.exception(), DeadlineExceeded):
                self.dropped += 1

    def _head(self, key: tuple[str, str]) -> _Request | None:
        """The oldest live request of a tenant and task; abandoned ones are discarded on the way."""
        queue = self._queues.get(key)
        while queue:
            request = queue[0]
            if request.future.done():
                queue.popleft()
            elif request.deadline is not None and time.monotonic() >= request.deadline:
                queue.popleft()
                request.future.set_exception(DeadlineExceeded("embedder: deadline passed while queued"))
            else:
                return request
        if queue is not None:
            del self._queues[key]
        return None

    def _heads(self, task: str | None = None) -> list[_Request]:
        """Each tenant's oldest live request (of `task`, or of each task), in turn order: the tenant
        served least recently first (never served before any), then the oldest first. Tenants with a
        backend call under way, or held back by one (see the module), wait for it to end."""
        busy = set().union(*self._running.values(), *self._holding.values())
        keys = [key for key in self._queues if (task is None or key[1] == task) and key[0] not in busy]
        heads = [h for h in map(self._head, keys) if h is not None]
        return sorted(heads, key=lambda h: (self._served.get(h.tenant, -1), h.arrived))

    def _next(self) -> _Request | None:
        """The request the next batch starts from: the oldest of the tenant whose turn it is."""
        heads = self._heads()
        return min((h for h in heads if h.tenant == heads[0].tenant), key=lambda h: h.arrived) if heads else None

    async def _run(self, arrived: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()

        def ended(task: asyncio.Task[None]) -> None:
            self._running.pop(task, None)
            self._holding.pop(task, None)
            arrived.set()  # a lane is free, and its tenants may go again

        try:
            while True:
                head = self._next() if len(self._running) < self.lanes else None
                if head is None:
                    arrived.clear()
                    await arrived.wait()
                    continue
                # Wait for company until the first request's window closes or its task fills a batch,
                # but only while its tenant's requests keep coming (it arrived while its tenant's last
                # call ran): a request that found its tenant idle runs at once, whatever other tenants
                # run, and the ones arriving meanwhile form the next batch. A request already partly
                # run has had its wait.
                delay = head.arrived + self.window_s - loop.time()
                busy = head.arrived <= self._served_at.get(head.tenant, float("-inf")) and not head.taken
                if busy and delay > 0 and self._waiting_by_task[head.task] < self.max_batch:
                    arrived.clear()
                    try:
                        await asyncio.wait_for(arrived.wait(), delay)
                    except TimeoutError:
                        pass
                    continue
                batch = self._take(head, loop.time())
                task = asyncio.create_task(self._run_batch(batch), name="embed-batch")
                self._holding[task] = set().union(*self._running.values())  # the calls it starts beside
                self._running[task] = {p.request.tenant for p in batch.pieces}
                task.add_done_callback(ended)
        finally:  # shutting down: the calls under way fail their callers with UNAVAILABLE
            for task in list(self._running):
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    def _take(self, first: _Request, now: float) -> _Batch:
        """`first` (whole, or its next slice), then requests of its task tenant by tenant in turn order,
        one a tenant a round, each whole while the batch has room (texts, and characters unless the
        tenant is alone); a tenant whose next request does not fit waits for its own turn."""
        alone = not any(t != first.tenant and now - at < ACTIVE_S for t, at in self._served_at.items())
        limit = self.slice_chars * (ALONE_SLICE if alone else 1) if self.slice_chars else float("inf")
        batch = _Batch(first.task, float("inf") if alone else limit)
        self._add(batch, first, self._slice(first, limit))
        tenants = deque(h.tenant for h in self._heads(first.task) if h.tenant != first.tenant)
        tenants.append(first.tenant)  # it has had its turn this round
        while tenants and batch.texts < self.max_batch:
            tenant = tenants.popleft()
            request = self._head((tenant, first.task))
            if request is None:
                continue
            n, chars = len(request.texts) - request.taken, request.remaining_chars()
            # A request that runs in slices (cut, or too big for one) only ever goes first.
            if request.taken or chars > limit or batch.texts + n > self.max_batch or (
                    batch.chars + chars > batch.chars_limit) or (
                    tenant != first.tenant and not _alike(batch.longest, max(map(len, request.texts)))):
                continue
            self._add(batch, request, n)
            tenants.append(tenant)
        return batch

    @staticmethod
    def _slice(request: _Request, limit: float) -> int:
        """How many of the request's remaining texts its next backend call takes: all of them within
        `limit` characters, else as many as fit, one at least."""
        n, chars = 0, 0
        for text in request.texts[request.taken :]:
            chars += len(text)
            if n and chars > limit:
                break
            n += 1
        return n

    def _add(self, batch: _Batch, request: _Request, n: int) -> None:
        start = request.taken
        request.taken += n
        batch.pieces.append(_Piece(request, start, request.taken))
        batch.texts += n
        batch.chars += sum(map(len, request.texts[start : request.taken]))
        batch.longest = max(batch.longest, *map(len, request.texts[start : request.taken]))
        self._count(request, -n)
        if request.taken == len(request.texts):
            request.queued = False
            self._queues[(request.tenant, request.task)].popleft()  # taken from the head, always

    def _use(self, tenant: str, now: float) -> float:
        """The tenant's backend seconds (its call under way's so far too), each counting half after
        USE_HALF_LIFE_S."""
        seconds, at = self._used.get(tenant, (0.0, now))
        return seconds * math.exp2((at - now) / USE_HALF_LIFE_S) + now - self._since.get(tenant, now)

    def _gives_way(self, tenants: set[str], now: float) -> bool:
        """Whether a call for `tenants` runs on the threads that give way: each of them has used the model
        more of late than another tenant with work (waiting, running, or served in the last ACTIVE_S)."""
        others = ({tenant for tenant, _ in self._queues} | set().union(*self._running.values())
                  | {t for t, at in self._served_at.items() if now - at < ACTIVE_S}) - tenants
        return bool(others) and min(self._use(t, now) for t in tenants) > min(self._use(o, now) for o in others)

    async def _call(self, texts: list[str], task: str, tenants: set[str]) -> np.ndarray:
        """The backend call, on the threads that give way if its tenants are over their share; the time
        it takes counts as their use."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        gives_way = self._gives_way(tenants, started)
        self._since.update(dict.fromkeys(tenants, started))
        try:
            if not gives_way:
                return await asyncio.to_thread(self.backend.embed, texts, task)
            self.gave_way += 1
            call = functools.partial(contextvars.copy_context().run, self.backend.embed, texts, task)
            return await loop.run_in_executor(self._giving_way, call)
        finally:
            ended = loop.time()
            for tenant in tenants:
                self._used[tenant] = (self._use(tenant, ended), ended)
                del self._since[tenant]

    async def _run_batch(self, batch: _Batch) -> None:
        texts = [t for p in batch.pieces for t in p.request.texts[p.start : p.stop]]
        tenants = {p.request.tenant for p in batch.pieces}
        self.batches += 1
        for piece in batch.pieces:  # the batch's last tenant is the one served most recently
            self._turns += 1
            self._served[piece.request.tenant] = self._turns
        try:
            vectors = await self._call(texts, batch.task, tenants)
            ended = asyncio.get_running_loop().time()
            for piece in batch.pieces:
                self._served_at[piece.request.tenant] = ended
            if len(vectors) != len(texts):  # rows would go to the wrong callers
                raise RuntimeError(f"backend returned {len(vectors)} vectors for {len(texts)} texts")
        except asyncio.CancelledError:
            self._fail(batch, Unavailable("embedder: shutting down"))
            raise
        except Exception as exc:  # noqa: BLE001 - this batch's callers get the backend's error, no one else
            self._fail(batch, exc)
            return
        row = 0
        for piece in batch.pieces:
            request, n = piece.request, piece.stop - piece.start
            if not request.future.done():  # a caller cancelled while its batch ran
                if request.rows is None:
                    request.rows = np.empty((len(request.texts), vectors.shape[1]), dtype=vectors.dtype)
                request.rows[piece.start : piece.stop] = vectors[row : row + n]
                if piece.stop == len(request.texts):  # a request's slices run in order, one batch at a time
                    request.future.set_result(request.rows)
            row += n

    @staticmethod
    def _fail(batch: _Batch, error: BaseException) -> None:
        for piece in batch.pieces:
            if not piece.request.future.done():
                piece.request.future.set_exception(error)
