"""`make bench`'s optional peers part: ragmesh beside two embedded peers on the same synthetic
corpus, in one run (issue 15, item 4). Its packages are the `peers` extra (`pip install -e
'.[peers]'`); `make test` does not install them.

- ragmesh: a real retriever process through gRPC, as the search part measures it (flat FAISS +
  BM25 + RRF, the query vector given).
- LanceDB (embedded, a temp folder): the corpus added in batches, its native full-text index on
  the text and a bitmap index on the group; hybrid = vector + full-text search fused by its
  RRFReranker, the 10% filter as a prefilter (`where(..., prefilter=True)`). No vector index:
  at this size LanceDB scans the vectors exactly, as ragmesh's default does.
- Milvus Lite (embedded, a temp .db file; milvus-lite is already a dependency): a dense FLAT
  field (inner product), a BM25 function over the analysed text into a sparse field, and
  `hybrid_search` of both with RRFRanker(60), the 10% filter as the search's filter expression.
  milvus-lite is a Python re-implementation of the Milvus server: its figures are not a Milvus server's.

Each engine's load rate (generation not timed; index builds included), hybrid top-10 p50/p99
without and with the filter, and ragmesh's p50 as a share of the peer's. A peer that cannot do a
step is reported with its error, and the other steps and engines still run.
"""
from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.search_bench import (
    CHUNKS_PER_DOC, DIM, GROUPS, TOP_K, WARMUP_QUERIES, RetrieverProcess, Section, SyntheticCorpus, TEN_PERCENT, channel,
    load, log, measure_searches, percentiles, timed_ms,
)
from ragmesh.v1 import retriever_pb2_grpc
from services.retriever.fusion import DEFAULT_RRF_K

PEER_QUERIES = {"LanceDB": None, "Milvus Lite": 30}  # None = as many as ragmesh; milvus-lite takes seconds a search
RRF_K = 60  # the peers' RRF constant: their defaults
FILTER_GROUP = "g0"  # the 10% filter, as TEN_PERCENT
Search = Callable[[str, np.ndarray, bool], int]  # (text, vector, filtered) -> hits


class PeerStepFailed(Exception):
    """A step a peer could not do; the report shows its error."""


def _rows(corpus: SyntheticCorpus, b: int, start: int) -> tuple[list[str], list[str], list[str], np.ndarray]:
    """(ids, groups, texts, vectors) of one batch, as the retriever gets them (same ids and groups)."""
    texts, vectors = corpus.texts(b, start), corpus.vectors(b, start)
    numbers = range(start, start + len(texts))
    ids = [f"d{i // CHUNKS_PER_DOC}#{i % CHUNKS_PER_DOC}" for i in numbers]
    groups = [f"g{(i // CHUNKS_PER_DOC) % GROUPS}" for i in numbers]
    return ids, groups, texts, vectors


class LanceDBPeer:
    name = "LanceDB"

    def __init__(self, folder: Path) -> None:
        import lancedb  # the peers extra: imported only when this part runs
        import pyarrow as pa
        from lancedb.rerankers import RRFReranker

        self.pa = pa
        self.reranker = RRFReranker(K=RRF_K)
        self.db = lancedb.connect(str(folder))
        self.schema = pa.schema([("id", pa.string()), ("group", pa.string()), ("text", pa.string()),
                                 ("vector", pa.list_(pa.float32(), DIM))])
        self.table = self.db.create_table("bench", schema=self.schema)

    def add(self, ids: list[str], groups: list[str], texts: list[str], vectors: np.ndarray) -> None:
        pa = self.pa
        self.table.add(pa.record_batch([
            pa.array(ids), pa.array(groups), pa.array(texts),
            pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)], schema=self.schema))

    def finish(self) -> None:
        self.table.create_fts_index("text")
        with warnings.catch_warnings():  # the older name still builds the same bitmap index
            warnings.simplefilter("ignore")
            self.table.create_scalar_index("group", index_type="BITMAP")

    def search(self, text: str, vector: np.ndarray, filtered: bool) -> int:
        query = self.table.search(query_type="hybrid").vector(vector).text(text)
        if filtered:
            query = query.where(f"`group` = '{FILTER_GROUP}'", prefilter=True)
        hits = query.rerank(self.reranker).limit(TOP_K).to_list()
        if filtered and any(h["group"] != FILTER_GROUP for h in hits):
            raise PeerStepFailed("a filtered search returned a row outside the filter")
        return len(hits)


