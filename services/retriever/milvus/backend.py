"""MilvusBackend: the search-backend seam on Milvus (pymilvus; milvus-lite for a file URI).

Retriever replicas hold no index of their own: every replica searches the same Milvus
collections, so they start in seconds whatever the corpus size. Writes come through the
Committer after the store write (upsert by primary key, then delete by primary key the rows the
new version dropped, known from held.py: never a delete by expression, which milvus-lite answers
by scanning every row); sync.py repairs what a crash between the two left behind, at the next start.

Layout: one Milvus collection per (tenant, ragmesh collection), named by rows.milvus_name (the
prefix, the escaped ragmesh name, a digest of the tenant), made at the tenant's first write.
Tenants are partitions here because BM25's statistics (document count, document frequencies,
average length) are those of what Milvus searches over, and that is more than a partition:
- a Milvus server computes them per shard of a collection (the shard delegator's IDF oracle
  merges the statistics of every sealed and growing segment it serves, whatever their
  partition: internal/querynodev2/delegator/idf_oracle.go), so with one shared collection and
  the tenant as partition key, or a partition per tenant, every tenant's writes move every
  other tenant's scores;
- milvus-lite (3.x, pure Python) computes them per segment: a sealed segment's over all its rows
  (every tenant the partition key hashed into that partition, deleted rows too), the memtable's
  over the rows the search filter admits. Measured on the layout before this one: a chunk of
  tenant B holding a guessed word and an unused one once each scored 0.900 for both; once
  tenant A had written five documents with the guessed word and they were sealed, 0.316 for
  the guess and 1.740 for the unused word (tests/security/test_partitions_milvus.py).
So the only unit whose statistics are one tenant's is a Milvus collection.

Where each layout pays (Milvus defaults): a collection counts shards x partitions against
rootCoord.maxGeneralCapacity (65,536 "collection units"), and collections against
quotaAndLimits.limits.maxCollectionNum and maxCollectionNumPerDB (65,536 each). Ours are 1 shard x
1 partition, so an instance holds up to 65,536 (tenant, collection) pairs; Milvus's maintainers
advise far fewer (about 1,000 to 10,000): each collection is loaded on its own, with a shard
delegator, segments and metadata of its own (connection.create_table makes and loads it,
once, at the tenant's first write: about 0.1 s in milvus-lite), and every replica lists them
every NAMES_TTL_S. Past that, split tenants over Milvus databases (64 by default) or instances.
The shared collection with the tenant as partition key (num_partitions: 64 by default in Milvus
2.4's docs, 16 in milvus-lite; so 1,024 ragmesh collections an instance) holds millions of tenants,
and a partition per tenant 1,024 a collection (rootCoord.maxPartitionNum), but both share BM25
statistics, so neither is offered.

Still shared (residue): the Milvus instance (memory, query nodes, DML channels: one tenant's load
is another's latency), the `_state` collection (the store version Milvus holds), and each ragmesh
collection's analyzer and index options. Within a tenant's collection, statistics still count
its own deleted rows until compaction, and milvus-lite's memtable statistics follow the search
filter (a date range changes scores): a tenant's scores depend on its own history only.

Inside a tenant's collection, who may read a chunk is a filter, not a unit of storage: each row's
`kv` names its reader tokens (rows.access_entries) and every read ANDs the caller's principals
into its expression (expr.readable). So a result list, a count or a parent holds only what the
caller may read, but BM25's statistics remain the collection's: a colleague's private document
moves a reader's keyword scores (as under Elasticsearch's document-level security), and is never
returned, counted or named.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from pymilvus.exceptions import MilvusException

from ragmesh import access
from ragmesh.store import Store
from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.analyzer import Analyzer
from services.retriever.backend import CollectionOptions, DocKey, Retrieved
from services.retriever.dense import FLAT, HNSW
from services.retriever.milvus import expr, held, rows, sync
from services.retriever.milvus.connection import Connection, MilvusConfig
from services.retriever.searched import searched_text

log = logging.getLogger(__name__)

BM25_PARAMS = {"bm25_k1": 1.5, "bm25_b": 0.75}  # as the memory engine's BM25 (rank_bm25's defaults)
HNSW_DEFAULTS = {"M": 16, "efConstruction": 64}  # a collection configured "hnsw" without MILVUS_INDEX_PARAMS
UPSERT_ROWS = 2048  # rows an upsert call carries at most ...
UPSERT_BYTES = 16 << 20  # ... and bytes (about: texts, terms, vectors), well below gRPC's message limit
READ_BATCH = 1000
NAMES_TTL_S = 2.0  # how long the list of collections is trusted: another replica may have made one
_EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.float32))
# Dense and lexical searches of one request run side by side (and the filter's count beside them).
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="milvus")
_WRITES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="milvus-write")  # one upsert in flight


def _newest(lists: list[list[dict]]) -> dict[tuple[str, str], int]:
    """When each document's newest version among the hits was written: a document being replaced
    has the rows of two versions for a moment (its new rows are upserted before the old ones are
    deleted, and Milvus has no transactions), and a search shows one version only, the newest."""
    newest: dict[tuple[str, str], int] = {}
    for hits in lists:
        for hit in hits:
            e = hit["entity"]
            key = (e["tenant"], e["doc_id"])
            newest[key] = max(newest.get(key, e["written"]), e["written"])
    return newest


class MilvusBackend(Connection):
    follows_store = False  # one shared index: another replica's write is in it already

    def __init__(self, config: MilvusConfig, dimensions: int) -> None:
        super().__init__(config)
        self.dimensions = dimensions
        self.store: Store | None = None  # parents and over-long texts are read from it
        self._options: dict[str, CollectionOptions] = {}
        self._listed: dict[tuple[str, str], str] = {}  # Milvus collections of ours, listed at _listed_at
        self._held: set[str] = set()  # held.py's collections among them
        self._listed_at = -NAMES_TTL_S
        self._write = threading.Lock()

    # -- collections: one Milvus collection ("table") per tenant and ragmesh collection -----------
    def _table(self, name: str, tenant: str) -> str:
        return rows.milvus_name(self.config.prefix, name, tenant)

    def _tables(self) -> dict[tuple[str, str], str]:
        """(ragmesh collection, tenant key) -> Milvus collection, for every one of ours."""
        if time.monotonic() - self._listed_at > NAMES_TTL_S:
            listed = self.call(self.client.list_collections)
            self._listed = {key: table for key, table in
                            ((rows.parse(self.config.prefix, t), t) for t in listed) if key}
            self._held = {t for t in listed if t.startswith(self.config.prefix) and t.endswith(held.SUFFIX)}
            self._listed_at = time.monotonic()
        return self._listed

    def _of(self, name: str) -> list[str]:
        """Every Milvus collection of a ragmesh collection (each tenant's, and a shared-layout one)."""
        return [table for (n, _), table in self._tables().items() if n == name]

    def _holds(self, name: str, tenant: str) -> bool:
        return (name, rows.tenant_key(tenant)) in self._tables()

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._tables()})

    def _index_params(self, options: CollectionOptions):
        params = self.client.prepare_index_params()
        kind = self.config.index_type if options.dense == FLAT else "HNSW"
        build = self.config.index_params if options.dense == FLAT or self.config.index_type == "HNSW" else HNSW_DEFAULTS
        params.add_index("dense", index_type=kind, metric_type="IP", params=dict(build) if kind != "FLAT" else {})
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=BM25_PARAMS)
        params.add_index("date", index_type="INVERTED")
        return params

    def _held_table(self, name: str) -> str | None:
        """held.py's collection of the ragmesh collection, when there is one."""
        table = held.name(self.config.prefix, name)
        self._tables()
        return table if table in self._held else None

    def create(self, name: str, tenant: str) -> None:
        """The tenant's empty collection with this retriever's dimensions and the collection's options
        (and the collection's record of what Milvus holds, first: a tenant's collection without one is
        of an older layout, see outdated)."""
        table = held.name(self.config.prefix, name)
        if table not in self._held and not self.call(self.client.has_collection, table):
            held.create(self, table)
        self._held.add(table)
        table = self._table(name, tenant)
        if not self.call(self.client.has_collection, table):  # else made by another replica meanwhile
            self.create_table(table, rows.schema(self.dimensions), self._index_params(self.options(name)),
                              self.config.consistency)
            pairs = self.client.prepare_index_params()
            pairs.add_index("kv", index_type="INVERTED")  # access, `in`, `equals` filters (Milvus 2.5 indexes arrays)
            try:
                self.client.create_index(table, pairs, sync=False)
            except MilvusException as exc:  # milvus-lite does not: its filters scan
                log.info("metadata and access filters unindexed: Milvus refused an index on the pairs",
                         extra={"collection": name, "error": exc.message[:200]})
        self._listed = {**self._tables(), (name, rows.tenant_key(tenant)): table}  # searches read it meanwhile

    def outdated(self) -> list[str]:
        """Collections laid out otherwise than now: in the shared layout (one Milvus collection for
        every tenant), with fields other than rows.schema's, or without held.py's record (made by
        an older version: its rows' keys did not name their document)."""
        wanted = [f.name for f in rows.schema(self.dimensions).fields]
        return sorted({name for (name, key), table in self._tables().items()
                       if key == rows.SHARED or self._held_table(name) is None
                       or [f["name"] for f in self.call(self.client.describe_collection, table)["fields"]] != wanted})

    def seal(self, name: str) -> None:
        """Seals what was written so far into indexed segments: after a bulk load, not per write
        (Milvus seals growing segments by itself; a search scans a growing one without its index)."""
        for table in self._of(name):
            self.call(self.client.flush, table)

    def drop(self, name: str) -> None:
        """Every tenant's collection of it."""
        for table in self._of(name) + [t for t in [self._held_table(name)] if t]:
            self.call(self.client.drop_collection, table)
        self._listed = {key: table for key, table in self._tables().items() if key[0] != name}
        self._held.discard(held.name(self.config.prefix, name))

    def indexed(self, name: str, tenant: str | None = None, readers: frozenset[str] | None = None) -> int:
        """The tenant's searchable chunks of the collection that `readers` may read (tenant None:
        every tenant's)."""
        where = expr.readable(readers)  # a tenant's collection holds its rows only: no tenant condition
        if tenant is not None:
            return self._count(self._table(name, tenant), where) if self._holds(name, tenant) else 0
        return sum(self._count(table, where) for table in self._of(name))

    def _count(self, table: str, where: str) -> int:
        found = self.call(self.client.query, table, filter=where, output_fields=["count(*)"],
                           consistency_level=self.config.consistency)
        return int(found[0]["count(*)"]) if found else 0

    def analyzer(self, name: str) -> Analyzer:
        return Analyzer.from_options(self.options(name).analyzer)

    def configure(self, name: str, options: CollectionOptions) -> None:
        """Recorded; a collection already in Milvus is rebuilt from the store with them (its terms
        come from the analyzer, its dense index from the kind), as the memory engine rebuilds."""
        Analyzer.from_options(options.analyzer)  # ValueError for unknown options
        if options.dense not in (FLAT, HNSW):
            raise ValueError(f"dense index kind must be {FLAT!r} or {HNSW!r} on Milvus (its own IVF_FLAT is "
                             f"MILVUS_INDEX_TYPE), got {options.dense!r}")
        changed = self.options(name) != options
        self._options[name] = options
        if changed and self.store is not None and name in self.names():
            sync.rebuild(self, self.store, [name])

    def options(self, name: str) -> CollectionOptions:
        return self._options.get(name) or CollectionOptions()

    def configured(self) -> list[str]:
        return sorted(self._options)

    # -- search ----------------------------------------------------------------------------
    def searchable(self, names: list[str], tenant: str) -> list[str]:
        """Those of the names the tenant has a Milvus collection of."""
        return [n for n in names if self._holds(n, tenant)]

    def search(self, name: str, queries: list[str], vectors: np.ndarray | None, depth: int, f: SearchFilter,
               with_parents: bool = False) -> Retrieved | None:
        """Searches the filter's tenant's collection only: BM25's statistics are that collection's."""
        if not self._holds(name, f.tenant):
            return None
        table = self._table(name, f.tenant)
        where = expr.expression(f)  # its tenant condition stays: every row of the table meets it
        analyzer = self.analyzer(name)
        texts = [" ".join(analyzer.analyze(q)) for q in queries]
        fields = rows.CHUNK_FIELDS + (["dense"] if vectors is not None else [])
        count = _POOL.submit(self._count, table, where)
        dense = _POOL.submit(self._timed_search, table, "dense", vectors.tolist(), depth, where, fields) \
            if vectors is not None else None
        lexical = [t for t in texts if t]
        sparse = _POOL.submit(self._timed_search, table, "sparse", lexical, depth, where, fields) if lexical else None
        admitted = count.result()
        dense_lists, dense_ms = dense.result() if dense else ([], 0.0)
        sparse_found, sparse_ms = sparse.result() if sparse else ([], 0.0)
        found = iter(sparse_found)
        sparse_lists = [next(found) if t else [] for t in texts]  # an all-stopword variant has no lexical list
        out = Retrieved([], [], admitted, dense_ms=dense_ms, sparse_ms=sparse_ms)
        slots: dict[str, int] = {}
        rows_by_slot: dict[int, dict] = {}
        newest = _newest(dense_lists + sparse_lists)
        for kind, lists in (("dense", dense_lists), ("sparse", sparse_lists)):
            for hits in lists:
                ids, scores = [], []
                for hit in hits:
                    entity = hit["entity"]
                    if entity["written"] < newest[entity["tenant"], entity["doc_id"]]:
                        continue  # a replaced version whose rows are not deleted yet
                    slot = slots.setdefault(entity["pk"], len(slots))
                    rows_by_slot.setdefault(slot, entity)
                    ids.append(slot)
                    # milvus-lite gives BM25 as a negative distance, a server as a positive score.
                    scores.append(abs(hit["distance"]) if kind == "sparse" else hit["distance"])
                getattr(out, kind).append((np.asarray(ids, np.int64), np.asarray(scores, np.float32)) if ids else _EMPTY)
        if vectors is None:  # as the memory engine: an empty dense list per variant
            out.dense = [_EMPTY] * len(queries)
        out.chunks = self._chunks(name, rows_by_slot)
        if vectors is not None and rows_by_slot:
            order = list(rows_by_slot)
            matrix = np.asarray([rows_by_slot[s]["dense"] for s in order], np.float32)
            out.similarity = dict(zip(order, (matrix @ vectors[0]).tolist()))
        if with_parents:
            out.parents = self._parents(name, f, out.chunks.values())
        return out

    def _timed_search(self, table: str, field: str, data: list, depth: int, where: str,
                      fields: list[str]) -> tuple[list, float]:
        started = time.perf_counter()
        params = {"metric_type": "IP", "params": self.config.search_params} if field == "dense" \
            else {"metric_type": "BM25"}
        found = self.call(self.client.search, table, data=data, anns_field=field, limit=depth,
                           filter=where, output_fields=fields, search_params=params,
                           consistency_level=self.config.consistency)
        return [list(hits) for hits in found], (time.perf_counter() - started) * 1000

    def _chunks(self, name: str, found: dict[int, dict]) -> dict[int, Chunk]:
        """Chunks of the rows; a text cut at 64 KB is read whole from the store."""
        chunks = {slot: rows.to_chunk(row, name) for slot, row in found.items()}
        for slot, row in found.items():
            chunk = chunks[slot]
            if row["text_chars"] != len(chunk.text) and self.store is not None:
                whole = {s.chunk.chunk_id: s.chunk.text
                         for s in self.store.document_chunks(chunk.tenant, name, chunk.doc_id)}
                chunk.text = whole.get(chunk.chunk_id, chunk.text)
        return chunks

    def _parents(self, name: str, f: SearchFilter, chunks) -> dict[str, str]:
        """Parents are stored, not indexed: each text is the searching tenant's chunk of that id,
        read from the store, and only when it is a parent in the child's own document (the children
        are admitted ones, and a parent carries its document's access: checked again all the same)."""
        out: dict[str, str] = {}
        if self.store is None:
            return out
        docs: dict[str, set[str]] = {}  # parent id -> documents of the children naming it
        for c in chunks:
            if c.parent_chunk_id:
                docs.setdefault(c.parent_chunk_id, set()).add(c.doc_id)
        for parent_id, doc_ids in docs.items():
            stored = self.store.chunk(f.tenant, parent_id)
            if stored is not None and stored.chunk.collection == name and stored.chunk.doc_id in doc_ids \
                    and access.readable(stored.chunk.metadata, f.readers):
                out[parent_id] = stored.chunk.text
        return out

    # -- writes ----------------------------------------------------------------------------
    def apply(self, collection: str, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None:
        """Replaces each document's indexed chunks (parents stay in the store), all of the call's
        documents together: the rows are upserted in calls of UPSERT_ROWS rows or UPSERT_BYTES,
        whatever documents they belong to, then the keys the old versions had and the new ones lack
        are deleted, by key (held.py says which: a new document deletes nothing). A search meanwhile
        sees the old or the new version of a document (the rows carry when they were written, see
        _newest), never both and never none of the kept chunks."""
        docs = {doc: self._indexed(collection, chunks) for doc, chunks in changes}  # a document's last change wins
        with self._write:
            for tenant in sorted({tenant for (tenant, _), chunks in docs.items() if chunks}):
                if not self._holds(collection, tenant):
                    self.create(collection, tenant)
            record = self._held_table(collection)
            if record is None:
                return  # nothing indexed of the collection, and nothing to index
            keys = {doc: [rows.pk(s.chunk) for s in chunks] for doc, chunks in docs.items()}
            before = held.read(self, record, list(docs))
            wider = {doc: sorted(set(before.get(doc, [])) | set(k)) for doc, k in keys.items()
                     if not set(k) <= set(before.get(doc, []))}
            held.write(self, record, wider, before)  # first: Milvus never holds a row held.py does not name
            self._upsert(collection, docs)
            dropped: dict[str, set[str]] = {}
            for doc, old in before.items():
                dropped.setdefault(doc[0], set()).update(set(old) - set(keys[doc]))
            for tenant, pks in dropped.items():
                if not pks or not self._holds(collection, tenant):
                    continue
                ordered = sorted(pks)
                for start in range(0, len(ordered), held.CALL_KEYS):
                    self.call(self.client.delete, self._table(collection, tenant),
                               ids=ordered[start:start + held.CALL_KEYS])
            narrower = {doc: keys[doc] for doc, old in before.items() if set(old) - set(keys[doc])}
            held.write(self, record, narrower, {**before, **wider})

    def _indexed(self, collection: str, chunks: list[StoredChunk]) -> list[StoredChunk]:
        """The chunks that are searched (parents stay in the store), checked before anything is written."""
        indexed = [s for s in chunks if s.vector is not None]
        for s in indexed:
            if len(s.vector) != self.dimensions:
                raise ValueError(f"collection {collection!r}: a {len(s.vector)}-dim vector, Milvus "
                                 f"holds {self.dimensions}-dim ones: rebuild with the matching embedder")
        return indexed

    def _upsert(self, collection: str, docs: dict[DocKey, list[StoredChunk]]) -> None:
        """One call's rows are built (analysed for BM25, digested) while the previous call is
        written: Milvus and this process work side by side."""
        in_flight: Future | None = None
        try:
            for table, batch in self._batches(collection, docs):
                if in_flight is not None:
                    in_flight.result()
                in_flight = _WRITES.submit(self.call, self.client.upsert, table, batch)
        finally:  # nothing is left writing once apply() returns or raises
            if in_flight is not None:
                in_flight.result()

    def _batches(self, collection: str, docs: dict[DocKey, list[StoredChunk]]) -> Iterator[tuple[str, list[dict]]]:
        """(Milvus collection, rows) of at most UPSERT_ROWS rows or UPSERT_BYTES, whatever documents they are."""
        written = time.time_ns()
        analyze = self.analyzer(collection).analyze
        by_tenant: dict[str, list[StoredChunk]] = {}
        for (tenant, _), chunks in docs.items():
            by_tenant.setdefault(tenant, []).extend(chunks)
        for tenant, chunks in by_tenant.items():
            table = self._table(collection, tenant)
            batch: list[dict] = []
            size = 0
            for s in chunks:
                batch.append(rows.to_row(s.chunk, s.vector, analyze(searched_text(s.chunk)), written))
                size += rows.size(batch[-1])
                if len(batch) >= UPSERT_ROWS or size >= UPSERT_BYTES:
                    yield table, batch
                    batch, size = [], 0
            if batch:
                yield table, batch

    # -- reads for delete-by-filter and field values -----------------------------------------
    def _scan(self, table: str, where: str, fields: list[str]):
        """Every row the expression admits, a batch at a time."""
        it = self.call(self.client.query_iterator, table, batch_size=READ_BATCH, filter=where,
                        output_fields=fields, consistency_level=self.config.consistency)
        try:
            while batch := self.call(it.next):
                yield from batch
        finally:
            it.close()

    def held(self, collection: str, keys: list[DocKey]) -> dict[DocKey, int]:
        """How many rows Milvus holds of each of these documents (a resumed rebuild skips whole ones):
        point reads of the keys held.py names."""
        record = self._held_table(collection)
        named = held.read(self, record, keys) if record else {}
        count: dict[DocKey, int] = {}
        for tenant in {tenant for tenant, _ in named}:
            owner = {pk: doc for doc, pks in named.items() if doc[0] == tenant for pk in pks}
            ids = list(owner)
            for start in range(0, len(ids), held.CALL_KEYS):
                for r in self.call(self.client.get, self._table(collection, tenant),
                                    ids=ids[start:start + held.CALL_KEYS], output_fields=["pk"]):
                    count[owner[r["pk"]]] = count.get(owner[r["pk"]], 0) + 1
        return count

    def matching_doc_ids(self, collection: str, where: SearchFilter) -> list[str]:
        if not self._holds(collection, where.tenant):
            return []
        table = self._table(collection, where.tenant)
        return sorted({r["doc_id"] for r in self._scan(table, expr.expression(where), ["doc_id"])})

    def field_values(self, field_name: str, collections: list[str], tenant: str,
                     readers: frozenset[str] | None = None) -> list[str]:
        key = rows.hexed(field_name)
        values: set[str] = set()
        for name in self.searchable(collections or self.names(), tenant):
            found = self._scan(self._table(name, tenant), expr.has_field(tenant, field_name, readers), ["meta"])
            values |= {rows.unhexed(r["meta"][key]) for r in found}
        return sorted(values)

    # -- start and stop --------------------------------------------------------------------
    def warm_up(self, store: Store, snapshot_dir: Path, version: int) -> str:
        self.store = store
        self.connect()
        return sync.reconcile(self, store, version)

    def close(self, snapshot_dir: Path, version: int) -> None:
        self.disconnect()
