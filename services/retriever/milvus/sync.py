"""Keeping Milvus level with the store, the system of record.

Milvus keeps one number of its own (in the `<prefix>_state` collection): the store version
up to which every write is known to be in Milvus. A writer writes the store, then Milvus; if
it dies between the two, the store's change log still names the document. So at each start
a retriever replays the change log from that number (re-reading each changed document from
the store and writing it to Milvus, which is idempotent), then moves the number to the
version it started at. An empty Milvus with a full store is loaded whole.

`rebuild` drops and reloads collections from the store (`ragmesh index rebuild`, a collection
whose index options changed, one laid out by an older version: of rows.schema, or one Milvus
collection shared by every tenant, at start). A ragmesh collection is every tenant's Milvus
collection of it: dropped together, reloaded tenant by tenant as the store's chunks come. It is resumable:
while a collection is being rebuilt, the state collection holds the store version the rebuild
started at (under a key naming the collection and its index options); a rebuild that finds such
a record does not drop the collection again but skips the documents Milvus already holds whole,
then replays the store's changes since that version, as reconcile does, so a document written
while it ran, or between two runs, ends as the store has it.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from itertools import groupby
from typing import Protocol

from pymilvus import DataType, MilvusClient

from ragmesh.store import Store
from ragmesh.types import StoredChunk
from services.retriever.backend import CollectionOptions, DocKey
from services.retriever.milvus import rows
from services.retriever.milvus.connection import MilvusConfig

class Loadable(Protocol):
    """What loading Milvus from the store uses of the Milvus backend (which calls this module)."""

    config: MilvusConfig
    dimensions: int

    @property
    def client(self) -> MilvusClient: ...

    def call(self, fn, *args, **kwargs): ...

    def create_table(self, table: str, schema, indexes, consistency: str) -> None: ...

    def options(self, name: str) -> CollectionOptions: ...

    def names(self) -> list[str]: ...

    def outdated(self) -> list[str]: ...

    def drop(self, name: str) -> None: ...

    def seal(self, name: str) -> None: ...

    def apply(self, collection: str, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None: ...

    def held(self, collection: str, keys: list[DocKey]) -> dict[DocKey, int]: ...


STATE = "_state"  # suffix of the state collection ('_s' is no escape, so no ragmesh collection maps to it)
WATERMARK = "store_version"
REBUILDING = "rebuild:"  # + digest of the collection + ":" + digest of its options: the version a rebuild started at
DONE = "+"  # after a rebuild's key: that collection is loaded (kept until the whole run ends)
BATCH_CHUNKS = 2048
Progress = Callable[[int], None]  # called with the chunks just loaded


def _state_name(backend: Loadable) -> str:
    return backend.config.prefix + STATE


def _ensure_state(backend: Loadable) -> str:
    name = _state_name(backend)
    client = backend.client
    if not backend.call(client.has_collection, name):
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("value", DataType.INT64)
        schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs a vector field in every collection
        params = client.prepare_index_params()
        params.add_index("unused", index_type="FLAT", metric_type="L2")
        backend.create_table(name, schema, params, "Strong")
    return name


def _get(backend: Loadable, key: str) -> int | None:
    found = backend.call(backend.client.get, _ensure_state(backend), ids=[key], output_fields=["value"])
    return int(found[0]["value"]) if found else None


def _set(backend: Loadable, key: str, value: int) -> None:
    backend.call(backend.client.upsert, _ensure_state(backend), [{"key": key, "value": value, "unused": [0.0, 0.0]}])


def watermark(backend: Loadable) -> int | None:
    """The store version Milvus is known to hold every write of; None for a Milvus never loaded."""
    return _get(backend, WATERMARK)


def set_watermark(backend: Loadable, version: int) -> None:
    _set(backend, WATERMARK, version)


def _rebuilding_prefix(name: str) -> str:
    return f"{REBUILDING}{rows.digest('collection', name)}:"


def _rebuilding_key(backend: Loadable, name: str, dimensions: int) -> str:
    """Names the collection and what its rows depend on: a rebuild under other options starts over."""
    options = json.dumps([asdict(backend.options(name)), dimensions], sort_keys=True)
    return _rebuilding_prefix(name) + rows.digest("options", options)[:16]


def _forget(backend: Loadable, names: list[str]) -> None:
    for name in names:
        backend.call(backend.client.delete, _ensure_state(backend), filter=f'key like "{_rebuilding_prefix(name)}%"')


def interrupted(backend: Loadable, store: Store, names: list[str]) -> dict[str, int]:
    """Collections whose rebuild stopped before its end, with the store version it started at."""
    found = {name: _get(backend, _rebuilding_key(backend, name, _dimensions(store, name) or backend.dimensions))
             for name in names}
    return {name: version for name, version in found.items() if version is not None}


Document = tuple[str, DocKey, list[StoredChunk]]  # (collection, (tenant, doc_id), its stored chunks)


def _documents(chunks: Iterable[StoredChunk]) -> Iterator[Document]:
    """A stream of stored chunks as documents (the store gives a document's chunks together)."""
    for (collection, tenant, doc_id), group in groupby(chunks, lambda s: (s.chunk.collection, s.chunk.tenant,
                                                                          s.chunk.doc_id)):
        yield collection, (tenant, doc_id), list(group)


def _load(backend: Loadable, documents: Iterable[Document], progress: Progress | None,
          resumed: bool = False) -> int:
    """Applies documents BATCH_CHUNKS chunks at a time, whatever documents they are (never splitting
    one: apply() replaces a document whole); the path of a rebuild and of a replay alike.
    `resumed`: documents Milvus already holds whole are skipped."""
    pending: dict[str, dict[DocKey, list[StoredChunk]]] = defaultdict(dict)
    count = batched = 0

    def flush() -> None:
        for collection, docs in pending.items():
            if resumed:
                held = backend.held(collection, list(docs))
                docs = {key: chunks for key, chunks in docs.items()
                        if held.get(key, 0) != sum(s.vector is not None for s in chunks)}
            backend.apply(collection, list(docs.items()))
        if progress is not None:
            progress(batched)
        pending.clear()

    for collection, key, chunks in documents:
        if batched >= BATCH_CHUNKS:
            flush()
            batched = 0
        pending[collection][key] = chunks
        batched += max(1, len(chunks))
        count += len(chunks)
    if pending:
        flush()
    return count


def _dimensions(store: Store, collection: str | None) -> int | None:
    return next((len(s.vector) for s in store.iter_chunks(collection) if s.vector is not None), None)


def rebuild(backend: Loadable, store: Store, collections: list[str] | None = None,
            progress: Progress | None = None) -> int:
    """Drops the collections (all the store holds, when None) and reloads them from the store,
    or continues an interrupted rebuild of them; returns the chunks read. A full rebuild also
    moves the watermark to the store's version."""
    version = store.version()
    names = collections if collections is not None else sorted({c.name for c in store.collections()})
    total = 0
    for name in names:
        dims = _dimensions(store, name)
        if dims is not None:
            backend.dimensions = dims  # the store's vectors decide: the index is derived from them
        key = _rebuilding_key(backend, name, backend.dimensions)
        started = _get(backend, key)
        if started is None:
            _forget(backend, [name])  # a rebuild under other options stopped: it starts over
            started = store.version()
            if name in backend.names():
                backend.drop(name)
            _set(backend, key, started)  # from here on, a run that stops is continued by the next
            total += _load(backend, _documents(store.iter_chunks(name)), progress)
        elif _get(backend, key + DONE) is None:
            total += _load(backend, _documents(store.iter_chunks(name)), progress, resumed=True)
        _replay(backend, store, started, store.version(), name)  # written while it ran, or between two runs
        backend.seal(name)
        _set(backend, key + DONE, started)  # a run stopped in a later collection does not redo this one
    _forget(backend, names)
    if collections is None:
        set_watermark(backend, version)
    return total


def reconcile(backend: Loadable, store: Store, version: int) -> str:
    """At start: load an empty Milvus whole, else replay the store's changes since the watermark
    (twice: a document another replica rewrote while the first pass ran is read again)."""
    mark = watermark(backend)
    if mark is None:
        chunks = rebuild(backend, store)
        set_watermark(backend, version)
        return f"Milvus was empty: {chunks:,} chunks loaded from the store"
    outdated = backend.outdated()
    if outdated:  # laid out by an older version of rows.schema: derived data, so rebuilt
        rebuild(backend, store, outdated)
    rebuilt = f"{', '.join(outdated)} rebuilt (an older row layout); " if outdated else ""
    documents = _replay(backend, store, mark, version)
    documents += _replay(backend, store, version, store.version())
    set_watermark(backend, version)
    return f"{rebuilt}Milvus level with the store at version {version}: {documents:,} documents replayed since {mark}"


def _replay(backend: Loadable, store: Store, since: int, until: int, collection: str | None = None) -> int:
    """Writes each document changed in the store after `since` (up to `until`) to Milvus as the
    store has it now (deleted ones are deleted), in batches as a rebuild loads."""
    changed = dict.fromkeys((c.collection, c.tenant, c.doc_id) for c in store.changes_since(since)
                            if c.version <= until and collection in (None, c.collection))
    _load(backend, ((name, (tenant, doc_id), store.document_chunks(tenant, name, doc_id))
                    for name, tenant, doc_id in changed), None)
    return len(changed)
