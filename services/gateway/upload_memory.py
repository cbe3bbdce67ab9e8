"""The bytes of one tenant's uploads the gateway holds in memory at once (UPLOAD_MEMORY_PER_TENANT_MB).

An upload's files wait on disk (the HTTP bridge's multipart spool, or ragmesh.spool for gRPC
uploads) and are read into memory piece by piece (PIECE_BYTES) only while each piece is sent to the
retriever, which spools the pieces in turn; a piece waits here until the tenant's others in memory
are sent. So however many uploads a tenant runs at once, this process holds at most its share of
their bytes, and one tenant's waiting never holds up another's.

Receiving is bounded too. The HTTP bridge writes a body to disk as it arrives; gRPC receives each
message whole in memory before the servicer sees it, and its size is known only then. So before a
gRPC upload's stream reads its next file it takes the largest a file may be (the method's message
limit) from the tenant's share of receiving, and gives it back once the file is on disk; with no
room the call is refused at once (RESOURCE_EXHAUSTED naming the share), not queued: a queued read
would hold the client's bytes in flight all the same. Receiving and sending have a share each (of
the same size), so a stream waiting for its client's next file never holds up the sending of its last."""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ragmesh.errors import ResourceExhausted
from ragmesh.spool import Spool
from ragmesh.v1 import retriever_pb2

MB = 1024 * 1024
PIECE_BYTES = MB  # a file goes to the retriever in pieces of this much (it takes up to 4 MiB a piece)


class TenantBytes:
    """A share of bytes per tenant; waiters are served in order. Used from one event loop."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"UPLOAD_MEMORY_PER_TENANT_MB must be at least 1, got {limit / 2**20:g}")
        self.limit = limit
        self._held: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[int, asyncio.Future[None]]]] = {}

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)

    async def take(self, tenant: str, size: int) -> int:
        """Waits until the tenant has room for `size` bytes (a file over the whole share: until it is
        alone) and takes it; returns what was taken, to `give` back."""
        size = min(size, self.limit)
        queue = self._waiting.setdefault(tenant, deque())
        if not queue and self.held(tenant) + size <= self.limit:
            self._held[tenant] = self.held(tenant) + size
            return size
        waiter = (size, asyncio.get_running_loop().create_future())
        queue.append(waiter)
        try:
            await waiter[1]
        except BaseException:
            if waiter[1].done() and not waiter[1].cancelled():  # granted as it was cancelled
                self.give(tenant, size)
            else:
                if waiter in queue:
                    queue.remove(waiter)
                self._grant(tenant)
            raise
        return size

    def take_now(self, tenant: str, size: int) -> int:
        """Takes `size` bytes (over the whole share: the whole share) if the tenant has room now and
        nothing of it waits; else raises ResourceExhausted naming the share. Returns what was taken."""
        size = min(size, self.limit)
        if self._waiting.get(tenant) or self.held(tenant) + size > self.limit:
            raise ResourceExhausted(f"uploads: your tenant's files being received hold {self.held(tenant) / MB:.0f} "
                                    f"MB of the gateway's memory, and the next may be {size / MB:.0f} MB: past its "
                                    f"share of {self.limit / MB:g} MB (UPLOAD_MEMORY_PER_TENANT_MB); retry in 1 s", 1.0)
        self._held[tenant] = self.held(tenant) + size
        return size

    def give(self, tenant: str, size: int) -> None:
        self._held[tenant] = self.held(tenant) - size
        if not self._held[tenant]:
            del self._held[tenant]
        self._grant(tenant)

    def _grant(self, tenant: str) -> None:
        queue = self._waiting.get(tenant)
        while queue and self.held(tenant) + queue[0][0] <= self.limit:
            size, future = queue.popleft()
            if future.done():  # its waiter was cancelled: not granted
                continue
            self._held[tenant] = self.held(tenant) + size
            future.set_result(None)
        if queue is not None and not queue:
            del self._waiting[tenant]


@dataclass(frozen=True)
class Uploads:
    """Where the gateway keeps uploads waiting to be sent, each tenant's share of memory for sending
    them and for receiving them over gRPC, and the largest file one gRPC message may carry."""

    spool: Spool
    memory: TenantBytes
    receiving: TenantBytes
    message_bytes: int

    @classmethod
    def of(cls, spool: Spool, share_bytes: int, message_bytes: int) -> Uploads:
        return cls(spool, TenantBytes(share_bytes), TenantBytes(share_bytes), message_bytes)


@dataclass
class FilePiece:
    """Bytes [start, stop) of a file waiting on disk, sent to the retriever as one message of its
    document (a Deferred message: ragmesh.retry): read only while it is sent, within the tenant's share
    of memory, and read again if the call is sent again. The first piece carries the document's fields
    (`head` makes them), and every piece but the last says more follows. A file goes in pieces so that
    no process holds it whole in one message: receiving a 40 MB message held the retriever's event loop,
    and every tenant's calls on it, for a quarter of a second."""

    head: Callable[[], retriever_pb2.Document] | None
    read: Callable[[int, int], Awaitable[bytes]]
    start: int
    stop: int
    more: bool
    memory: TenantBytes
    tenant: str
    held: int = 0

    async def message(self) -> retriever_pb2.Document:
        self.held = await self.memory.take(self.tenant, self.stop - self.start)
        doc = self.head() if self.head is not None else retriever_pb2.Document()
        doc.content = await self.read(self.start, self.stop)
        doc.more_content = self.more
        return doc

    def sent(self) -> None:
        held, self.held = self.held, 0
        if held:
            self.memory.give(self.tenant, held)


def file_pieces(head: Callable[[], retriever_pb2.Document], size: int, read: Callable[[int, int], Awaitable[bytes]],
                memory: TenantBytes, tenant: str, piece_bytes: int = PIECE_BYTES) -> list[FilePiece]:
    """A file of `size` bytes as the pieces it is sent in (one, if it is small or empty)."""
    starts = range(0, max(size, 1), piece_bytes)
    return [FilePiece(head if start == 0 else None, read, start, min(size, start + piece_bytes),
                      start + piece_bytes < size, memory, tenant) for start in starts]


async def spooled_pieces(doc: retriever_pb2.Document, spool: Spool, memory: TenantBytes, tenant: str
                         ) -> list[FilePiece]:
    """A gRPC upload's document with its file written to `spool` (the caller drops `doc`), as the pieces
    it is sent in: the gateway holds no copy of it to send again."""
    spooled = await asyncio.to_thread(spool.put, doc.content)
    doc.ClearField("content")

    def head() -> retriever_pb2.Document:
        copy = retriever_pb2.Document()
        copy.CopyFrom(doc)
        return copy

    async def read(start: int, stop: int) -> bytes:
        return await asyncio.to_thread(spooled.read, start, stop)

    return file_pieces(head, spooled.size, read, memory, tenant)
