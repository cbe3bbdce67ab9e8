"""Parsing in worker processes that can be killed: a parser that runs too long or takes too much
memory on a hostile file (a decompression bomb, a pathological PDF) is stopped by ending its
process, which a thread cannot be, and one tenant's files never wait behind another's.

A few long-lived workers, each a process forked from a forkserver (never from the retriever,
whose FAISS and torch threads a fork would copy mid-lock) with its address space capped
(RLIMIT_AS), a CPU-time cap per document as a backstop, and a lower CPU priority than the serving
processes (PARSE_NICENESS), so parsing takes the cores they leave. A document goes to an idle worker;
its parse is given `timeout_s` of wall-clock time from there. A worker that times out, runs out
of memory, crashes or whose caller went away is killed and replaced by a fresh one on next use.
Each tenant has at most `per_tenant` parses at once; free workers go to the longest-waiting
document of a tenant under that limit. A file waits for its turn on disk (`waiting`: the pool's
spool under DATA_DIR), not in memory: a tenant's waiting files cost the retriever no memory, its
parses at most `per_tenant` files."""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import multiprocessing
import os
import resource
import signal
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection

from ragmesh import logging as rlog
from ragmesh import metrics
from ragmesh.config import Settings
from ragmesh.errors import InvalidArgument
from ragmesh.request_context import request_id_var
from ragmesh.spool import SPOOL_DIR, Spool
from ragmesh.types import Document
from services.retriever.ingest.parsed import BadRecord, Parsed, UnreadableFile
from services.retriever.ingest.parsers import check_size, is_light, parse
from services.retriever.ingest.parsers.archive import ArchiveLimits

log = logging.getLogger(__name__)

# Imported once in the forkserver, so every worker starts with the parsers loaded (shared pages).
_PRELOAD = ["services.retriever.ingest.workers", "services.retriever.ingest.parsers.office",
            "services.retriever.ingest.parsers.pdf"]
MIN_MEMORY_MB = 256
# How much lower a worker runs than the retriever (nice): a parse takes the CPU the serving processes
# leave, so a tenant's large or hostile files cost another tenant's calls little of the cores they share.
PARSE_NICENESS = 10
# A piece of a file sent in pieces (retriever.proto's Document.more_content): what one message holds.
MAX_PIECE_BYTES = 4 * 1024 * 1024
_DONE: Future[None] = Future()
_DONE.set_result(None)


@dataclass(frozen=True)
class ParseLimits:
    timeout_s: float = 60.0  # INGEST_PARSE_TIMEOUT_S: wall-clock time of one document's parse
    memory_mb: int = 1024  # INGEST_PARSE_MEMORY_MB: a worker's address space (0 = no limit)
    workers: int = 3  # INGEST_PARSE_WORKERS: worker processes
    per_tenant: int = 1  # INGEST_PARSES_PER_TENANT: one tenant's parses at once
    inline_bytes: int = 64 * 1024  # INGEST_INLINE_PARSE_BYTES: smaller text, Markdown, HTML, JSON parsed in place
    archive: ArchiveLimits = field(default_factory=ArchiveLimits)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"INGEST_PARSE_TIMEOUT_S must be more than 0, got {self.timeout_s:g}")
        if 0 < self.memory_mb < MIN_MEMORY_MB:
            raise ValueError(f"INGEST_PARSE_MEMORY_MB must be 0 (no limit) or at least {MIN_MEMORY_MB} (a worker with "
                             f"its parsers loaded takes about 200 MB of address space), got {self.memory_mb}")
        if not 1 <= self.per_tenant < self.workers:
            raise ValueError(f"INGEST_PARSE_WORKERS ({self.workers}) must be more than INGEST_PARSES_PER_TENANT "
                             f"({self.per_tenant}, at least 1), so one tenant cannot take every parse worker")


Parse = Callable[[Document, int, ArchiveLimits], list[Parsed | BadRecord]]


@dataclass(frozen=True)
class _Job:
    parse: Parse  # sent by reference (module and name): parsers.parse, or a test's own
    doc: Document
    max_bytes: int
    archive: ArchiveLimits
    cpu_s: float
    request_id: str  # the parsers' log lines carry the request's id, as in the retriever


