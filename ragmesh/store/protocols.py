"""The store's interfaces, one per kind of record, so each caller names (and a type checker checks)
only the part it uses: the retriever writes documents and follows the change log, the gateway keeps
conversations, identity and limits read keys and usage. `Store` is all of them: what each backend
(ragmesh.store.sqlite, ragmesh.store.mongo) implements, whole-document replacement instead of row
updates, plain dicts for metadata, and no query language leaking out."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

from ragmesh.store.records import (ApiKeyRecord, Change, CollectionStats, ConversationInfo, CorrectionRecord,
                                   MessageRecord)
from ragmesh.types import DocumentEntry, DocumentRecord, StoredChunk


class DocumentStore(Protocol):
    """The corpus: documents with their chunks and vectors, and each collection's index options."""

    def get_document(self, tenant: str, collection: str, doc_id: str) -> DocumentRecord | None: ...

    def replace_document(self, doc: DocumentRecord, chunks: list[StoredChunk]) -> int:
        """Atomically swaps the document's chunks for these; returns the store's new version."""
        ...

    def replace_documents(self, items: list[tuple[DocumentRecord, list[StoredChunk]]]) -> int:
        """replace_document for many documents in one atomic write (bulk loads)."""
        ...

    def delete_documents(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        """Deletes documents and their chunks; returns (documents, chunks) removed."""
        ...

    def iter_chunks(self, collection: str | None = None) -> Iterator[StoredChunk]: ...

    def collections(self, tenant: str | None = None, readers: frozenset[str] | None = None) -> list[CollectionStats]:
        """Counts per collection: every tenant's, or one tenant's with tenant; with `readers`, of the
        documents they may read only."""
        ...

    def documents(self, tenant: str, collection: str | None, limit: int = 50, offset: int = 0, *,
                  author: str | None = None, readers: frozenset[str] | None = None) -> list[DocumentEntry]:
        """The tenant's documents (of one collection, or all), most recently written first, then by
        collection and id; `offset` skips that many (paging). With `author`, conversation memory
        (MEMORY_COLLECTION) is personal: only the documents whose MEMORY_AUTHOR is `author` are
        listed of it ("" lists none of it). With `readers` (ragmesh.access.principals), only the
        documents whose access names one of them."""
        ...

    def chunk(self, tenant: str, chunk_id: str) -> StoredChunk | None:
        """One current chunk of the tenant by id (None when unknown or another tenant's). Chunk ids
        are keys within a tenant: the same id in two tenants is two chunks."""
        ...

    def document_chunks(self, tenant: str, collection: str, doc_id: str) -> list[StoredChunk]:
        """A document's current chunks in order (empty when it does not exist)."""
        ...

    def collection_options(self) -> dict[str, dict]:
        """Every configured collection's index options (see the retriever's CollectionOptions)."""
        ...

    def set_collection_options(self, name: str, options: dict) -> None: ...

    def collection_access(self, tenant: str) -> dict[str, dict]:
        """The tenant's access rules per collection its admins set (services.retriever.permissions)."""
        ...

    def set_collection_access(self, tenant: str, collection: str, rule: dict) -> None: ...


class ChangeLog(Protocol):
    """Every corpus write, numbered: how indexes know they are current, and how other retriever
    replicas replay what one of them wrote."""

    def version(self) -> int:
        """A counter that every corpus write increases; indexes compare it to know they are current."""
        ...

    def changes_since(self, version: int) -> list[Change]:
        """Documents written after `version`, oldest first."""
        ...

    def watch_changes(self, on_change: Callable[[], None], stop: threading.Event) -> bool:
        """Calls on_change whenever another writer logs a change, until stop is set; returns False
        at once when the server cannot push changes (then callers poll version())."""
        ...


class CorpusStore(DocumentStore, ChangeLog, Protocol):
    """Documents and their change log: what the retriever's writers and followers need."""


class ConversationStore(Protocol):
    """Conversations, their messages and running summary, and users' corrections."""

    def ensure_conversation(self, tenant: str, user_id: str, conversation_id: str) -> None: ...

    def conversation_exists(self, tenant: str, conversation_id: str) -> bool: ...

    def conversation_owner(self, conversation_id: str) -> tuple[str, str] | None:
        """(tenant, user_id) of a conversation, or None when there is no such conversation."""
        ...

    def conversations(self, tenant: str, user_id: str | None, limit: int = 50,
                      offset: int = 0) -> list[ConversationInfo]:
        """The tenant's conversations (one user's when user_id is given), most recently updated first;
        `offset` skips that many. The title is the one set by rename, else the first question."""
        ...

    def rename_conversation(self, tenant: str, conversation_id: str, title: str) -> bool:
        """Sets the conversation's title ("" goes back to the first question); False when not found."""
        ...

    def add_message(self, conversation_id: str, role: str, content: str, meta: dict) -> str: ...

    def update_message(self, message_id: str, content: str, meta: dict) -> None: ...

    def delete_message(self, message_id: str) -> None:
        """Removes one message (a question stopped before any answer was written)."""
        ...

    def messages(self, conversation_id: str, limit: int | None = None, *,
                 with_meta: bool = True) -> list[MessageRecord]:
        """The conversation's messages, oldest first; with limit, the newest `limit` of them. Without
        meta (left {}): the history read before every answer needs roles and texts only, and the
        answers' metadata (citations, chunk map, strategy) is most of a conversation's bytes."""
        ...

    def answer_count(self, conversation_id: str) -> int:
        """The conversation's assistant messages: its turns, counted without reading them."""
        ...

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Deletes the conversation with its messages, summary and corrections."""
        ...

    def conversation_summary(self, conversation_id: str) -> str:
        """The running summary of a long conversation ("" when none yet)."""
        ...

    def set_conversation_summary(self, conversation_id: str, summary: str) -> None: ...

    def add_correction(self, record: CorrectionRecord) -> str: ...

    def corrections(self, tenant: str, user_id: str, limit: int = 200) -> list[CorrectionRecord]:
        """The user's corrections, newest first."""
        ...


class AccountStore(Protocol):
    """Per tenant and user: API keys (only their hashes; see ragmesh.identity.keys) and usage counters."""

    def add_usage(self, tenant: str, user_id: str, month: str, messages: int, tokens: int) -> tuple[int, int]:
        """Adds to the month's counters (month = YYYY-MM); returns the new (messages, tokens)."""
        ...

    def usage(self, tenant: str, user_id: str, month: str) -> tuple[int, int]: ...

    def add_api_key(self, record: ApiKeyRecord) -> None: ...

    def api_key(self, key_id: str) -> ApiKeyRecord | None: ...

    def api_keys(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """Every key (one tenant's with tenant), oldest first."""
        ...

    def revoke_api_key(self, key_id: str) -> bool:
        """Marks the key revoked; False when there is no such key or it was revoked already."""
        ...


class InlineReads(Protocol):
    """A store that can say whether a short read may run on the calling thread (see quick_read)."""

    def inline_read(self) -> AbstractContextManager[bool]:
        """True (with the store held for it) when a short read may run on the calling thread without
        waiting: an embedded store whose lock is free. A networked store says False: see quick_read."""
        ...


class Store(CorpusStore, ConversationStore, AccountStore, InlineReads, Protocol):
    """The whole store: what a backend implements and what a service opens."""

    def close(self) -> None: ...
