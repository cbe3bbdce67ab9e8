"""`make bench`'s backends part: the memory engine and the Milvus backend side by side, in
process, through the same SearchEngine (fusion, boosters and all above the seam):

- the synthetic corpus of bench.search_bench (same seeds): load rate, hybrid top-10 p50/p99
  without and with the 10% filter (`group in [g0]`);
- ingest through each backend (issue 26): the same chunks through the Upsert path (the
  Upserter and Committer behind `Retriever/Upsert`: a SQLite store, then the backend) on each
  backend, against inserting the same rows straight into milvus-lite with pymilvus in the same
  run; the ratio, and the rate of the first and the last tenth of the corpus (flat: a write
  costs the same whatever the collection holds). On the synthetic corpus (the Milvus side at
  MILVUS_CHUNKS, so the part fits its time) and on SciFact's 5,183 abstracts;
- SciFact train: the corpus ingested through the Milvus backend (the `Ingestor` behind
  `Retriever/Ingest`, the local model embedding), its time against the issue's 10 minutes;
  nDCG@10 of hybrid search on each backend (the memory side loaded from the same store);
- a new replica's start: `python -m services.retriever` over a store holding the synthetic
  corpus, to its first answered search (memory builds its index from the store; a Milvus
  replica finds it in Milvus, loaded by `ragmesh index rebuild`).

The Milvus side runs on milvus-lite: a Python re-implementation of the Milvus server that
serves its gRPC protocol from a local file. It is here for correctness (the same pymilvus
calls a Milvus server or cluster answers); its speed says nothing about a Milvus server.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import scifact_eval
from bench.search_bench import (
    CHUNKS_PER_DOC, COLLECTION, REPO, TEN_PERCENT, TOP_K, RetrieverProcess, Section, SyntheticCorpus, Target,
    channel, chunk_message, log, percentiles, render, search_request,
)
from ragmesh import convert
from ragmesh.config import Settings
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import DocumentRecord, SearchFilter, StoredChunk
from ragmesh.v1 import retriever_pb2_grpc
from services.embedder import backends as embedder_backends
from services.embedder.backends import EmbeddingBackend
from services.retriever.backend import DocKey, SearchBackend
from services.retriever.index import IndexRegistry
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.upsert import Upserter
from services.retriever.milvus import MilvusBackend, MilvusConfig, rows, sync
from services.retriever.milvus import backend as milvus_backend
from services.retriever.search import SearchEngine, SearchQuery

TENANT = "bench"
PARITY = 0.02  # the bound on |nDCG@10 memory - nDCG@10 milvus|
# Both backends are scored on the same first queries: milvus-lite scans for each hybrid search, so all 809
# took 40+ minutes alone, past the whole bench's 30; 200 still tell a ranking difference of 0.02.
PARITY_QUERIES = 200
LITE = "milvus-lite"
# milvus-lite answers count(*) under a filter by reading every row it admits (seconds at 100k), and
# a search counts its candidates: more queries would only lengthen `make bench`.
LITE_QUERIES = 15


REPLICA_START_TIMEOUT_S = 1800  # a memory replica builds its whole index before it serves
MILVUS_CHUNKS = 50_000  # synthetic chunks the milvus-lite side takes (100k took 11 minutes of `make bench` alone)
SCIFACT_INGEST_S = 600  # the bound on SciFact ingested through the Milvus backend
DIRECT_RATIO = 0.5  # the backend's ingest rate against inserting the same rows straight into milvus-lite


def milvus(folder: Path, dimensions: int, prefix: str = "bench_") -> MilvusBackend:
    return MilvusBackend(MilvusConfig(str(folder / "index.db"), "", "", "FLAT", {}, {}, "Strong", prefix),
                         dimensions)


@dataclass
class Rate:
    """Progress of one load: (seconds since its start, chunks written so far) after each write."""

    marks: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    @property
    def chunks(self) -> int:
        return self.marks[-1][1]

    @property
    def seconds(self) -> float:
        return self.marks[-1][0]

    def overall(self) -> float:
        return self.chunks / self.seconds

    def tenths(self) -> tuple[float, float]:
        """chunks/s over the first tenth of the corpus and over the last (to the nearest write)."""
        n = self.chunks
        t1, d1 = next((t, d) for t, d in self.marks if d >= n / 10)
        t9, d9 = max(((t, d) for t, d in [(0.0, 0), *self.marks] if d <= n * 9 / 10), key=lambda m: m[1])
        return d1 / t1, (n - d9) / (self.seconds - t9)

    def described(self) -> str:
        first, last = self.tenths()
        return (f"{self.chunks:,} chunks in {self.seconds:.1f} s; first tenth {first:,.0f}, "
                f"last tenth {last:,.0f} chunks/s")


class Recorder:
    """A backend whose writes are timed: what else is asked of it goes to the backend as it is."""

    def __init__(self, backend: SearchBackend) -> None:
        self.backend = backend
        self.rate = Rate()
        self.inside = 0.0  # seconds spent in the backend's writes
        self.started = time.perf_counter()

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def apply(self, collection: str, changes: list[tuple[DocKey, list[StoredChunk]]]) -> None:
        started = time.perf_counter()
        self.backend.apply(collection, changes)
        now = time.perf_counter()
        self.inside += now - started
        done = (self.rate.marks[-1][1] if self.rate.marks else 0) + sum(
            s.vector is not None for _, chunks in changes for s in chunks)
        self.rate.marks.append((now - self.started, done))


async def _stream(chunks: list[StoredChunk]):
    for s in chunks:
        yield s.chunk, s.vector


def upsert_rate(backend: SearchBackend, chunks: list[StoredChunk], store_path: Path) -> Rate:
    """The chunks (with their vectors) through the Upsert path into a new store and the backend."""
    store = SqliteStore(store_path)
    try:
        if isinstance(backend, MilvusBackend):
            backend.connect()
            backend.store = store
        recorder = Recorder(backend)
        summary = asyncio.run(Upserter(Committer(store, recorder)).upsert(_stream(chunks)))  # type: ignore[arg-type]
        if summary.rejected:
            raise AssertionError(f"the Upsert path rejected {summary.rejected} documents: {summary.errors[:3]}")
        return recorder.rate
    finally:
        store.close()


def direct_rate(folder: Path, chunks: list[StoredChunk], dimensions: int) -> Rate:
    """The same rows straight into milvus-lite with pymilvus's insert, in calls of the backend's
    UPSERT_ROWS rows, into a collection made as the backend makes it; the rows are built before
    the clock starts (the backend's rate includes building them: BM25 terms, digests)."""
    b = milvus(folder, dimensions, "direct_")
    b.connect()
    tenant = chunks[0].chunk.tenant
    b.create(COLLECTION, tenant)
    table = rows.milvus_name("direct_", COLLECTION, tenant)
    analyze = b.analyzer(COLLECTION).analyze
    made = [rows.to_row(s.chunk, s.vector, analyze(s.chunk.text), 0) for s in chunks if s.vector is not None]
    rate, step = Rate(), milvus_backend.UPSERT_ROWS
    started = time.perf_counter()
    for start in range(0, len(made), step):
        b.client.insert(table, made[start:start + step])
        rate.marks.append((time.perf_counter() - started, min(start + step, len(made))))
    b.drop(COLLECTION)
    b.close(Path(), 0)
    return rate


def ingest_figures(section: Section, corpus: str, folder: Path, chunks: list[StoredChunk],
                   dimensions: int, quick: bool) -> tuple[MilvusBackend, Rate]:
    """The Upsert path on each backend and the direct insert, on the same chunks in the same run
    (targets on a full run only); returns the Milvus backend holding them and the direct rate."""
    n = sum(s.vector is not None for s in chunks)
    log(f"backends: {corpus}: {n:,} chunks through Upsert into memory")
    mem = upsert_rate(IndexRegistry(dimensions), chunks, folder / "memory.sqlite3")
    section.add(f"ingest through Upsert, {corpus}, memory", mem.overall(), "chunks/s", note=mem.described())
    log(f"backends: {corpus}: {n:,} chunks through Upsert into {LITE}")
    lite = milvus(folder, dimensions, "upsert_")
    backend = upsert_rate(lite, chunks, folder / "lite.sqlite3")
    log(f"backends: {corpus}: the same rows straight into {LITE} with pymilvus")
    direct = direct_rate(folder, chunks, dimensions)
    section.add(f"ingest through Upsert, {corpus}, {LITE}", backend.overall(), "chunks/s", note=backend.described()
                + "; store write included")
    section.add(f"  insert straight into {LITE} (pymilvus), {corpus}", direct.overall(), "chunks/s",
                note=direct.described())
    section.add("  Milvus backend / straight insert", backend.overall() / direct.overall(), "",
                None if quick else Target(">=", DIRECT_RATIO))
    first, last = backend.tenths()
    section.add("  last tenth / first tenth, Milvus backend", last / first, "", None if quick else Target(">=", 1.0),
                note="flat: the last tenth no slower than the first")
    return lite, direct


def stored_chunks(corpus: SyntheticCorpus) -> list[StoredChunk]:
    return [s for b, start in corpus.batch_sizes() for chunks in documents(corpus, b, start).values() for s in chunks]


async def _no_embedder(texts: list[str], task: str) -> np.ndarray:
    raise AssertionError("every benchmark query carries its vector")


def documents(corpus: SyntheticCorpus, b: int, start: int) -> dict[tuple[str, str], list[StoredChunk]]:
    """One batch of the corpus, as each document's stored chunks."""
    docs: dict[tuple[str, str], list[StoredChunk]] = {}
    for i, (text, vector) in enumerate(zip(corpus.texts(b, start), corpus.vectors(b, start)), start=start):
        chunk = dataclasses.replace(convert.chunk_from_proto(chunk_message(i, text)), tenant=TENANT)
        docs.setdefault((TENANT, chunk.doc_id), []).append(StoredChunk(chunk, vector))
    return docs


def load(backend: SearchBackend, corpus: SyntheticCorpus) -> float:
    """chunks/s of backend.apply over the corpus (generating it is not timed)."""
    seconds = 0.0
    for b, start in corpus.batch_sizes():
        changes = documents(corpus, b, start)
        started = time.perf_counter()
        backend.apply(COLLECTION, list(changes.items()))
        seconds += time.perf_counter() - started
    return corpus.n_chunks / seconds


async def latencies(backend: SearchBackend, queries: list[tuple[str, np.ndarray]],
                    f: SearchFilter) -> tuple[np.ndarray, np.ndarray]:
    """Each search's wall time, and the slower of its two lists (dense, lexical: they run side by side)."""
    engine = SearchEngine(backend, _no_embedder)
    total, lists = [], []
    for text, vector in queries:
        started = time.perf_counter()
        outcome = await engine.search(SearchQuery(query=text, collections=[COLLECTION], top_k=TOP_K, vector=vector,
                                                  filter=dataclasses.replace(f, tenant=TENANT)))
        total.append((time.perf_counter() - started) * 1000)
        lists.append(max(outcome.timings["dense_ms"], outcome.timings["sparse_ms"]))
    return np.array(total), np.array(lists)


def searches(section: Section, name: str, backend: SearchBackend, queries: list[tuple[str, np.ndarray]]) -> None:
    for label, f in (("", SearchFilter()), (", 10% filter", TEN_PERCENT)):
        total, lists = asyncio.run(latencies(backend, queries, f))
        section.add(f"hybrid top-{TOP_K} p50 / p99{label}, {name}", "{:.1f} / {:.1f}".format(*percentiles(total)),
                    "ms", note=f"{len(queries)} queries, SearchEngine in process, vector given; the dense and "
                               f"lexical lists alone: p50 {np.percentile(lists, 50):.1f} ms")


def synthetic(section: Section, n_chunks: int, n_queries: int, folder: Path, quick: bool) -> None:
    """Memory loads the whole corpus; the Milvus side its first MILVUS_CHUNKS, through the Upsert
    path (beside memory and the straight insert), then both are searched."""
    corpus = SyntheticCorpus(n_chunks)
    memory = IndexRegistry(384)
    log(f"backends: loading {n_chunks:,} chunks into memory")
    section.add("load rate, memory", load(memory, corpus), "chunks/s", note=f"{n_chunks:,} chunks, apply in process")
    searches(section, "memory", memory, corpus.queries(n_queries))
    lite_n = min(n_chunks, MILVUS_CHUNKS)
    lite, _ = ingest_figures(section, f"synthetic {lite_n:,}", folder, stored_chunks(SyntheticCorpus(lite_n)), 384,
                             quick)
    lite.seal(COLLECTION)  # as `ragmesh index rebuild` does after a bulk load
    log(f"backends: searching {LITE}")
    searches(section, f"{LITE} ({lite_n:,} chunks)", lite, corpus.queries(min(n_queries, LITE_QUERIES)))
    lite.close(Path(), 0)


def store_corpus(corpus: SyntheticCorpus, path: Path) -> None:
    """The corpus in a SQLite store, as ingestion leaves it."""
    store = SqliteStore(path)
    try:
        for b, start in corpus.batch_sizes():
            store.replace_documents([(DocumentRecord(doc_id, COLLECTION, tenant, content_hash=doc_id,
                                                     chunk_count=len(chunks)), chunks)
                                     for (tenant, doc_id), chunks in documents(corpus, b, start).items()])
    finally:
        store.close()


def replica_start(section: Section, corpus: SyntheticCorpus, folder: Path) -> None:
    """Seconds from starting `python -m services.retriever` (a new replica, no snapshot of its own)
    over a store holding the corpus to its first answered search, on each backend."""
    store_path = folder / "ragmesh.sqlite3"
    log(f"backends: writing {corpus.n_chunks:,} chunks into a store for the replica start")
    store_corpus(corpus, store_path)
    lite = {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": str(folder / "index.db")}
    # Milvus holds the index before any replica starts, loaded as an operator loads it (a milvus-lite
    # file is held by one process at a time: this one never opens it).
    log(f"backends: `ragmesh index rebuild` of {corpus.n_chunks:,} chunks into {LITE}")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "services.cli", "index", "rebuild"], check=True, cwd=REPO,
                   env={**os.environ, **lite, "DATA_DIR": str(folder)}, stdout=subprocess.DEVNULL)
    section.add(f"`ragmesh index rebuild` into {LITE}", corpus.n_chunks / (time.perf_counter() - started), "chunks/s",
                note=f"{corpus.n_chunks:,} chunks from the store, a process of its own (its start included)")
    text, vector = corpus.queries(1)[0]
    env = {"memory": {}, LITE: lite}
    for name in ("memory", LITE):
        log(f"backends: starting a {name} replica over the store")
        proc = RetrieverProcess(env[name], start_timeout=REPLICA_START_TIMEOUT_S)
        shutil.copy(store_path, proc.data_dir / store_path.name)
        started = time.perf_counter()
        with proc:
            serving = time.perf_counter() - started
            with channel(proc) as ch:
                reply = retriever_pb2_grpc.RetrieverStub(ch).Search(search_request(text, vector, None), timeout=600)
            answered = time.perf_counter() - started
        if not reply.hits:
            raise AssertionError(f"the {name} replica answered its first search with no hits")
        section.add(f"new replica: SERVING / first search answered, {name}", f"{serving:.1f} / {answered:.1f}", "s",
                    note=f"from the process start; {corpus.n_chunks:,} chunks in the store")


