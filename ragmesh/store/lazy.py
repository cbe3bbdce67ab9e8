"""A store opened at warm-up instead of at construction, so a service whose database is
unreachable keeps running, reports NOT_SERVING and retries, instead of crashing in a loop.

Every service reaches its store through this, so it is also where each store call is timed
(ragmesh_store_latency_seconds{operation}). To a type checker a LazyStore is a Store: each of its
methods below is the protocol's own method (same parameters, same result), forwarded to the store
once it is connected; before that, a call raises StoreUnavailable."""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ragmesh import metrics
from ragmesh.config import Settings
from ragmesh.store import open_store
from ragmesh.store.protocols import AccountStore, ChangeLog, ConversationStore, DocumentStore, Store
from ragmesh.store.records import StoreUnavailable

P = ParamSpec("P")
R = TypeVar("R")


class _Forward(Generic[P, R]):
    """A Store method of LazyStore, typed as the protocol's: the connected store's own, timed
    unless `timed` is False (generators return before the work; the change watcher blocks for long)."""

    def __init__(self, method: Callable[Concatenate[Any, P], R], timed: bool = True) -> None:
        self.name, self.timed = method.__name__, timed

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"LazyStore.{name} forwards {self.name}: the names must match")

    @overload
    def __get__(self, lazy: None, owner: type) -> _Forward[P, R]: ...

    @overload
    def __get__(self, lazy: LazyStore, owner: type) -> Callable[P, R]: ...

    def __get__(self, lazy: LazyStore | None, owner: type) -> _Forward[P, R] | Callable[P, R]:
        if lazy is None:
            return self
        return lazy._method(self.name, self.timed)


class LazyStore:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._store: Store | None = None
        self._methods: dict[str, Callable[..., Any]] = {}

    def connect(self) -> None:
        """Opens the configured store (idempotent); raises StoreUnavailable when it cannot."""
        if self._store is None:
            self._store = open_store(self._settings)

    @property
    def connected(self) -> bool:
        return self._store is not None

    def _method(self, name: str, timed: bool) -> Callable[..., Any]:
        found = self._methods.get(name)
        if found is None:
            if self._store is None:
                raise StoreUnavailable("the store is not connected yet (the service is warming up)")
            method = getattr(self._store, name)
            found = self._methods[name] = _timed(method, name) if timed else method
        return found

    # The corpus
    get_document = _Forward(DocumentStore.get_document)
    replace_document = _Forward(DocumentStore.replace_document)
    replace_documents = _Forward(DocumentStore.replace_documents)
    delete_documents = _Forward(DocumentStore.delete_documents)
    iter_chunks = _Forward(DocumentStore.iter_chunks, timed=False)
    collections = _Forward(DocumentStore.collections)
    documents = _Forward(DocumentStore.documents)
    chunk = _Forward(DocumentStore.chunk)
    document_chunks = _Forward(DocumentStore.document_chunks)
    collection_options = _Forward(DocumentStore.collection_options)
    set_collection_options = _Forward(DocumentStore.set_collection_options)
    collection_access = _Forward(DocumentStore.collection_access)
    set_collection_access = _Forward(DocumentStore.set_collection_access)
    # The change log
    version = _Forward(ChangeLog.version)
    changes_since = _Forward(ChangeLog.changes_since)
    watch_changes = _Forward(ChangeLog.watch_changes, timed=False)
    # Conversations
    ensure_conversation = _Forward(ConversationStore.ensure_conversation)
    conversation_exists = _Forward(ConversationStore.conversation_exists)
    conversation_owner = _Forward(ConversationStore.conversation_owner)
    conversations = _Forward(ConversationStore.conversations)
    rename_conversation = _Forward(ConversationStore.rename_conversation)
    add_message = _Forward(ConversationStore.add_message)
    update_message = _Forward(ConversationStore.update_message)
    delete_message = _Forward(ConversationStore.delete_message)
    messages = _Forward(ConversationStore.messages)
    answer_count = _Forward(ConversationStore.answer_count)
    delete_conversation = _Forward(ConversationStore.delete_conversation)
    conversation_summary = _Forward(ConversationStore.conversation_summary)
    set_conversation_summary = _Forward(ConversationStore.set_conversation_summary)
    add_correction = _Forward(ConversationStore.add_correction)
    corrections = _Forward(ConversationStore.corrections)
    # Keys and usage
    add_usage = _Forward(AccountStore.add_usage)
    usage = _Forward(AccountStore.usage)
    add_api_key = _Forward(AccountStore.add_api_key)
    api_key = _Forward(AccountStore.api_key)
    api_keys = _Forward(AccountStore.api_keys)
    revoke_api_key = _Forward(AccountStore.revoke_api_key)

    @contextmanager
    def inline_read(self) -> Iterator[bool]:
        """False until connected (connecting is slow: it belongs in a worker thread)."""
        if self._store is None:
            yield False
        else:
            with self._store.inline_read() as now:
                yield now

    def __repr__(self) -> str:
        return repr(self._store) if self._store is not None else "store (not connected)"

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _timed(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    observe = metrics.store_timer(name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            observe(time.perf_counter() - started)

    return call
