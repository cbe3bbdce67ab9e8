"""The system of record: documents, chunks with vectors, conversations, messages.

A small interface so the SQLite default and a pymongo backend fit behind it
naturally: whole-document replacement instead of row updates, plain dicts for
metadata, and no query language leaking out.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ragmesh.config import Settings
from ragmesh.errors import Unavailable
from ragmesh.identity.keys import ApiKeyRecord
from ragmesh.types import DocumentEntry, DocumentRecord, StoredChunk

T = TypeVar("T")


class StoreUnavailable(Unavailable):
    """The configured store cannot be reached or its URI is invalid: report NOT_SERVING, don't crash-loop.

    The message names the store's host, never its credentials."""


@dataclass
class CollectionStats:
    name: str
    documents: int
    chunks: int


@dataclass
class MessageRecord:
    message_id: str
    conversation_id: str
    role: str  # "user" | "assistant"
    content: str
    meta: dict = field(default_factory=dict)
    created_at: str = ""


@dataclass
class ConversationInfo:
    conversation_id: str
    tenant: str
    user_id: str
    created_at: str
    updated_at: str
    title: str = ""  # the first question, shortened


@dataclass
class Change:
    """One document written (replaced or deleted) at a store version: the change log other
    retriever replicas replay to keep their indexes in step."""

    version: int
    collection: str
    tenant: str
    doc_id: str


@dataclass
class CorrectionRecord:
    """A user's statement that an answer was wrong, and what is right (004 active learning)."""

    correction_id: str
    tenant: str
    user_id: str
    question: str
    wrong_answer: str
    correction: str
    conversation_id: str = ""
    created_at: str = ""


