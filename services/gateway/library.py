"""What a caller may see of its tenant's library, for both edges (the HTTP routes and the Gateway RPCs
say the same thing in their own shapes): documents (a page of one collection or of all, one header,
delete), a cited chunk, the collections a picker offers, the fund names.

Any key of the tenant reads; deleting needs an admin. The conversation memory is personal (its
messages reach only their author, through Ask): it is never listed, read or deleted here, and its ids
answer exactly as unknown ones."""
from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice

from ragmesh.clients import RetrieverClient
from ragmesh.errors import NotFound
from ragmesh.identity import Identity
from ragmesh.paging import Page, page
from ragmesh.types import MEMORY_COLLECTION, ChunkContext, DocumentEntry, DocumentRecord
from ragmesh.validation import MAX_PAGE, check_name, check_page, shown
from services.gateway.request import SOURCE_COLLECTIONS


@dataclass(frozen=True)
class CollectionLine:
    """A collection as a picker offers it: its counts, and the data source that searches it."""

    name: str
    documents: int
    chunks: int
    data_source: str


class Library:
    def __init__(self, retriever: Callable[[], RetrieverClient], funds: Callable[[str], Awaitable[list[str]]]) -> None:
        self.retriever = retriever  # the gateway's client, made once its event loop runs
        self.known_funds = funds

    async def documents(self, who: Identity, collection: str, limit: int, offset: int) -> Page[DocumentEntry]:
        """A page of one collection's documents, or of every collection's (merged, newest first)."""
        check_page(limit, offset)
        if collection:
            check_name("collection", collection)
        if collection == MEMORY_COLLECTION:  # as a collection with no documents
            found: list[DocumentEntry] = []
        elif collection:
            found = await self.retriever().list_documents(collection, limit, offset)
        else:
            found = await _every_collection(self.retriever(), limit, offset)
        return page(found, limit, offset)

    async def document(self, who: Identity, collection: str, doc_id: str) -> DocumentRecord:
        check_name("collection", collection)
        with _unknown_as_one(collection, doc_id):
            return await self.retriever().get_document(collection, doc_id)

    async def delete_document(self, who: Identity, collection: str, doc_id: str) -> tuple[int, int]:
        """(documents, chunks) removed; another tenant's id answers exactly as an unknown one."""
        who.require_admin("deleting documents")
        check_name("collection", collection)
        with _unknown_as_one(collection, doc_id):
            documents, chunks = await self.retriever().delete(collection, [doc_id])
        if not documents:
            raise _not_found(collection, doc_id)
        return documents, chunks

    async def chunk(self, who: Identity, chunk_id: str) -> ChunkContext:
        """A chunk as a citation panel shows it (its text, its parent's, its document)."""
        unknown = NotFound(f"chunk {shown(chunk_id)} not found")
        try:
            found = await self.retriever().get_chunk(chunk_id)
        except NotFound:
            raise unknown from None
        if found.chunk.collection == MEMORY_COLLECTION:
            raise unknown
        return found

    async def collections(self, who: Identity) -> list[CollectionLine]:
        sources = {collection: source for source, collection in SOURCE_COLLECTIONS.items()}
        return [CollectionLine(c.name, c.documents, c.chunks, sources.get(c.name, ""))
                for c in await self.retriever().own_collections() if c.name != MEMORY_COLLECTION]

    async def funds(self, who: Identity) -> list[str]:
        return await self.known_funds(who.tenant)


def _not_found(collection: str, doc_id: str) -> NotFound:
    return NotFound(f"document {shown(doc_id)} not found in collection {shown(collection)}")


@contextmanager
def _unknown_as_one(collection: str, doc_id: str) -> Iterator[None]:
    """One NotFound for every id that is not served: unknown, another tenant's, or the memory's."""
    if collection == MEMORY_COLLECTION:
        raise _not_found(collection, doc_id)
    try:
        yield
    except NotFound:
        raise _not_found(collection, doc_id) from None


async def _every_collection(client: RetrieverClient, limit: int, offset: int) -> list[DocumentEntry]:
    """A page of the documents of every collection of the caller's tenant but the conversation memory,
    newest first: the first offset+limit of each collection (in the store's order), merged. The
    memory (a document per message, growing with every question) is not read."""
    names = sorted(c.name for c in await client.own_collections() if c.name != MEMORY_COLLECTION)
    firsts = await asyncio.gather(*(_first(client, name, offset + limit) for name in names))
    merged = heapq.merge(*firsts, key=lambda e: e.updated_at, reverse=True)  # ties: each list's order
    return list(islice(merged, offset, offset + limit))


async def _first(client: RetrieverClient, collection: str, count: int) -> list[DocumentEntry]:
    """The newest `count` documents of a collection, a page at a time."""
    found: list[DocumentEntry] = []
    while len(found) < count:
        wanted = min(MAX_PAGE, count - len(found))
        batch = await client.list_documents(collection, wanted, len(found))
        found += batch
        if len(batch) < wanted:
            break
    return found