def _serve(conn: Connection, memory_mb: int, log_level: int) -> None:
    """A worker's life: parse what arrives until the pipe closes. Refusals travel back as
    (field, reason); running out of memory ends the worker (its heap is not trusted after)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the retriever's to handle
    os.nice(PARSE_NICENESS)
    rlog.setup("retriever", logging.getLevelName(log_level))  # pypdf's warnings as JSON lines, like the rest
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            job: _Job = conn.recv()
        except EOFError:
            return
        _cpu_budget(job.cpu_s)
        request_id_var.set(job.request_id)
        conn.send(_run(job))


def _run(job: _Job) -> tuple:
    """A parse's outcome as plain data that pickles: ("parsed", documents), ("refused", field,
    reason), ("memory",) or ("crashed", what)."""
    try:
        return "parsed", job.parse(job.doc, job.max_bytes, job.archive)
    except Exception as exc:
        if isinstance(exc, MemoryError) or _near_memory_limit():
            return ("memory",)
        if isinstance(exc, InvalidArgument):
            return "refused", exc.field, str(exc).removeprefix(f"{exc.field}: ")
        return "crashed", f"{type(exc).__name__}: {exc}"  # a parser bug (deeply nested JSON, say)


def _near_memory_limit() -> bool:
    """Whether this process's address space ever came within a fifth of RLIMIT_AS: parsers turn a
    failed allocation into errors of their own (lxml's "XMLSyntaxError: unknown error", a
    MemoryError wrapped as a damaged file), so a failure this close to the cap is counted as it."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return False
    try:
        with open("/proc/self/status") as status:
            peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmPeak:"))
    except (OSError, StopIteration, ValueError):
        return False
    return peak_kb * 1024 >= 0.8 * limit


def _cpu_budget(seconds: float) -> None:
    """SIGXCPU (the end of the process) after `seconds` more of CPU time: bounds a parse even if
    the retriever that should kill it is gone."""
    used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = math.ceil(used + seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


class _Worker:
    def __init__(self, context: multiprocessing.context.BaseContext, memory_mb: int) -> None:
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, memory_mb, logging.getLogger().getEffectiveLevel()),
                                       daemon=True, name="ragmesh-parse")
        self.process.start()
        theirs.close()

    def call(self, job: _Job) -> tuple:
        """Blocking: the job out, its reply back; EOFError when the process died (or was killed)."""
        self.conn.send(job)
        return self.conn.recv()

    def kill(self) -> None:
        """The pipe is left to close when the last reference goes: a thread may still be reading it,
        and a closed descriptor's number can be reused by the next worker's pipe."""
        self.process.kill()
        self.process.join(5)


class _Waiter:
    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()
        self.granted = False