class MilvusLitePeer:
    name = "Milvus Lite"

    def __init__(self, folder: Path) -> None:
        from pymilvus import AnnSearchRequest, DataType, Function, FunctionType, MilvusClient, RRFRanker

        self.request, self.ranker = AnnSearchRequest, RRFRanker(RRF_K)
        self.client = MilvusClient(str(folder / "peer.db"))
        s = self.client.create_schema(auto_id=False)
        s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        s.add_field("group", DataType.VARCHAR, max_length=16)
        s.add_field("text", DataType.VARCHAR, max_length=8192, enable_analyzer=True)
        s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        s.add_field("dense", DataType.FLOAT_VECTOR, dim=DIM)
        s.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"],
                                output_field_names=["sparse"]))
        params = self.client.prepare_index_params()
        params.add_index("dense", index_type="FLAT", metric_type="IP")
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self.client.create_collection("bench", schema=s, index_params=params)

    def add(self, ids: list[str], groups: list[str], texts: list[str], vectors: np.ndarray) -> None:
        self.client.insert("bench", [{"id": i, "group": g, "text": t, "dense": v}
                                     for i, g, t, v in zip(ids, groups, texts, vectors.tolist())])

    def finish(self) -> None:
        self.client.flush("bench")
        self.client.load_collection("bench")

    def search(self, text: str, vector: np.ndarray, filtered: bool) -> int:
        expr = f'group == "{FILTER_GROUP}"' if filtered else ""
        requests = [self.request([vector.tolist()], "dense", {"metric_type": "IP"}, TOP_K, expr=expr),
                    self.request([text], "sparse", {"metric_type": "BM25"}, TOP_K, expr=expr)]
        hits = self.client.hybrid_search("bench", requests, self.ranker, limit=TOP_K, output_fields=["group"])[0]
        if filtered and any(h["entity"]["group"] != FILTER_GROUP for h in hits):
            raise PeerStepFailed("a filtered search returned a row outside the filter")
        return len(hits)

    def close(self) -> None:
        self.client.close()


def _peer_load(peer, corpus: SyntheticCorpus) -> float:
    """chunks/s of adding the corpus and building the peer's indexes (generation not timed)."""
    seconds = 0.0
    for b, start in corpus.batch_sizes():
        rows = _rows(corpus, b, start)
        _, ms = timed_ms(peer.add, *rows)
        seconds += ms / 1000
    _, ms = timed_ms(peer.finish)
    return corpus.n_chunks / (seconds + ms / 1000)


def _peer_latencies(search: Search, queries: list[tuple[str, np.ndarray]], filtered: bool) -> np.ndarray:
    for text, vector in queries[:WARMUP_QUERIES]:
        search(text, vector, filtered)
    ms = []
    for text, vector in queries[WARMUP_QUERIES:]:
        hits, took = timed_ms(search, text, vector, filtered)
        if not hits:
            raise PeerStepFailed("a hybrid search returned no rows")
        ms.append(took)
    return np.array(ms)


def _ragmesh(corpus: SyntheticCorpus, queries: list[tuple[str, np.ndarray]]) -> dict[str, object]:
    """Load rate and hybrid latencies of a retriever process, the figures the ratios are taken to."""
    out: dict[str, object] = {}
    with RetrieverProcess({"FUSION": "rrf"}) as proc:  # the peers fuse by RRF: so does ragmesh here
        stub = retriever_pb2_grpc.RetrieverStub(channel(proc))
        out["load"] = corpus.n_chunks / load(stub, corpus)
        for filtered in (False, True):
            out[filtered] = measure_searches(stub, queries, TEN_PERCENT if filtered else None).client
    return out