class StandIn:
    """Vectors drawn from a digest of each text, in place of the model: the Milvus figures without
    the model's minutes (on a busy shared machine the local model embeds SciFact for tens of
    minutes). Dense search then ranks noise, alike on both backends."""

    dimensions = 384

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big") for t in texts]
        vectors = np.stack([np.random.default_rng(seed).standard_normal(self.dimensions) for seed in seeds])
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


async def _scifact(section: Section, data: scifact_eval.SciFact, folder: Path, quick: bool,
                   model_vectors: bool) -> None:
    """SciFact ingested through the Milvus backend (the Ingestor, the local model embedding as the
    embedder service runs it); the memory engine loaded from the same store; nDCG@10 on each; then
    the store's chunks through the Upsert path on each backend and straight into milvus-lite, and
    `sync.rebuild`'s rate."""
    settings = Settings()
    model: EmbeddingBackend | StandIn = StandIn()
    if model_vectors:
        model = embedder_backends.create(settings)  # ONNX, documents in bf16 where the CPU multiplies it
        await asyncio.to_thread(model.warm_up)
    embedded_by = "local model as the embedder service runs it" if model_vectors else "stand-in vectors, no model"

    async def embed(texts: list[str], task: str) -> np.ndarray:
        return await asyncio.to_thread(model.embed, texts, task)  # off the loop, as a call to the embedder

    store = SqliteStore(folder / "ragmesh.sqlite3")
    try:
        lite = milvus(folder, model.dimensions)
        lite.warm_up(store, Path(), store.version())
        recorder = Recorder(lite)
        ingestor = Ingestor(store, recorder, embed, min_chars=settings.chunk_min_chars,  # type: ignore[arg-type]
                            max_chars=settings.chunk_max_chars, batch_size=settings.embed_batch_size)
        embedding = Timed(ingestor.embedder.embed)
        ingestor.embedder.embed = embedding
        log(f"backends: ingesting {len(data.corpus):,} SciFact abstracts through the Milvus backend")
        cpu = time.process_time()
        run = await scifact_eval.ingest(data, ingestor)
        cpu = time.process_time() - cpu
        if run.failed:
            raise AssertionError(f"{len(run.failed)} SciFact documents failed: {run.failed[:3]}")
        section.add(f"SciFact ingest through the Milvus backend ({LITE})", run.seconds, "s",
                    None if quick else Target("<=", SCIFACT_INGEST_S),
                    note=f"{run.documents:,} abstracts, {run.chunks:,} chunks, {run.chunks / run.seconds:.1f} chunks/s "
                         f"(`Retriever/Ingest`'s Ingestor, {embedded_by}, {embedding.calls:,} embedding calls "
                         f"taking {embedding.seconds:.1f} s); {len(recorder.rate.marks):,} commits, "
                         f"{recorder.inside:.1f} s in Milvus writes (beside the embedding); {cpu:.0f} s of CPU "
                         f"in this process ({cpu / os.cpu_count():.0f} s of wall on {os.cpu_count()} idle cores)")
        section.add("  Milvus writes of the Ingestor", run.chunks / recorder.inside, "chunks/s",
                    note=recorder.rate.described() + " (ingest clock)")
        log(f"backends: so far\n{render([section])}")  # nDCG on milvus-lite takes minutes more
        if model_vectors:  # nDCG over stand-in vectors would say nothing
            memory = IndexRegistry(model.dimensions)
            memory.rebuild(store)
            asked = dataclasses.replace(data, queries=dict(list(data.queries.items())[:PARITY_QUERIES]))
            vectors = model.embed(list(asked.queries.values()), "QUERY")
            ndcg = {}
            for name, backend in (("memory", memory), (LITE, lite)):
                ndcg[name], _ = await scifact_eval.score_engine(asked, SearchEngine(backend, embed), vectors)
            section.add("SciFact nDCG@10 hybrid, memory / milvus-lite", f"{ndcg['memory']:.4f} / {ndcg[LITE]:.4f}",
                        "", note=f"SearchEngine top_k={scifact_eval.ENGINE_TOP_K}, the first {len(asked.queries)} "
                                 f"of {len(data.queries)} queries on both")
            section.add("  |difference|", abs(ndcg["memory"] - ndcg[LITE]), "", None if quick else Target("<=", PARITY))
        lite.close(Path(), 0)
        chunks = list(store.iter_chunks(scifact_eval.COLLECTION))
        (folder / "upsert").mkdir()
        upserted, direct = await asyncio.to_thread(ingest_figures, section, "SciFact", folder / "upsert", chunks,
                                                   model.dimensions, quick)
        upserted.close(Path(), 0)
        section.add("  Ingestor's Milvus writes / straight insert", run.chunks / recorder.inside / direct.overall(), "",
                    None if quick else Target(">=", DIRECT_RATIO))
        (folder / "rebuild").mkdir()  # a file of its own: pymilvus would reuse the closed file's connection
        rebuilt = milvus(folder / "rebuild", model.dimensions, "rebuild_")
        rebuilt.connect()
        started = time.perf_counter()
        loaded = sync.rebuild(rebuilt, store)
        section.add(f"SciFact load from the store into {LITE}", loaded / (time.perf_counter() - started), "chunks/s",
                    note="sync.rebuild: the path of `ragmesh index rebuild` and of a start on an empty Milvus")
        rebuilt.close(Path(), 0)
    finally:
        store.close()


