"""In-memory search indexes, derived from the store (the system of record).

Tenants are partitions, not a filter column: each (collection, tenant) has an index of its own,
so BM25's document counts, document frequencies and average lengths are the tenant's alone (one
tenant's writes never move another's scores), and a parent chunk is looked up among the tenant's
own. Index options stay per collection: every tenant's partition of a collection has them.

Each partition keeps its chunks in slots: a FAISS index and a BM25 inverted index
over the same slot numbers, dictionary-encoded filter columns, and an `alive` mask.
Writes never rebuild: a replaced document's old slots are tombstoned and its new
chunks appended, all under the collection's write lock, so a search (under the read
lock) sees a document before or after a write, never half of it. When tombstones pile
up the collection is rebuilt compactly off to the side and swapped in.

Inside a partition, who reads (a filter's `readers`) is one more filter column (columns.py): it
narrows the same mask the dense and BM25 lists, the admitted count and delete-by-filter read, and
the counts and field values a caller is shown; a parent is shown only beside an admitted child of
its own document, and only if its own access admits the readers too.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import BinaryIO

import faiss
import numpy as np

from ragmesh import access
from ragmesh.store import DocumentStore, Store
from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.analyzer import ANALYSIS, Analyzer
from services.retriever.backend import CollectionOptions, DocKey, Ranked, Retrieved
from services.retriever.bm25 import BM25Index
from services.retriever.columns import Columns
from services.retriever.dense import IVF, DenseIndex
from services.retriever.ivf import IVFCodes
from services.retriever.rwlock import RWLock
from services.retriever.searched import TITLE_KEY, searched_text

log = logging.getLogger(__name__)

COMPACT_MIN_DEAD = 1000
COMPACT_DEAD_SHARE = 0.25
# Bumped whenever the pickled classes change shape: a snapshot in another format is rebuilt
# from the store, never unpickled into objects the code no longer matches.
# 6: one index per (collection, tenant), files named by a hash of both; 7: an access column on every slot;
# 8: BM25 postings of each chunk's searched text (its document's title before it)
SNAPSHOT_FORMAT = 8
_SNAPSHOT_BLOCK = 8192  # chunks per pickle block
_IVF_SUFFIX = ".ivf.faiss"  # an ivf partition's trained IVF, beside its exact vectors
_SNAPSHOT_SUFFIXES = (".pkl", ".faiss")  # a partition's files (the IVF's ends in .faiss too)
Partition = tuple[str, str]  # (collection, tenant)
# One FAISS thread per search (set per thread: OpenMP settings are thread-local): a single query
# is faster that way, and BM25 runs on the other core. Measured: 1M p50 95 -> 63 ms.
_DENSE_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dense",
                                 initializer=faiss.omp_set_num_threads, initargs=(1,))


_SHARED_VALUE_MAX = 64  # metadata values up to this long repeat across chunks (funds, types, pages)


def _shared(chunk: Chunk) -> Chunk:
    """The chunk with its repeated strings shared: a collection's chunks repeat the same
    collection, tenant, document, date and metadata keys (and mostly the same short values),
    which as separate objects cost about 1 KB per ingested chunk; a document's title, however long, is shared
    by its chunks. Pickling keeps the sharing."""
    intern = sys.intern
    chunk.collection, chunk.tenant, chunk.doc_id = intern(chunk.collection), intern(chunk.tenant), intern(chunk.doc_id)
    chunk.date, chunk.parent_chunk_id = intern(chunk.date), intern(chunk.parent_chunk_id)
    chunk.metadata = {intern(k): intern(v) if len(v) <= _SHARED_VALUE_MAX or k == TITLE_KEY else v
                      for k, v in chunk.metadata.items()}
    return chunk


def _timed(fn, *args) -> tuple[object, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - started) * 1000


class CollectionIndex:
    """One tenant's chunks of one collection (a partition)."""

    def __init__(self, name: str, dimensions: int, options: CollectionOptions | None = None,
                 tenant: str = "") -> None:
        self.name = name
        self.tenant = tenant
        self.dimensions = dimensions
        self.options = options or CollectionOptions()
        self.analyzer = Analyzer.from_options(self.options.analyzer)
        self.dense = DenseIndex(dimensions, self.options.dense)
        self.sparse = BM25Index()
        self.columns = Columns()
        self.chunks: list[Chunk | None] = []
        self.alive = np.zeros(0, dtype=bool)
        self.by_doc: dict[DocKey, list[int]] = {}
        # Parent chunks (stored without vectors) are not searched, only shown with their children.
        self.parents: dict[str, Chunk] = {}
        self.parents_by_doc: dict[DocKey, list[str]] = {}
        self.lock = RWLock()

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def live(self) -> int:
        return int(np.count_nonzero(self.alive[: len(self.chunks)]))

    def _readable(self, readers: frozenset[str] | None) -> np.ndarray:
        """Live slots `readers` may read (call under the read lock)."""
        alive = self.alive[: len(self.chunks)]
        return alive if readers is None else alive & self.columns.readable(readers, len(alive))

    def readable(self, readers: frozenset[str] | None) -> int:
        """Live chunks `readers` may read."""
        with self.lock.read():
            return int(np.count_nonzero(self._readable(readers)))

    def _reserve(self, slots: int) -> None:
        if slots > len(self.alive):
            capacity = max(slots, 2 * len(self.alive), 64)  # small: a tenant's partition may hold a few chunks
            grown = np.zeros(capacity, dtype=bool)
            grown[: len(self.alive)] = self.alive
            self.alive = grown
            self.columns.reserve(capacity)

    def apply(self, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None:
        """Replaces each document's chunks (an empty list deletes it) in one step for readers.
        One writer at a time (the registry's lock), so the texts being replaced are read, and
        analysed again for BM25's removal, before readers are shut out."""
        latest = dict(changes)  # a document given twice: the later version wins, as in the store
        prepared = [
            (key, [(_shared(s.chunk), s.vector, self.analyzer.analyze(searched_text(s.chunk))) for s in chunks
                   if s.vector is not None],
             [_shared(s.chunk) for s in chunks if s.vector is None])
            for key, chunks in latest.items()
        ]
        replaced = {slot: self.analyzer.analyze(searched_text(self.chunks[slot]))
                    for key in latest for slot in self.by_doc.get(key, [])}
        vectors = [v for _, items, _ in prepared for _, v, _ in items]
        new_slots: list[int] = []
        new_tokens: list[list[str]] = []
        with self.lock.write():
            for key, items, parents in prepared:
                for parent_id in self.parents_by_doc.pop(key, []):
                    self.parents.pop(parent_id, None)
                if parents:
                    self.parents.update((p.chunk_id, p) for p in parents)
                    self.parents_by_doc[key] = [p.chunk_id for p in parents]
                for slot in self.by_doc.pop(key, []):
                    self.alive[slot] = False
                    self.chunks[slot] = None
                    self.columns.clear(slot)
                    self.sparse.remove(slot, replaced[slot])
                start = len(self.chunks)
                self._reserve(start + len(items))
                slots = list(range(start, start + len(items)))
                for slot, (chunk, _, _) in zip(slots, items):
                    self.chunks.append(chunk)
                    self.columns.set(slot, chunk)
                    self.alive[slot] = True
                if slots:
                    new_slots += slots
                    new_tokens += [tokens for _, _, tokens in items]
                    self.by_doc[key] = slots
            self.sparse.add_many(new_slots, new_tokens)  # one bulk insert for the whole batch
            if vectors:
                self.dense.add(np.stack(vectors))

    def needs_compaction(self) -> bool:
        dead = len(self.chunks) - self.live
        return dead >= COMPACT_MIN_DEAD and dead >= COMPACT_DEAD_SHARE * len(self.chunks)

    def compacted(self, options: CollectionOptions | None = None) -> "CollectionIndex":
        """A copy holding only live slots (with other options, if given); built under the read
        lock, so searches go on meanwhile."""
        fresh = CollectionIndex(self.name, self.dimensions, options or self.options, self.tenant)
        with self.lock.read():
            fresh.apply([(key, self.stored_chunks(key)) for key in self.by_doc.keys() | self.parents_by_doc.keys()])
        return fresh

    def stored_chunks(self, key: DocKey) -> list[StoredChunk]:
        """A document's chunks with their vectors (parents without), as the store would give them."""
        vectors = self.dense.vectors()
        parents = [StoredChunk(self.parents[p], None) for p in self.parents_by_doc.get(key, [])]
        return parents + [StoredChunk(self.chunk(s), vectors[s].copy()) for s in self.by_doc.get(key, [])]

    def search(self, queries: list[str], vectors: np.ndarray | None, depth: int, f: SearchFilter,
               with_parents: bool = False) -> Retrieved:
        """Each query variant's dense and sparse lists, side by side under one compiled mask."""
        token_lists = [self.analyzer.analyze(q) for q in queries]
        empty: Ranked = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        with self.lock.read():
            mask = self.columns.mask(f, self.alive[: len(self.chunks)])
            out = Retrieved([], [], int(np.count_nonzero(mask)))
            for i, tokens in enumerate(token_lists):
                job = _DENSE_POOL.submit(_timed, self.dense.search, vectors[i], depth, mask) if vectors is not None else None
                sparse, sparse_ms = _timed(self.sparse.top_k, tokens, depth, mask)
                dense, dense_ms = job.result() if job else (empty, 0.0)
                out.dense.append(dense)
                out.sparse.append(sparse)
                out.dense_ms += dense_ms
                out.sparse_ms += sparse_ms
            slots = np.unique(np.concatenate([r[0] for r in out.dense + out.sparse] or [np.zeros(0, np.int64)]))
            chunks, listed = self.chunks, slots.tolist()  # the lists hold admitted (live) slots only
            out.chunks = {s: chunks[s] for s in listed}
            if vectors is not None and listed:
                out.similarity = dict(zip(listed, (self.dense.vectors()[slots] @ vectors[0]).tolist()))
            if with_parents:
                out.parents = self._parents(out.chunks.values(), f.readers)
            return out

    def _parents(self, children: Iterable[Chunk], readers: frozenset[str] | None) -> dict[str, str]:
        """Parent id -> text for these (admitted) children: a parent of the child's own document only
        (this partition is one tenant's), whatever a stored chunk names, and one the readers may
        read (it carries its document's access, as the child does)."""
        found = {}
        for c in children:
            parent = self.parents.get(c.parent_chunk_id) if c.parent_chunk_id else None
            if parent is not None and parent.doc_id == c.doc_id and access.readable(parent.metadata, readers):
                found[c.parent_chunk_id] = parent.text
        return found

    def chunk(self, slot: int) -> Chunk:
        chunk = self.chunks[slot]
        assert chunk is not None, f"slot {slot} of {self.name} is dead"
        return chunk

    def values(self, field_name: str, readers: frozenset[str] | None = None) -> set[str]:
        """Distinct values of a metadata field over the live chunks `readers` may read."""
        with self.lock.read():
            return self.columns.values(field_name, self._readable(readers))

    # -- snapshots: pickled state, read back only when it matches the store's version --------
    # The FAISS index is written apart (faiss.write_index) so a snapshot never holds a second copy in memory.
    # The chunks follow the rest as pickles of their own, a block at a time: a pickler's memo
    # holds every object it has written, and for all chunks at once it cost more than a tenth
    # of the index's memory at the moment the retriever stops.
    def write_snapshot(self, fh: BinaryIO) -> None:
        pickle.dump(self, fh, protocol=5)
        for start in range(0, len(self.chunks), _SNAPSHOT_BLOCK):
            pickle.dump(self.chunks[start : start + _SNAPSHOT_BLOCK], fh, protocol=5)

    @staticmethod
    def read_snapshot(fh: BinaryIO) -> "CollectionIndex":
        index: CollectionIndex = pickle.load(fh)
        while len(index.chunks) < index._snapshot_chunks:
            index.chunks += [c if c is None else _shared(c) for c in pickle.load(fh)]  # shared again across blocks
        del index._snapshot_chunks
        return index

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("lock", "dense", "analyzer", "chunks")}
        state["options"] = asdict(self.options)
        state["_snapshot_chunks"] = len(self.chunks)
        return state

    def __setstate__(self, state: dict) -> None:
        options = CollectionOptions(**state.pop("options"))
        self.__dict__.update(state)
        self.chunks = []
        self.options = options
        self.analyzer = Analyzer.from_options(options.analyzer)
        self.dense = DenseIndex(self.dimensions, options.dense)
        self.lock = RWLock()