def _step(results: dict[str, object], key: object, fn: Callable[[], object]) -> None:
    """Runs one step of a peer; a failure is kept as the step's result, to be reported."""
    try:
        results[key] = fn()
    except Exception as exc:  # a peer's own error, whatever its type, is a figure of this part
        log(f"peers: {key}: {exc!r}")
        results[key] = PeerStepFailed(f"{type(exc).__name__}: {str(exc)[:200]}")


def _run_peer(make: Callable[[Path], object], name: str, corpus: SyntheticCorpus,
              queries: list[tuple[str, np.ndarray]], folder: Path) -> dict[str, object]:
    results: dict[str, object] = {}
    _step(results, "peer", lambda: make(folder))
    peer = results["peer"]
    if isinstance(peer, PeerStepFailed):
        return {key: peer for key in ("load", False, True)}
    log(f"peers: loading {corpus.n_chunks:,} chunks into {name}")
    _step(results, "load", lambda: _peer_load(peer, corpus))
    limit = PEER_QUERIES[name]
    sample = queries if limit is None else queries[: WARMUP_QUERIES + limit]
    for filtered in (False, True):
        log(f"peers: {name}: {len(sample) - WARMUP_QUERIES} hybrid searches, filter {filtered}")
        _step(results, filtered, lambda f=filtered: _peer_latencies(peer.search, sample, f))
    if hasattr(peer, "close"):
        peer.close()
    return results


def _add(section: Section, name: str, results: dict[str, object], ours: dict[str, object]) -> None:
    load_rate = results["load"]
    if isinstance(load_rate, PeerStepFailed):
        section.add(f"load rate, {name}", "FAILED", note=str(load_rate))
    else:
        section.add(f"load rate, {name}", load_rate, "chunks/s",
                    note=f"ragmesh loads {ours['load'] / load_rate:.2g}x as fast" if name != "ragmesh" else "")
    for filtered in (False, True):
        label = ", 10% filter" if filtered else ""
        ms = results[filtered]
        if isinstance(ms, PeerStepFailed):
            section.add(f"hybrid p50 / p99{label}, {name}", "FAILED", note=str(ms))
            continue
        p50, p99 = percentiles(ms)
        note = f"{len(ms)} queries"
        if name != "ragmesh":
            note += f"; ragmesh p50 / this p50: {percentiles(ours[filtered])[0] / p50:.3g}"
        section.add(f"hybrid p50 / p99{label}, {name}", f"{p50:.1f} / {p99:.1f}", "ms", note=note)


PEERS: dict[str, Callable[[Path], object]] = {"LanceDB": LanceDBPeer, "Milvus Lite": MilvusLitePeer}


def run_peers(n_chunks: int, n_queries: int) -> Section:
    corpus = SyntheticCorpus(n_chunks)
    queries = corpus.queries(n_queries + WARMUP_QUERIES)
    section = Section(f"Peers side by side: {n_chunks:,} synthetic chunks, hybrid top-{TOP_K}, one run")
    log(f"peers: ragmesh ({n_chunks:,} chunks through gRPC)")
    ours = _ragmesh(corpus, queries)
    _add(section, "ragmesh", ours, ours)
    for name, make in PEERS.items():
        with tempfile.TemporaryDirectory(prefix="ragmesh-peers-") as tmp:
            _add(section, name, _run_peer(make, name, corpus, queries, Path(tmp)), ours)
    section.notes.append(f"ragmesh: a retriever process through gRPC (flat FAISS + BM25 + RRF k {DEFAULT_RRF_K}, the "
                         "query vector given); LanceDB and Milvus Lite embedded in this process (no network hop), exact "
                         f"vector search (no ANN index), full-text/BM25 over their own analyzers, RRF k {RRF_K}. A ratio below 1 "
                         "means ragmesh is faster. milvus-lite is a Python re-implementation of the Milvus server: "
                         "correct, not a Milvus server's speed.")
    return section
