"""The system of record: documents, chunks with vectors, their change log, conversations,
messages, corrections, usage and API keys.

One narrow interface per kind of record (ragmesh.store.protocols: DocumentStore, ChangeLog,
ConversationStore, AccountStore; Store is all of them), two backends (SQLite under DATA_DIR,
MongoDB at MONGODB_URI), and `open_store` to pick one from the settings. Services reach theirs
through ragmesh.store.lazy.LazyStore, opened at warm-up.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from ragmesh.config import Settings
from ragmesh.store.protocols import (AccountStore, ChangeLog, ConversationStore, CorpusStore, DocumentStore,
                                     InlineReads, Store)
from ragmesh.store.records import (Change, CollectionStats, ConversationInfo, CorrectionRecord, MessageRecord,
                                   StoreUnavailable)

__all__ = [
    "AccountStore", "Change", "ChangeLog", "CollectionStats", "ConversationInfo", "ConversationStore",
    "CorpusStore", "CorrectionRecord", "DocumentStore", "InlineReads", "MessageRecord", "Store",
    "StoreUnavailable", "open_store", "quick_read",
]

T = TypeVar("T")


async def quick_read(store: InlineReads, read: Callable[..., T], *args: Any) -> T:
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