class ParsePool:
    """Parses documents in worker processes, within ParseLimits; started on first use. Usable from
    any event loop (the state is behind a lock and waiters are woken on their own loop)."""

    def __init__(self, limits: ParseLimits = ParseLimits(), parser: Parse = parse, spool: Spool | None = None) -> None:
        """`spool`: where files wait for their turn (None: in memory, as tests' pools keep them)."""
        self.limits = limits
        self.parser = parser
        self.spool = spool
        self.killed = 0  # workers ended for a limit, a crash or a caller gone (tests and benchmarks read it)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._free = limits.workers  # slots not running a parse
        self._running: dict[str, int] = {}  # tenant -> parses under way
        self._waiting: list[_Waiter] = []
        # Blocking pipe I/O, one thread per slot plus one per worker being replaced, off the loop's default pool.
        self._io = ThreadPoolExecutor(max_workers=2 * limits.workers, thread_name_prefix="ingest-parse")
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_PRELOAD)

    @classmethod
    def from_settings(cls, settings: Settings) -> ParsePool:
        return cls(ParseLimits(
            timeout_s=settings.ingest_parse_timeout_s, memory_mb=settings.ingest_parse_memory_mb,
            workers=settings.ingest_parse_workers, per_tenant=settings.ingest_parses_per_tenant,
            inline_bytes=settings.ingest_inline_parse_bytes,
            archive=ArchiveLimits(settings.ingest_zip_max_bytes, settings.ingest_zip_max_ratio,
                                  settings.ingest_zip_max_members),
        ), spool=Spool(settings.data_dir / SPOOL_DIR / "retriever"))

    def parsing(self) -> dict[str, int]:
        """Parses under way in the workers, per tenant."""
        with self._lock:
            return dict(self._running)

    def pids(self) -> list[int]:
        """The worker processes alive now."""
        with self._lock:
            workers = [*self._idle, *self._busy]
        return [w.process.pid for w in workers if w.process.pid is not None and w.process.is_alive()]

    async def waiting(self, doc: Document) -> None:
        """Readies `doc` to wait for its parse: a file parsed in a worker has its content spooled (read
        back once its turn comes), in place, so whoever holds the document holds no copy either."""
        if self.spool is None or not doc.content or is_light(doc, self.limits.inline_bytes):
            return
        doc.spooled = await asyncio.to_thread(self.spool.put, doc.content)
        doc.content = b""

    async def received(self, doc: Document, pieces: AsyncIterator[bytes], max_bytes: int) -> None:
        """`doc`'s content (its first piece) completed, in place, by the `pieces` that follow it: a file
        sent in pieces is written to the spool piece by piece as it arrives, so no step holds it whole
        before its parse turn (a pool without a spool, as tests make, joins them in memory).
        InvalidArgument naming `content` for a piece over MAX_PIECE_BYTES or pieces over `max_bytes`
        together (INGEST_MAX_BYTES); when this raises (that, or the sender went away) nothing of the
        file is left on disk."""
        first, doc.content = doc.content, b""
        spooled = await asyncio.to_thread(self.spool.put) if self.spool is not None else None
        held: list[bytes] = []
        size = 0
        try:
            async for piece in _following(first, pieces):
                size += len(piece)
                if len(piece) > MAX_PIECE_BYTES:
                    raise InvalidArgument("content", f"a piece of {doc.filename or doc.doc_id or 'a file'} is "
                                                     f"{len(piece):,} bytes; the limit is {MAX_PIECE_BYTES:,} a piece")
                if size > max_bytes:
                    raise InvalidArgument("content", f"the pieces of {doc.filename or doc.doc_id or 'a file'} pass "
                                                     f"{max_bytes:,} bytes, the limit of a file (INGEST_MAX_BYTES)")
                if spooled is not None:
                    await asyncio.to_thread(spooled.append, piece)
                else:
                    held.append(piece)
        except BaseException:
            if spooled is not None:
                spooled.close()
            raise
        doc.content, doc.spooled = (b"", spooled) if spooled is not None else (b"".join(held), None)

    async def parse(self, doc: Document, max_bytes: int) -> list[Parsed | BadRecord]:
        """The parsed documents of `doc` (see parsers.parse); UnreadableFile naming the limit when a
        worker had to be killed for it. Small files of linear-time formats are parsed in place."""
        name = doc.filename or doc.doc_id
        if doc.spooled is None:
            check_size(doc, max_bytes)  # before the bytes are copied to a worker
            if is_light(doc, self.limits.inline_bytes):
                return self._outcome(_run(self._job(doc, max_bytes)), name)
        await self._turn(doc.tenant)
        loop = asyncio.get_running_loop()
        worker: _Worker | None = None
        try:
            if doc.spooled is not None:
                doc = replace(doc, content=await asyncio.to_thread(doc.spooled.take), spooled=None)
                check_size(doc, max_bytes)
            job = self._job(doc, max_bytes)
            worker = self._idle_worker()
            while worker is None:  # a worker started here lands among the idle ones, even if this call is cancelled
                await loop.run_in_executor(self._io, self._start_worker)
                worker = self._idle_worker()
            reply = await asyncio.wait_for(loop.run_in_executor(self._io, worker.call, job), self.limits.timeout_s)
        except asyncio.TimeoutError:
            reason = "timeout"
        except (EOFError, OSError):  # the pipe closed: the worker died
            reason = "crash"
        except UnreadableFile:  # read back over the size limit: the worker is not used
            self._release(doc.tenant, worker)
            raise
        except BaseException:  # the caller went away: its parse is not wanted
            ending = self._end(worker, "cancelled", name)
            self._release(doc.tenant, None)
            await asyncio.shield(asyncio.wrap_future(ending))
            raise
        else:
            if reply[0] != "memory":
                self._release(doc.tenant, worker)
                return self._outcome(reply, name)
            reason = "memory"
        ending = self._end(worker, reason, name)
        self._release(doc.tenant, None)
        await asyncio.wrap_future(ending)  # gone, not still parsing, once its document is reported failed
        raise UnreadableFile(name, self._stopped(reason, worker.process.exitcode if worker else None))

    def _job(self, doc: Document, max_bytes: int) -> _Job:
        return _Job(self.parser, doc, max_bytes, self.limits.archive, self.limits.timeout_s, request_id_var.get())

    def _stopped(self, reason: str, exitcode: int | None = None) -> str:
        """Why a worker was stopped, naming the limit."""
        why = {"timeout": f"took longer than {self.limits.timeout_s:g} s to parse (INGEST_PARSE_TIMEOUT_S)",
               "memory": f"needed more than {self.limits.memory_mb:,} MB to parse (INGEST_PARSE_MEMORY_MB)",
               "crash": f"stopped its parse worker (exit code {exitcode})"}[reason]
        return f"{why}, so it was not ingested"

    def _outcome(self, reply: tuple, name: str) -> list[Parsed | BadRecord]:
        if reply[0] == "parsed":
            return reply[1]
        if reply[0] == "refused":
            raise UnreadableFile(reply[1], reply[2])
        if reply[0] == "memory":  # parsed in place: the retriever's own memory ran out
            raise UnreadableFile(name, "could not be parsed (out of memory)")
        raise UnreadableFile(name, f"could not be parsed (internal error: {reply[1]})")

    async def _turn(self, tenant: str) -> None:
        """Waits until a slot is free and the tenant is under its limit."""
        waiter = _Waiter(tenant)
        with self._lock:
            self._waiting.append(waiter)
            self._grant()
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiting.remove(waiter)
            if granted:
                self._release(tenant, None)
            raise

    def _grant(self) -> None:
        """Under the lock: free slots to the longest-waiting documents of tenants under their limit."""
        for waiter in list(self._waiting):
            if not self._free:
                return
            if self._running.get(waiter.tenant, 0) >= self.limits.per_tenant:
                continue
            self._waiting.remove(waiter)
            self._free -= 1
            self._running[waiter.tenant] = self._running.get(waiter.tenant, 0) + 1
            waiter.granted = True
            waiter.loop.call_soon_threadsafe(_wake, waiter.future)

    def _idle_worker(self) -> _Worker | None:
        """A live idle worker, taken, if there is one."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is not None:
                self._busy.add(worker)
        if worker is not None and not worker.process.is_alive():  # died while idle (killed from outside)
            self._end(worker, "crash", "")
            return None
        return worker

    def _start_worker(self) -> None:
        """Blocking: a start talks to the forkserver (and starts it, the first time)."""
        worker = _Worker(self._context, self.limits.memory_mb)
        with self._lock:
            self._idle.append(worker)

    def _release(self, tenant: str, worker: _Worker | None) -> None:
        with self._lock:
            if worker is not None:
                self._busy.discard(worker)
                self._idle.append(worker)
            self._free += 1
            self._running[tenant] -= 1
            if not self._running[tenant]:
                del self._running[tenant]
            self._grant()

    def _end(self, worker: _Worker | None, reason: str, name: str) -> Future[None]:
        """Kills a worker and counts it; the future is done once the process is gone."""
        if worker is None:
            return _DONE
        with self._lock:
            self._busy.discard(worker)
        worker.process.kill()  # at once; reaping it takes a moment, off the loop
        self.killed += 1
        metrics.parse_worker_killed(reason)
        log.warning("parse worker killed", extra={"reason": reason, "pid": worker.process.pid, "file": name[:200]})
        return self._io.submit(worker.kill)

    def close(self) -> None:
        """Ends every worker (the retriever is stopping)."""
        with self._lock:
            workers, self._idle = [*self._idle, *self._busy], []
            self._busy.clear()
        for worker in workers:
            worker.kill()
        self._io.shutdown(wait=False, cancel_futures=True)


async def _following(first: bytes, pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for piece in pieces:
        yield piece


@functools.cache
def shared_pool() -> ParsePool:
    """The pool of Ingestors given none (tests, benchmarks): default limits, started on first use."""
    return ParsePool()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
