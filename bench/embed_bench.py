"""The local embedding model through torch (sentence-transformers, float32 as shipped) and as the
embedder runs it by default (ONNX Runtime; documents through torch in bfloat16 on CPUs that multiply
bf16 in hardware), side by side in one run on the same SciFact texts: ingest throughput (chunk-sized
texts, the batches the retriever sends), query throughput (one short text a call, as a question
arrives) and how close the vectors are (cosine of each text's two vectors, documents and queries).
The CPU time per chunk is printed too: on a shared machine it is steadier than the wall clock."""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.search_bench import Section, Target
from services.embedder.backends.local import SentenceTransformersEmbedder, native_bf16
from services.embedder.backends.onnx import OnnxMiniLMEmbedder

CHUNK_CHARS = 800  # the user-document chunker's upper size


def _texts(scifact: Path, documents: int) -> tuple[list[str], list[str]]:
    """Chunk-sized abstracts and the train queries."""
    with open(scifact / "corpus.jsonl") as fh:
        docs = [(d.get("title", "") + ". " + d["text"])[:CHUNK_CHARS]
                for d in (json.loads(line) for line, _ in zip(fh, range(documents)))]
    with open(scifact / "queries_train.jsonl") as fh:
        queries = [json.loads(line)["text"] for line in fh]
    return docs, queries


def _timed(embed, texts: list[str], batch: int, task: str) -> tuple[np.ndarray, float, float]:
    """The vectors, texts per second (`batch` texts a call) and CPU milliseconds (this process, all
    threads) a text."""
    vectors = []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        vectors.append(embed(texts[start : start + batch], task))
    return np.concatenate(vectors), len(texts) / (time.perf_counter() - started), (time.process_time() - cpu) / len(texts) * 1000


def run_embed(scifact: Path, quick: bool) -> Section:
    section = Section("Local embedding: torch vs ONNX Runtime (all-MiniLM-L6-v2, same texts, one run)")
    docs, queries = _texts(scifact, 64 if quick else 1024)
    queries = queries[: 20 if quick else 300]
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-onnx-") as cache:
        bf16 = native_bf16()
        onnx = OnnxMiniLMEmbedder(Path(cache), documents=SentenceTransformersEmbedder(64, bf16=True) if bf16 else None)
        started = time.perf_counter()
        onnx.warm_up()
        export_s = time.perf_counter() - started
        torch = SentenceTransformersEmbedder(batch_size=64)
        torch.warm_up()
        runs = {name: (_timed(backend.embed, docs, 64, "DOCUMENT"), _timed(backend.embed, queries, 1, "QUERY"))
                for name, backend in (("torch", torch), ("onnx", onnx))}
    # The cosines compare the vectors the timed calls returned: queries as they were embedded, one a call.
    ((torch_vectors, torch_docs, torch_cpu), (torch_query_vectors, torch_queries, torch_query_cpu)) = runs["torch"]
    ((onnx_vectors, onnx_docs, onnx_cpu), (onnx_query_vectors, onnx_queries, onnx_query_cpu)) = runs["onnx"]
    cosine = (onnx_vectors * torch_vectors).sum(axis=1)
    query_cosine = (onnx_query_vectors * torch_query_vectors).sum(axis=1)
    section.add("ingest texts/s torch / ONNX", f"{torch_docs:.1f} / {onnx_docs:.1f}", "",
                note=f"{len(docs):,} SciFact abstracts cut at {CHUNK_CHARS} characters, 64 a call; documents "
                     f"{'in bf16 (this CPU multiplies bf16 natively)' if bf16 else 'through ONNX Runtime (no native bf16)'}")
    section.add("ingest speed-up ONNX / torch", onnx_docs / torch_docs, "x", Target(">=", 2.0))
    section.add("  CPU ms a text torch / ONNX", f"{torch_cpu:.1f} / {onnx_cpu:.1f}", "",
                note=f"ratio {torch_cpu / onnx_cpu:.2f}x: steadier than the wall clock on a shared machine")
    section.add("query embeddings/s torch / ONNX", f"{torch_queries:.1f} / {onnx_queries:.1f}", "",
                note=f"{len(queries):,} SciFact train queries, one a call")
    section.add("query speed-up ONNX / torch", onnx_queries / torch_queries, "x", Target(">=", 2.0))
    section.add("  CPU ms a query torch / ONNX", f"{torch_query_cpu:.1f} / {onnx_query_cpu:.1f}", "",
                note=f"ratio {torch_query_cpu / onnx_query_cpu:.2f}x (torch's OpenMP threads spin while they wait: "
                     f"when other processes hold the cores its wall clock and CPU both swell)")
    section.add("cosine ONNX vs torch, min, documents", float(cosine.min()), "", Target(">=", 0.999),
                note=f"mean {float(cosine.mean()):.7f} over {len(docs):,} texts")
    section.add("cosine ONNX vs torch, min, queries", float(query_cosine.min()), "", Target(">=", 0.999),
                note=f"mean {float(query_cosine.mean()):.7f} over {len(queries):,} texts, one a call as timed")
    section.notes.append(f"ONNX export and fusion at first start: {export_s:.1f} s (cached afterwards; the "
                         f"image does it at build time).")
    return section
