"""`make bench`'s backends part: the memory engine and the Milvus backend side by side, in
process, through the same SearchEngine (fusion, boosters and all above the seam):

- the synthetic corpus of bench.search_bench (same seeds): load rate, hybrid top-10 p50/p99
  without and with the 10% filter (`group in [g0]`);
- SciFact train: nDCG@10 of hybrid search on each backend, from one ingest into the store
  (the Milvus side is loaded from the store, as `ragmesh index rebuild` loads it);
- a new replica's start: `python -m services.retriever` over a store holding the synthetic
  corpus, to its first answered search (memory builds its index from the store; a Milvus
  replica finds it in Milvus).

The Milvus side runs on milvus-lite: a Python re-implementation of the Milvus server that
serves its gRPC protocol from a local file. It is here for correctness (the same pymilvus
calls a Milvus server or cluster answers); its speed says nothing about a Milvus server.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import scifact_eval
from bench.search_bench import (
    CHUNKS_PER_DOC, COLLECTION, REPO, TEN_PERCENT, TOP_K, RetrieverProcess, Section, SyntheticCorpus, Target,
    channel, chunk_message, log, percentiles, search_request,
)
from ragmesh import convert
from ragmesh.config import Settings
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import DocumentRecord, SearchFilter, StoredChunk
from ragmesh.v1 import retriever_pb2_grpc
from services.embedder.backends.local import SentenceTransformersEmbedder
from services.retriever.backend import SearchBackend
from services.retriever.index import IndexRegistry
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.milvus import MilvusBackend, MilvusConfig, sync
from services.retriever.search import SearchEngine, SearchQuery

TENANT = "bench"
PARITY = 0.02  # the bound on |nDCG@10 memory - nDCG@10 milvus|
LITE = "milvus-lite"
# milvus-lite answers count(*) under a filter by reading every row it admits (seconds at 100k), and
# a search counts its candidates: more queries would only lengthen `make bench`.
LITE_QUERIES = 30


REPLICA_START_TIMEOUT_S = 1800  # a memory replica builds its whole index before it serves


def milvus(folder: Path, dimensions: int) -> MilvusBackend:
    return MilvusBackend(MilvusConfig(str(folder / "index.db"), "", "", "FLAT", {}, {}, "Strong", "bench_"),
                         dimensions)


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
    if isinstance(backend, MilvusBackend):
        started = time.perf_counter()
        backend.seal(COLLECTION)  # as `ragmesh index rebuild` does after a bulk load
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


def synthetic(section: Section, n_chunks: int, n_queries: int, folder: Path) -> None:
    corpus = SyntheticCorpus(n_chunks)
    for name, backend in (("memory", IndexRegistry(384)), (LITE, milvus(folder, 384))):
        queries = corpus.queries(n_queries if name == "memory" else min(n_queries, LITE_QUERIES))
        log(f"backends: loading {n_chunks:,} chunks into {name}")
        section.add(f"load rate, {name}", load(backend, corpus), "chunks/s")
        for label, f in (("", SearchFilter()), (", 10% filter", TEN_PERCENT)):
            total, lists = asyncio.run(latencies(backend, queries, f))
            section.add(f"hybrid top-{TOP_K} p50 / p99{label}, {name}", "{:.1f} / {:.1f}".format(*percentiles(total)),
                        "ms", note=f"{len(queries)} queries, SearchEngine in process, vector given; the dense and "
                                   f"lexical lists alone: p50 {np.percentile(lists, 50):.1f} ms")


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
    subprocess.run([sys.executable, "-m", "ragmesh.cli", "index", "rebuild"], check=True, cwd=REPO,
                   env={**os.environ, **lite, "DATA_DIR": str(folder)}, stdout=subprocess.DEVNULL)
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


async def _parity(data: scifact_eval.SciFact, folder: Path) -> tuple[dict[str, float], float]:
    settings = Settings()
    model = SentenceTransformersEmbedder(batch_size=settings.embed_batch_size)
    model.warm_up()

    async def embed(texts: list[str], task: str) -> np.ndarray:
        return model.embed(texts, task)

    store = SqliteStore(folder / "ragmesh.sqlite3")
    try:
        memory = IndexRegistry(model.dimensions)
        log(f"backends: ingesting {len(data.corpus):,} SciFact abstracts")
        await scifact_eval.ingest(data, Ingestor(store, memory, embed, min_chars=settings.chunk_min_chars,
                                                 max_chars=settings.chunk_max_chars))
        lite = milvus(folder, model.dimensions)
        lite.connect()
        started = time.perf_counter()
        chunks = sync.rebuild(lite, store)
        rate = chunks / (time.perf_counter() - started)
        vectors = model.embed(list(data.queries.values()), "QUERY")
        ndcg = {}
        for name, backend in (("memory", memory), (LITE, lite)):
            ndcg[name], _ = await scifact_eval.score_engine(data, SearchEngine(backend, embed), vectors)
        return ndcg, rate
    finally:
        store.close()


def run_backends(n_chunks: int, n_queries: int, scifact: Path, quick: bool) -> Section:
    section = Section(f"Search backends: memory vs Milvus ({LITE}), {n_chunks:,} synthetic chunks and SciFact train")
    with tempfile.TemporaryDirectory(prefix="ragmesh-backends-") as tmp:
        folder = Path(tmp)
        (folder / "synthetic").mkdir()
        (folder / "scifact").mkdir()
        synthetic(section, n_chunks, n_queries, folder / "synthetic")
        (folder / "replicas").mkdir()
        replica_start(section, SyntheticCorpus(n_chunks), folder / "replicas")
        data = scifact_eval.load_scifact(scifact)
        if quick:
            data = scifact_eval.subset(data, scifact_eval.QUICK_QUERIES, scifact_eval.QUICK_DISTRACTORS)
        ndcg, rate = asyncio.run(_parity(data, folder / "scifact"))
    section.add("SciFact nDCG@10 hybrid, memory / milvus-lite", f"{ndcg['memory']:.4f} / {ndcg[LITE]:.4f}", "",
                note=f"SearchEngine top_k={scifact_eval.ENGINE_TOP_K}, {len(data.queries)} queries")
    section.add("  |difference|", abs(ndcg["memory"] - ndcg[LITE]), "", None if quick else Target("<=", PARITY))
    section.add("SciFact load from the store into milvus-lite", rate, "chunks/s", note="sync.rebuild")
    section.notes.append(f"{LITE} is a Python re-implementation of the Milvus server serving a local file: it shows "
                         "the backend answers correctly, not how fast a Milvus server or cluster is. "
                         f"Documents of {CHUNKS_PER_DOC} chunks; BM25 in Milvus scores the terms of ragmesh's own "
                         "analyzer (k1 1.5, b 0.75), so both backends rank the same tokens. A replica's start: "
                         "memory builds its index from the store before it serves (a restart of the same node "
                         "reads its snapshot instead); a Milvus replica holds no index and only connects.")
    return section
