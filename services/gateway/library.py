"""What a caller may see of its tenant's library, for both edges (the HTTP routes and the Gateway RPCs
say the same thing in their own shapes): documents (a page of one collection or of all, one header,
who may read it, delete), a cited chunk, the collections a picker offers with their access rules, the
fund names.

The retriever decides who reads, changes and deletes what (ragmesh.access: a document's readers, its
owner or an admin to change or delete it), from the caller's credential: a document the caller may
not read answers exactly as an unknown one. A collection's rules are an admin's. The conversation
memory is personal (its messages reach only their author, through Ask): it is never listed, read,
changed or deleted here, and its ids answer exactly as unknown ones."""
from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice

from ragmesh import convert
from ragmesh.access import Access
from ragmesh.clients import RetrieverClient
from ragmesh.errors import NotFound
from ragmesh.identity import Identity
from ragmesh.paging import Page, page
from ragmesh.types import MEMORY_COLLECTION, ChunkContext, DocumentEntry, DocumentRecord
from ragmesh.validation import MAX_PAGE, check_name, check_page, check_writable, shown
from services.gateway.request import SOURCE_COLLECTIONS


@dataclass(frozen=True)
class CollectionLine:
    """A collection as a picker offers it: its counts, and the data source that searches it."""

    name: str
    documents: int
    chunks: int
    data_source: str
    members_upload: bool  # members may upload into it
    default_access: Access  # a document's when its upload names none


@dataclass(frozen=True)
class CollectionRules:
    """Who may upload into a collection of a tenant, and who reads a document whose upload names no access."""

    collection: str
    members_upload: bool
    default_access: Access


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

    async def set_document_access(self, who: Identity, collection: str, doc_id: str, access: Access) -> DocumentRecord:
        """Replaces who may read a document (its owner or an admin; an owner in `access` re-assigns it,
        admins only); the document's header as it is now."""
        check_name("collection", collection)
        with _unknown_as_one(collection, doc_id):
            return await self.retriever().set_document_access(collection, doc_id, access)

    async def delete_document(self, who: Identity, collection: str, doc_id: str) -> tuple[int, int]:
        """(documents, chunks) removed, by its owner or an admin; another tenant's id, or one the caller
        may not read, answers exactly as an unknown one."""
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
        return [CollectionLine(c.name, c.documents, c.chunks, sources.get(c.name, ""), c.members_upload,
                               convert.access_from_proto(c.default_access))
                for c in await self.retriever().own_collections() if c.name != MEMORY_COLLECTION]

    async def set_collection_access(self, who: Identity, rules: CollectionRules) -> CollectionRules:
        """A collection's rules in the caller's tenant (admins); the conversation memory has none to change."""
        who.require_admin("changing a collection's access")
        check_writable("collection", rules.collection)
        done = await self.retriever().set_collection_access(rules.collection, rules.members_upload,
                                                            rules.default_access)
        return CollectionRules(done.collection, done.members_upload, convert.access_from_proto(done.default_access))

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