class IndexRegistry:
    """The memory search backend: (collection, tenant) -> index. Writers serialise on one lock;
    readers take only a partition's read lock. The map is replaced, never changed in place, so
    readers go through it without a lock."""

    follows_store = True  # each replica holds its own copy

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._indexes: dict[Partition, CollectionIndex] = {}
        self._options: dict[str, CollectionOptions] = {}
        self._analyzers: dict[str, Analyzer] = {}
        self._writer = threading.Lock()

    def get(self, name: str, tenant: str = "") -> CollectionIndex | None:
        """The tenant's partition of a collection."""
        return self._indexes.get((name, tenant))

    def partitions(self, name: str) -> list[CollectionIndex]:
        """Every tenant's partition of a collection."""
        return [index for (collection, _), index in self._indexes.items() if collection == name]

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._indexes})

    def searchable(self, names: list[str], tenant: str) -> list[str]:
        return [n for n in names if len(self._indexes.get((n, tenant)) or ())]

    def indexed(self, name: str, tenant: str | None = None, readers: frozenset[str] | None = None) -> int:
        """Live chunks `readers` may read in the tenant's partition, or (tenant None) in every
        tenant's: a platform figure."""
        if tenant is not None:
            index = self._indexes.get((name, tenant))
            return index.readable(readers) if index else 0
        return sum(index.readable(readers) for index in self.partitions(name))

    def analyzer(self, name: str) -> Analyzer:
        analyzer = self._analyzers.get(name)
        if analyzer is None:
            analyzer = self._analyzers[name] = Analyzer.from_options(self.options(name).analyzer)
        return analyzer

    def search(self, name: str, queries: list[str], vectors: np.ndarray | None, depth: int, f: SearchFilter,
               with_parents: bool = False) -> Retrieved | None:
        index = self._indexes.get((name, f.tenant))
        if index is None or not len(index):
            return None
        return index.search(queries, vectors, depth, f, with_parents)

    def matching_doc_ids(self, collection: str, where: SearchFilter) -> list[str]:
        """From the partition's filter columns: the same compiled mask a search uses."""
        index = self.get(collection, where.tenant)
        if index is None:
            return []
        with index.lock.read():
            mask = index.columns.mask(where, index.alive[: len(index.chunks)])
            return sorted({index.chunk(int(slot)).doc_id for slot in np.flatnonzero(mask)})

    def field_values(self, field_name: str, collections: list[str], tenant: str,
                     readers: frozenset[str] | None = None) -> list[str]:
        values: set[str] = set()
        for name in collections or self.names():
            index = self.get(name, tenant)
            if index is not None:
                values |= index.values(field_name, readers)
        return sorted(values)

    def warm_up(self, store: Store, snapshot_dir: Path, version: int) -> str:
        """The snapshot when it matches the store's version, else a rebuild from the store."""
        if self.load_snapshot(snapshot_dir, version):
            return (f"indexes loaded from snapshot at version {version}: {', '.join(self.names()) or 'none'} "
                    f"({len(self._indexes)} partitions)")
        chunks = self.rebuild(store)
        return (f"indexes rebuilt from the store: {chunks:,} chunks in {', '.join(self.names()) or 'no collections'} "
                f"({len(self._indexes)} partitions)")

    def close(self, snapshot_dir: Path, version: int) -> None:
        """A snapshot for a fast restart."""
        self.save_snapshot(snapshot_dir, version)

    def configure(self, name: str, options: CollectionOptions) -> None:
        """Options for a collection: its existing partitions are rebuilt with them (from memory), new ones start so."""
        Analyzer.from_options(options.analyzer)  # raises ValueError on unknown options
        DenseIndex(self.dimensions, options.dense)  # raises ValueError on an unknown kind
        with self._writer:
            self._options[name] = options
            self._analyzers.pop(name, None)
            rebuilt = {key: index.compacted(options) for key, index in self._indexes.items()
                       if key[0] == name and index.options != options}
            if rebuilt:
                self._indexes = {**self._indexes, **rebuilt}

    def options(self, name: str) -> CollectionOptions:
        return self._options.get(name) or CollectionOptions()

    def configured(self) -> list[str]:
        return sorted(self._options)

    def _partition(self, name: str, tenant: str) -> CollectionIndex:
        index = self._indexes.get((name, tenant))
        if index is None:
            index = CollectionIndex(name, self.dimensions, self._options.get(name), tenant)
            self._indexes = {**self._indexes, (name, tenant): index}
        return index

    def apply(self, collection: str, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None:
        by_tenant: dict[str, list[tuple[DocKey, list[StoredChunk]]]] = defaultdict(list)
        for key, chunks in changes:
            by_tenant[key[0]].append((key, chunks))
        with self._writer:
            for tenant, part in by_tenant.items():
                if (collection, tenant) not in self._indexes and not any(chunks for _, chunks in part):
                    continue  # deletes in a tenant with nothing indexed: no partition for them
                index = self._partition(collection, tenant)
                index.apply(part)
                if index.needs_compaction():
                    self._indexes = {**self._indexes, (collection, tenant): index.compacted()}

    def rebuild(self, store: DocumentStore, batch: int = 2048) -> int:
        """Builds every partition's index from the store; returns the chunks read."""
        with self._writer:
            self._indexes = {}
            pending: dict[Partition, dict[DocKey, list[StoredChunk]]] = defaultdict(lambda: defaultdict(list))
            count = 0
            for stored in store.iter_chunks():
                self._check_dimensions(stored)
                c = stored.chunk
                pending[(c.collection, c.tenant)][(c.tenant, c.doc_id)].append(stored)
                count += 1
                if count % batch == 0:
                    self._flush(pending)
            self._flush(pending)
            return count

    def _flush(self, pending: dict[Partition, dict[DocKey, list[StoredChunk]]]) -> None:
        for (name, tenant), docs in pending.items():
            index = self._partition(name, tenant)
            changes = []
            for key, chunks in docs.items():
                if key in index.by_doc or key in index.parents_by_doc:  # chunks the store returned apart
                    chunks = index.stored_chunks(key) + chunks
                changes.append((key, chunks))
            index.apply(changes)
        pending.clear()

    def _check_dimensions(self, stored: StoredChunk) -> None:
        if stored.vector is not None and len(stored.vector) != self.dimensions:
            raise ValueError(
                f"collection {stored.chunk.collection!r} holds {len(stored.vector)}-dim vectors but the "
                f"embedder gives {self.dimensions}: re-ingest it or use the matching embedder"
            )

    # -- snapshots --------------------------------------------------------------------------
    def save_snapshot(self, directory: Path, version: int) -> None:
        """Writes every partition, then the manifest naming the store version they match; files of
        partitions (or formats) the manifest does not name are removed."""
        directory.mkdir(parents=True, exist_ok=True)
        with self._writer:
            keys = sorted(self._indexes)
            for key in keys:
                index = self._indexes[key]
                stem = _stem(key)
                with index.lock.read():
                    _atomic_write(directory / f"{stem}.pkl", index.write_snapshot)
                    _atomic_write(directory / f"{stem}.faiss", partial(_write_faiss, index.dense.index))
                    ivf_path = directory / f"{stem}{_IVF_SUFFIX}"
                    if index.dense.ivf is not None:
                        _atomic_write(ivf_path, partial(_write_faiss, index.dense.ivf.index))
                    else:  # never read back beside vectors it was not built on
                        ivf_path.unlink(missing_ok=True)
            manifest = {"format": SNAPSHOT_FORMAT, "version": version, "dimensions": self.dimensions,
                        "analysis": ANALYSIS, "partitions": [list(key) for key in keys]}
            _atomic_write(directory / "manifest.json", lambda fh: fh.write(json.dumps(manifest).encode()))
            named = {_stem(key) for key in keys}
            for path in directory.iterdir():
                if path.name.endswith(_SNAPSHOT_SUFFIXES) and path.name.split(".")[0] not in named:
                    path.unlink(missing_ok=True)

    def load_snapshot(self, directory: Path, version: int) -> bool:
        """Loads the snapshot if it matches the store's version, this code's snapshot format
        and text analysis; False means rebuild (also for a snapshot that does not read back:
        it is a cache of the store, never a reason not to start)."""
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
        except (OSError, ValueError):
            return False
        wanted = {"format": SNAPSHOT_FORMAT, "version": version, "dimensions": self.dimensions, "analysis": ANALYSIS}
        if {key: manifest.get(key) for key in wanted} != wanted:
            return False
        loaded: dict[Partition, CollectionIndex] = {}
        try:
            for name, tenant in manifest["partitions"]:
                stem = _stem((name, tenant))
                with open(directory / f"{stem}.pkl", "rb") as fh:
                    index = CollectionIndex.read_snapshot(fh)
                if (index.name, index.tenant) != (name, tenant):
                    raise ValueError(f"{stem}.pkl holds another partition")
                dense = index.dense
                dense.index = faiss.read_index(str(directory / f"{stem}.faiss"))
                ivf_path = directory / f"{stem}{_IVF_SUFFIX}"
                if dense.kind == IVF and ivf_path.exists():
                    dense.ivf = IVFCodes(faiss.read_index(str(ivf_path)))
                    if len(dense.ivf) != len(dense):
                        raise ValueError(f"{ivf_path.name} holds {len(dense.ivf)} vectors, the index {len(dense)}")
                loaded[(name, tenant)] = index
        except Exception as exc:  # truncated, corrupt or foreign files
            log.warning("index snapshot unreadable; rebuilding from the store", extra={"error": repr(exc)})
            return False
        with self._writer:
            self._indexes = loaded
        return True


def _stem(key: Partition) -> str:
    """A partition's snapshot file name: a hash, so any collection and tenant string is a safe name."""
    return hashlib.sha256("\x1f".join(key).encode()).hexdigest()[:32]


def _write_faiss(index: faiss.Index, fh: BinaryIO) -> None:
    faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))


def _atomic_write(path: Path, write) -> None:
    """Streams `write(fh)` into a temporary file, then renames it over `path`."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)

