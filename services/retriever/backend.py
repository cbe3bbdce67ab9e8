"""The search-backend seam: what the retriever needs from an engine that holds its indexes.

Two implementations: `memory` (services.retriever.index.IndexRegistry: FAISS + BM25 in each
replica) and `milvus` (services.retriever.milvus: one shared Milvus collection per ragmesh
collection). Everything above this seam (fusion, explanation fields, boosters, thresholds,
parent expansion, the servicer) sees only `Retrieved` lists, so both backends answer alike.
The store stays the system of record: a backend's index is derived and rebuildable from it.

Tenants are partitions: ids (chunk, document, parent) are keys within a tenant, lexical statistics
are per tenant, and a search, a parent lookup or a count of one tenant never reads another's.

Inside a tenant, each chunk carries its document's access (ragmesh.access: the metadata value
ACCESS_KEY; none = written before access lists, the whole tenant's). Every read below that takes a
`readers` (a SearchFilter's `readers`, or the argument) admits only chunks with
`ragmesh.access.admits(chunk.metadata.get(ACCESS_KEY), readers)`; None is the platform, admitting all.
Lexical statistics stay per tenant, not per reader (as Elasticsearch's document-level security).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ragmesh.store import Store
from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.analyzer import Analyzer

DocKey = tuple[str, str]  # (tenant, doc_id)
Ranked = tuple[np.ndarray, np.ndarray]  # (slots, scores), best first


@dataclass
class CollectionOptions:
    """Per-collection index settings: dense kind and the BM25 analyzer."""

    dense: str = "flat"
    analyzer: dict = field(default_factory=dict)


@dataclass
class Retrieved:
    """What one search took from a collection: per query variant a dense and a sparse ranked
    list of slots (numbers that name a chunk within this result), and everything later steps
    need about those slots, copied out so ranking runs while writers go on."""

    dense: list[Ranked]
    sparse: list[Ranked]
    admitted: int
    chunks: dict[int, Chunk] = field(default_factory=dict)
    similarity: dict[int, float] = field(default_factory=dict)  # cosine to the first query vector
    parents: dict[str, str] = field(default_factory=dict)  # parent chunk id -> text (the child's own document's)
    dense_ms: float = 0.0
    sparse_ms: float = 0.0


class SearchBackend(Protocol):
    """Index chunks, delete a document's chunks, dense and lexical top-k under one Filter."""

    dimensions: int  # of every vector indexed or searched; set from the embedder at warm-up
    follows_store: bool  # True: other replicas' writes must be replayed into this replica's index

    def names(self) -> list[str]:
        """Collections holding indexed chunks."""

    def searchable(self, names: list[str], tenant: str) -> list[str]:
        """Those of the names that may hold chunks of the tenant to search (cheap: asked on every search)."""

    def indexed(self, name: str, tenant: str | None = None, readers: frozenset[str] | None = None) -> int:
        """Searchable chunks of a collection in one tenant's partition (0 for an unknown one) that
        `readers` may read; tenant None counts every tenant's, a platform figure only the service
        credential is shown."""

    def analyzer(self, name: str) -> Analyzer:
        """The collection's BM25 text analysis (boosters match tags with it too)."""

    def search(self, name: str, queries: list[str], vectors: np.ndarray | None, depth: int, f: SearchFilter,
               with_parents: bool = False) -> Retrieved | None:
        """Each query variant's dense (when vectors are given) and lexical top-`depth` under the
        filter, which always names the tenant and (f.readers) who reads; `admitted` counts the chunks
        the whole filter admits, access included; None for a collection with nothing indexed."""

    def apply(self, collection: str, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None:
        """Replaces each document's chunks (an empty list deletes it)."""

    def matching_doc_ids(self, collection: str, where: SearchFilter) -> list[str]:
        """Documents with an indexed chunk the filter (readers included) admits (what delete-by-filter removes)."""

    def field_values(self, field_name: str, collections: list[str], tenant: str,
                     readers: frozenset[str] | None = None) -> list[str]:
        """Sorted distinct values of a metadata field over the tenant's chunks that `readers` may read."""

    def configure(self, name: str, options: CollectionOptions) -> None:
        """Index options for a collection (ValueError for unknown ones); an existing index is rebuilt."""

    def options(self, name: str) -> CollectionOptions: ...

    def configured(self) -> list[str]: ...

    def warm_up(self, store: Store, snapshot_dir: Path, version: int) -> str:
        """Brings the index level with the store at `version` at start; returns what was done."""

    def close(self, snapshot_dir: Path, version: int) -> None:
        """At shutdown, with the index level with the store at `version`."""
