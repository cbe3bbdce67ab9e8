"""The local embedding model through torch (sentence-transformers, float32 as shipped), the document
path the embedder took before (issue 37's "today": torch in bfloat16 on CPUs that multiply bf16 in
hardware, else ONNX Runtime float32) and the one it takes now (ONNX Runtime, int8 copy), side by side in
one run on the same SciFact texts: ingest throughput (chunk-sized texts, the batches the retriever
sends), how close the vectors are (cosine of each text's vectors), dense nDCG@10 on a SciFact slice
with each document encoder, and query throughput (one short text a call, as a question arrives).
The CPU time per chunk is printed too: on a shared machine it is steadier than the wall clock."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scifact_eval import SciFact, load_scifact, ndcg_at, subset
from bench.search_bench import Section, Target
from ragmesh.cpu_features import native_bf16
from services.embedder.backends.local import SentenceTransformersEmbedder
from services.embedder.backends.onnx import OnnxMiniLMEmbedder

CHUNK_CHARS = 800  # the user-document chunker's upper size
SPEED_UP_TARGET = 2.0  # issue 37: new document path / the previous one
COSINE_TARGET = 0.99
NDCG_BOUND = 0.005  # the new path's dense nDCG@10 within this of the previous one's


def _slice(scifact: Path, queries: int, documents: int) -> tuple[SciFact, list[str], list[str]]:
    """The first train queries, their judged abstracts and others up to `documents`, as chunk-sized texts
    (title and abstract cut at CHUNK_CHARS), and the query texts."""
    data = load_scifact(scifact)
    judged = subset(data, queries, 0)
    data = subset(data, queries, max(0, documents - len(judged.corpus)))
    docs = [(title + ". " + text)[:CHUNK_CHARS] for title, text in data.corpus.values()]
    return data, docs, list(data.queries.values())


def _timed(embed, texts: list[str], batch: int, task: str) -> tuple[np.ndarray, float, float]:
    """The vectors, texts per second (`batch` texts a call) and CPU milliseconds (this process, all
    threads) a text."""
    vectors = []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        vectors.append(embed(texts[start : start + batch], task))
    return np.concatenate(vectors), len(texts) / (time.perf_counter() - started), (time.process_time() - cpu) / len(texts) * 1000


def dense_ndcg(data: SciFact, documents: np.ndarray, queries: np.ndarray) -> float:
    """Mean nDCG@10 of exact dense search over the slice (one vector a document)."""
    ids = np.array(list(data.corpus))
    top = np.argsort(-(queries @ documents.T), axis=1)[:, :10]
    return float(np.mean([ndcg_at(list(ids[row]), data.qrels[qid]) for qid, row in zip(data.queries, top)]))


def run_embed(scifact: Path, quick: bool, questions: bool = True) -> Section:
    """The document paths' rows, then (with `questions`) the query runtimes'."""
    section = Section("Local embedding: document paths and query runtimes (all-MiniLM-L6-v2, same texts, one run)")
    data, docs, queries = _slice(scifact, 20 if quick else 300, 64 if quick else 1024)
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-onnx-") as cache:
        bf16 = native_bf16()
        before = OnnxMiniLMEmbedder(Path(cache), documents=SentenceTransformersEmbedder(64, bf16=True) if bf16 else None)
        started = time.perf_counter()
        before.warm_up()
        export_s = time.perf_counter() - started
        now = OnnxMiniLMEmbedder(Path(cache), int8_documents=True)
        now.warm_up()
        torch = SentenceTransformersEmbedder(batch_size=64)
        torch.warm_up()
        encoders = (("torch float32", torch), ("before", before), ("int8", now))
        runs = {name: _timed(backend.embed, docs, 64, "DOCUMENT") for name, backend in encoders}
        queries_run = {name: _timed(backend.embed, queries, 1, "QUERY") for name, backend in encoders[:2]} \
            if questions else {"before": (before.embed(queries, "QUERY"),)}
    before_name = "torch bf16 autocast" if bf16 else "ONNX Runtime float32"
    (reference, torch_docs, torch_cpu), (old, old_docs, old_cpu), (new, new_docs, new_cpu) = runs.values()
    query_vectors = queries_run["before"][0]  # the query path, unchanged: the same for every document encoder
    ndcg = {name: dense_ndcg(data, vectors, query_vectors) for name, (vectors, _, _) in runs.items()}
    section.add("ingest texts/s float32 / before / int8", f"{torch_docs:.1f} / {old_docs:.1f} / {new_docs:.1f}", "",
                note=f"{len(docs):,} SciFact abstracts cut at {CHUNK_CHARS} characters, 64 a call; before = "
                     f"{before_name} (this CPU {'multiplies' if bf16 else 'does not multiply'} bf16 natively)")
    section.add("ingest speed-up int8 / before", new_docs / old_docs, "x", Target(">=", SPEED_UP_TARGET))
    section.add("  CPU ms a text float32 / before / int8", f"{torch_cpu:.1f} / {old_cpu:.1f} / {new_cpu:.1f}", "",
                note=f"int8 / before {old_cpu / new_cpu:.2f}x: steadier than the wall clock on a shared machine")
    section.add("cosine int8 vs before, min", float((new * old).sum(axis=1).min()), "", Target(">=", COSINE_TARGET),
                note=f"mean {float((new * old).sum(axis=1).mean()):.5f}; vs float32: min "
                     f"{float((new * reference).sum(axis=1).min()):.5f}; before vs float32: min "
                     f"{float((old * reference).sum(axis=1).min()):.5f}")
    section.add("dense nDCG@10, |int8 - before|", abs(ndcg["int8"] - ndcg["before"]), "", Target("<=", NDCG_BOUND),
                note=f"float32 / before / int8: {ndcg['torch float32']:.4f} / "
                     f"{ndcg['before']:.4f} / {ndcg['int8']:.4f} ({len(queries)} train queries, exact search "
                     f"over the {len(docs):,} texts)")
    section.notes.append(f"ONNX export, fusion and quantization at first start: {export_s:.1f} s (cached "
                         f"afterwards; the image does it at build time).")
    if not questions:
        return section
    (torch_query_vectors, torch_queries, torch_query_cpu), (onnx_query_vectors, onnx_queries, onnx_query_cpu) = \
        queries_run.values()
    query_cosine = (onnx_query_vectors * torch_query_vectors).sum(axis=1)
    section.add("query embeddings/s torch / ONNX", f"{torch_queries:.1f} / {onnx_queries:.1f}", "",
                note=f"{len(queries):,} SciFact train queries, one a call")
    section.add("query speed-up ONNX / torch", onnx_queries / torch_queries, "x", Target(">=", 2.0))
    section.add("  CPU ms a query torch / ONNX", f"{torch_query_cpu:.1f} / {onnx_query_cpu:.1f}", "",
                note=f"ratio {torch_query_cpu / onnx_query_cpu:.2f}x (torch's OpenMP threads spin while they wait: "
                     f"when other processes hold the cores its wall clock and CPU both swell)")
    section.add("cosine ONNX vs torch, min, queries", float(query_cosine.min()), "", Target(">=", 0.999),
                note=f"mean {float(query_cosine.mean()):.7f} over {len(queries):,} texts, one a call as timed")
    return section


if __name__ == "__main__":  # the document paths' rows alone: python -m bench.embed_bench [--quick]
    import sys

    from bench.scifact_eval import DEFAULT_PATH
    from bench.search_bench import render

    print(render([run_embed(DEFAULT_PATH, "--quick" in sys.argv, questions=False)]))
