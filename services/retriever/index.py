"""In-memory search indexes, derived from the store.

A CollectionIndex is an immutable snapshot: chunks, their vectors, a FAISS index,
a BM25 index and the filter columns. Writes build a new snapshot and swap it in
with one reference assignment, so a search sees the collection before a document
was replaced or after, never a mix.
"""
from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from ragmesh.store import Store
from ragmesh.types import Chunk, StoredChunk
from services.retriever.dense import DenseIndex
from services.retriever.sparse import SparseIndex


class CollectionIndex:
    def __init__(self, name: str, chunks: list[Chunk], vectors: np.ndarray, dimensions: int) -> None:
        self.name = name
        self.chunks = chunks
        self.vectors = vectors.reshape(len(chunks), dimensions) if len(chunks) else np.zeros((0, dimensions), np.float32)
        self.dimensions = dimensions
        self.dense = DenseIndex(self.vectors, dimensions)
        self.sparse = SparseIndex([c.text for c in chunks])
        self.tenants = np.array([c.tenant for c in chunks], dtype=object)
        self.dates = np.array([c.date for c in chunks], dtype=object)

    def __len__(self) -> int:
        return len(self.chunks)

    def replaced(self, tenant: str, doc_id: str, new: list[StoredChunk]) -> "CollectionIndex":
        """A new snapshot with the document's chunks swapped for `new` (empty = deleted)."""
        keep = [i for i, c in enumerate(self.chunks) if not (c.doc_id == doc_id and c.tenant == tenant)]
        indexed = [s for s in new if s.vector is not None]
        chunks = [self.chunks[i] for i in keep] + [s.chunk for s in indexed]
        parts = [self.vectors[keep]]
        if indexed:
            parts.append(np.stack([s.vector for s in indexed]))
        return CollectionIndex(self.name, chunks, np.concatenate(parts).astype(np.float32), self.dimensions)


class IndexRegistry:
    """Collection name -> current snapshot. Writers serialise on a lock; readers never wait."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._indexes: dict[str, CollectionIndex] = {}
        self._write_lock = threading.Lock()

    def get(self, name: str) -> CollectionIndex | None:
        return self._indexes.get(name)

    def names(self) -> list[str]:
        return sorted(self._indexes)

    def rebuild(self, store: Store) -> int:
        """Builds every collection's index from the store; returns the chunks indexed."""
        grouped: dict[str, list[StoredChunk]] = defaultdict(list)
        for stored in store.iter_chunks():
            if stored.vector is not None:
                grouped[stored.chunk.collection].append(stored)
        fresh = {}
        for name, items in grouped.items():
            vectors = np.stack([s.vector for s in items]).astype(np.float32)
            if vectors.shape[1] != self.dimensions:
                raise ValueError(
                    f"collection {name!r} holds {vectors.shape[1]}-dim vectors but the embedder "
                    f"gives {self.dimensions}: re-ingest it or use the matching embedder"
                )
            fresh[name] = CollectionIndex(name, [s.chunk for s in items], vectors, self.dimensions)
        with self._write_lock:
            self._indexes = fresh
        return sum(len(i) for i in fresh.values())

    def apply(self, collection: str, tenant: str, doc_id: str, chunks: list[StoredChunk]) -> None:
        """Swaps one document's chunks in the collection's index (empty list = delete)."""
        with self._write_lock:
            current = self._indexes.get(collection) or CollectionIndex(
                collection, [], np.zeros((0, self.dimensions), np.float32), self.dimensions
            )
            self._indexes = {**self._indexes, collection: current.replaced(tenant, doc_id, chunks)}


def field_values(registry: IndexRegistry, field: str, collections: list[str], tenant: str) -> list[str]:
    """Sorted distinct values of a metadata field over the tenant's chunks."""
    values: set[str] = set()
    for name in collections or registry.names():
        ix = registry.get(name)
        if ix is not None:
            values.update(c.metadata[field] for c in ix.chunks if c.tenant == tenant and field in c.metadata)
    return sorted(values)