class Store(Protocol):
    # Corpus
    def get_document(self, tenant: str, collection: str, doc_id: str) -> DocumentRecord | None: ...

    def replace_document(self, doc: DocumentRecord, chunks: list[StoredChunk]) -> int:
        """Atomically swaps the document's chunks for these; returns the store's new version."""

    def replace_documents(self, items: list[tuple[DocumentRecord, list[StoredChunk]]]) -> int:
        """replace_document for many documents in one atomic write (bulk loads)."""

    def delete_documents(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        """Deletes documents and their chunks; returns (documents, chunks) removed."""

    def iter_chunks(self, collection: str | None = None) -> Iterator[StoredChunk]: ...

    def collections(self, tenant: str | None = None) -> list[CollectionStats]:
        """Counts per collection: every tenant's, or one tenant's with tenant."""

    def documents(self, tenant: str, collection: str | None, limit: int = 50, offset: int = 0, *,
                  author: str | None = None) -> list[DocumentEntry]:
        """The tenant's documents (of one collection, or all), most recently written first, then by
        collection and id; `offset` skips that many (paging). With `author`, conversation memory
        (MEMORY_COLLECTION) is personal: only the documents whose MEMORY_AUTHOR is `author` are
        listed of it ("" lists none of it)."""

    def chunk(self, tenant: str, chunk_id: str) -> StoredChunk | None:
        """One current chunk of the tenant by id (None when unknown or another tenant's). Chunk ids
        are keys within a tenant: the same id in two tenants is two chunks."""

    def document_chunks(self, tenant: str, collection: str, doc_id: str) -> list[StoredChunk]:
        """A document's current chunks in order (empty when it does not exist)."""

    def changes_since(self, version: int) -> list[Change]:
        """Documents written after `version`, oldest first."""

    def watch_changes(self, on_change: Callable[[], None], stop: threading.Event) -> bool:
        """Calls on_change whenever another writer logs a change, until stop is set; returns False
        at once when the server cannot push changes (then callers poll version())."""

    def collection_options(self) -> dict[str, dict]:
        """Every configured collection's index options (see the retriever's CollectionOptions)."""

    def set_collection_options(self, name: str, options: dict) -> None: ...

    def version(self) -> int:
        """A counter that every corpus write increases; indexes compare it to know they are current."""

    # Conversations
    def ensure_conversation(self, tenant: str, user_id: str, conversation_id: str) -> None: ...

    def conversation_exists(self, tenant: str, conversation_id: str) -> bool: ...

    def conversation_owner(self, conversation_id: str) -> tuple[str, str] | None:
        """(tenant, user_id) of a conversation, or None when there is no such conversation."""

    def conversations(self, tenant: str, user_id: str | None, limit: int = 50,
                      offset: int = 0) -> list[ConversationInfo]:
        """The tenant's conversations (one user's when user_id is given), most recently updated first;
        `offset` skips that many. The title is the one set by rename, else the first question."""

    def rename_conversation(self, tenant: str, conversation_id: str, title: str) -> bool:
        """Sets the conversation's title ("" goes back to the first question); False when not found."""

    def add_message(self, conversation_id: str, role: str, content: str, meta: dict) -> str: ...

    def update_message(self, message_id: str, content: str, meta: dict) -> None: ...

    def delete_message(self, message_id: str) -> None:
        """Removes one message (a question stopped before any answer, 000's stop flow)."""

    def messages(self, conversation_id: str, limit: int | None = None, *, with_meta: bool = True) -> list[MessageRecord]:
        """The conversation's messages, oldest first; with limit, the newest `limit` of them. Without
        meta (left {}): the history read before every answer needs roles and texts only, and the
        answers' metadata (citations, chunk map, strategy) is most of a conversation's bytes."""

    def answer_count(self, conversation_id: str) -> int:
        """The conversation's assistant messages: its turns, counted without reading them."""

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Deletes the conversation with its messages, summary and corrections."""

    def conversation_summary(self, conversation_id: str) -> str:
        """The running summary of a long conversation ("" when none yet)."""

    def set_conversation_summary(self, conversation_id: str, summary: str) -> None: ...

    # Corrections and usage (per tenant and user)
    def add_correction(self, record: CorrectionRecord) -> str: ...

    def corrections(self, tenant: str, user_id: str, limit: int = 200) -> list[CorrectionRecord]:
        """The user's corrections, newest first."""

    def add_usage(self, tenant: str, user_id: str, month: str, messages: int, tokens: int) -> tuple[int, int]:
        """Adds to the month's counters (month = YYYY-MM); returns the new (messages, tokens)."""

    def usage(self, tenant: str, user_id: str, month: str) -> tuple[int, int]: ...

    # API keys (only their hashes; see ragmesh.identity.keys)
    def add_api_key(self, record: ApiKeyRecord) -> None: ...

    def api_key(self, key_id: str) -> ApiKeyRecord | None: ...

    def api_keys(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """Every key (one tenant's with tenant), oldest first."""

    def revoke_api_key(self, key_id: str) -> bool:
        """Marks the key revoked; False when there is no such key or it was revoked already."""

    def inline_read(self) -> AbstractContextManager[bool]:
        """True (with the store held for it) when a short read may run on the calling thread without
        waiting: an embedded store whose lock is free. A networked store says False: see quick_read."""

    def close(self) -> None: ...


async def quick_read(store: "Store", read: Callable[..., T], *args: Any) -> T:
    """A short keyed read (one row by its key) from async code. On the event loop when the store can
    answer without waiting: SQLite with its lock free answers in ~10 us, where a trip through a worker
    thread costs 0.1-1 ms, and the question path has several. In a worker thread otherwise (MongoDB,
    SQLite busy with a write), so the loop never waits on the network or another thread's write."""
    with store.inline_read() as now:
        if now:
            return read(*args)
    return await asyncio.to_thread(read, *args)


def open_store(settings: Settings) -> Store:
    """The store the settings name: MongoDB when MONGODB_URI is set, else SQLite under DATA_DIR.

    Raises StoreUnavailable when MongoDB is configured but unreachable."""
    if settings.mongodb_uri:
        from ragmesh.store.mongo import MongoStore

        modes = {"auto": None, "on": True, "off": False}
        if settings.mongodb_transactions not in modes:
            raise ValueError(
                f"MONGODB_TRANSACTIONS must be auto, on or off, got {settings.mongodb_transactions!r}"
            )
        return MongoStore(
            settings.mongodb_uri,
            settings.mongodb_db,
            server_selection_timeout_ms=settings.mongodb_timeout_ms,
            connect_timeout_ms=settings.mongodb_connect_timeout_ms,
            socket_timeout_ms=settings.mongodb_socket_timeout_ms,
            transactions=modes[settings.mongodb_transactions],
        )
    from ragmesh.store.sqlite import SqliteStore

    return SqliteStore(settings.sqlite_path)