class Timed:
    """An embed function whose calls are counted and timed."""

    def __init__(self, embed) -> None:
        self.embed = embed
        self.calls = 0
        self.seconds = 0.0

    async def __call__(self, texts: list[str], task: str) -> np.ndarray:
        started = time.perf_counter()
        try:
            return await self.embed(texts, task)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - started


def run_backends(n_chunks: int, n_queries: int, scifact: Path, quick: bool, model_vectors: bool = True) -> Section:
    section = Section(f"Search backends: memory vs Milvus ({LITE}), {n_chunks:,} synthetic chunks and SciFact train")
    with tempfile.TemporaryDirectory(prefix="ragmesh-backends-") as tmp:
        folder = Path(tmp)
        for part in ("synthetic", "replicas", "scifact"):
            (folder / part).mkdir()
        synthetic(section, n_chunks, n_queries, folder / "synthetic", quick)
        replica_start(section, SyntheticCorpus(min(n_chunks, MILVUS_CHUNKS)), folder / "replicas")
        log(f"backends: so far\n{render([section])}")  # SciFact's ingest embeds with the local model: minutes
        data = scifact_eval.load_scifact(scifact)
        if quick:
            data = scifact_eval.subset(data, scifact_eval.QUICK_QUERIES, scifact_eval.QUICK_DISTRACTORS)
        asyncio.run(_scifact(section, data, folder / "scifact", quick, model_vectors))
    section.notes.append(f"{LITE} is a Python re-implementation of the Milvus server serving a local file: it shows "
                         "the backend answers correctly, not how fast a Milvus server or cluster is. "
                         f"Documents of {CHUNKS_PER_DOC} chunks; BM25 in Milvus scores the terms of ragmesh's own "
                         "analyzer (k1 1.5, b 0.75), so both backends rank the same tokens. A replica's start: "
                         "memory builds its index from the store before it serves (a restart of the same node "
                         "reads its snapshot instead); a Milvus replica holds no index and only connects. "
                         f"The Milvus side of the synthetic corpus is its first {MILVUS_CHUNKS:,} chunks, so the "
                         "part fits `make bench`'s time; the ratio and the tenths are measured in the same run.")
    return section
