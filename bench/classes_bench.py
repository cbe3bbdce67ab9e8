"""This CPU's class beside the AVX2 class forced on it, in one run: the same work on processes started
each way (`ragmesh.cpu_features.avx2_environment()`), turn about, so a busy neighbour slows both alike.
Two runs back to back on a shared machine differ by more than the kernels do; turn about, they do not.

  search    two retrievers loaded with the same synthetic corpus; hybrid searches (query vector given)
            to one and the other in turn: client p50 and the server's dense and sparse p50, without and
            with the 10% filter
  encoders  two worker processes (`python -m bench.classes_bench`), each with the embedder's encoders
            as its class picks them: torch float32 (documents as shipped), the document path (torch bf16
            where the CPU multiplies bf16, else ONNX Runtime float32), the int8 copy (8-bit weights with
            VNNI, else 7-bit) and ONNX Runtime's query path; the same SciFact chunk texts sent to one and
            the other in turn: CPU milliseconds a text (the worker's, all its threads)

What forcing leaves as this machine has it (bench.machine.UNFORCED) is in the notes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.embed_bench import CHUNK_CHARS
from bench.machine import UNFORCED, machine
from bench.scifact_eval import load_scifact
from bench.search_bench import (
    REPO, TEN_PERCENT, WARMUP_QUERIES, RetrieverProcess, Section, SyntheticCorpus, channel, load, log, search_request,
    timed_ms,
)
from ragmesh.cpu_features import avx2_environment
from ragmesh.v1 import retriever_pb2_grpc

CLASSES = ("native", "avx2")
BATCH = 16  # texts a turn: the retriever's ingest batches are about this size
ENCODERS = ("torch float32", "document path", "int8 copy", "ONNX query")


def _environment(cpu_class: str) -> dict[str, str]:
    return avx2_environment() if cpu_class == "avx2" else {}


def run_classes(size: int, n_queries: int, scifact: Path, quick: bool) -> Section:
    if os.environ.get("CPU_CLASS") == "avx2":
        raise RuntimeError("classes: run the bench unforced (this part forces one side itself)")
    native = machine().cpu_class
    section = Section(f"Machine classes side by side: {native} against the AVX2 class forced on it, turn about")
    _search_rows(section, size, n_queries)
    _encoder_rows(section, scifact, 64 if quick else 320, 20 if quick else 100)
    section.notes.append(f"Forced: FAISS, numpy, OpenBLAS, torch (MKL, oneDNN) and the embedder's own choices. "
                         f"Not forced: {UNFORCED}.")
    return section


def _search_rows(section: Section, size: int, n_queries: int) -> None:
    corpus = SyntheticCorpus(size)
    queries = corpus.queries(n_queries + WARMUP_QUERIES)
    log(f"classes: two retrievers, {size:,} chunks each")
    with RetrieverProcess(_environment("native")) as one, RetrieverProcess(_environment("avx2")) as other:
        stubs = dict(zip(CLASSES, (retriever_pb2_grpc.RetrieverStub(channel(p)) for p in (one, other))))
        for stub in stubs.values():
            load(stub, corpus)
        for label, f in (("no filter", None), ("10% filter", TEN_PERCENT)):
            rows: dict[str, list[tuple[float, float, float]]] = {c: [] for c in CLASSES}
            for i, (text, vector) in enumerate(queries):
                request = search_request(text, vector, f)
                for cpu_class in CLASSES if i % 2 == 0 else CLASSES[::-1]:
                    reply, ms = timed_ms(stubs[cpu_class].Search, request, timeout=60)
                    if i >= WARMUP_QUERIES:
                        rows[cpu_class].append((ms, reply.timings.dense_ms, reply.timings.sparse_ms))
            p50 = {c: np.median(np.array(r), axis=0) for c, r in rows.items()}
            for k, what in enumerate(("hybrid p50 (client)", "  dense p50 (server)", "  sparse p50 (server)")):
                _ratio_row(section, f"search {size:,}, {label}: {what}", p50["native"][k], p50["avx2"][k], "ms",
                           f"{n_queries} queries on each, alternating")


def _ratio_row(section: Section, name: str, native: float, avx2: float, unit: str, note: str) -> None:
    section.add(name, f"{native:.2f} / {avx2:.2f} {unit}", "", note=f"native / AVX2 forced; AVX2 / native "
                f"{avx2 / native:.2f}x; {note}")


def _encoder_rows(section: Section, scifact: Path, n_docs: int, n_queries: int) -> None:
    data = load_scifact(scifact)
    docs = [(title + ". " + text)[:CHUNK_CHARS] for title, text in list(data.corpus.values())[:n_docs]]
    queries = list(data.queries.values())[:n_queries]
    log(f"classes: two encoder workers, {len(docs)} chunk texts and {len(queries)} queries each")
    workers = {c: _Worker(c, docs, queries) for c in CLASSES}
    try:
        paths = {c: w.start() for c, w in workers.items()}
        cpu_ms = {c: dict.fromkeys(ENCODERS, 0.0) for c in CLASSES}
        for encoder in ENCODERS:
            texts = len(queries) if encoder == "ONNX query" else len(docs)
            for i, start in enumerate(range(0, texts, BATCH)):
                for cpu_class in CLASSES if i % 2 == 0 else CLASSES[::-1]:
                    cpu_ms[cpu_class][encoder] += workers[cpu_class].time(encoder, start, start + BATCH) / texts
    finally:
        for worker in workers.values():
            worker.close()
    for encoder in ENCODERS:
        _ratio_row(section, f"CPU ms a text, {encoder}", cpu_ms["native"][encoder], cpu_ms["avx2"][encoder], "ms",
                   f"native: {paths['native'][encoder]}; AVX2: {paths['avx2'][encoder]}")


class _Worker:
    """A worker process of one class, spoken to in JSON lines over its stdin and stdout."""

    def __init__(self, cpu_class: str, docs: list[str], queries: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.classes_bench"], cwd=REPO, text=True,
                                     env=os.environ | _environment(cpu_class), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self._send({"docs": docs, "queries": queries})

    def _send(self, message: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"encoder worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def start(self) -> dict[str, str]:
        """Each encoder's path in this class (the worker has warmed them all up)."""
        return self._send({"paths": True})

    def time(self, encoder: str, start: int, end: int) -> float:
        """CPU milliseconds the worker spent encoding texts start:end with `encoder`."""
        return self._send({"encoder": encoder, "start": start, "end": end})["cpu_ms"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _serve() -> None:
    """The worker: builds the encoders as its class picks them, then times what it is asked to encode."""
    from ragmesh.cpu_features import has_vnni, native_bf16
    from services.embedder.backends.local import SentenceTransformersEmbedder
    from services.embedder.backends.onnx import OnnxMiniLMEmbedder

    texts = json.loads(sys.stdin.readline())
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-classes-") as cache:
        bf16 = native_bf16()
        torch_float32 = SentenceTransformersEmbedder(64)
        documents = OnnxMiniLMEmbedder(Path(cache), documents=SentenceTransformersEmbedder(64, bf16=True) if bf16
                                       else None)
        int8 = OnnxMiniLMEmbedder(Path(cache), int8_documents=True)
        for encoder in (torch_float32, documents, int8):
            encoder.warm_up()
        encoders = {"torch float32": (torch_float32, "DOCUMENT", "docs"),
                    "document path": (documents, "DOCUMENT", "docs"),
                    "int8 copy": (int8, "DOCUMENT", "docs"), "ONNX query": (documents, "QUERY", "queries")}
        paths = {"torch float32": "torch", "document path": "torch bf16" if bf16 else "ONNX Runtime float32",
                 "int8 copy": f"{8 if has_vnni() else 7}-bit weights", "ONNX query": "ONNX Runtime, one a call"}
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            asked = json.loads(line)
            if "paths" in asked:
                print(json.dumps(paths), flush=True)
                continue
            encoder, task, kind = encoders[asked["encoder"]]
            batch = texts[kind][asked["start"]:asked["end"]]
            cpu = time.process_time()
            for chunk in ([t] for t in batch) if task == "QUERY" else [batch]:  # questions come one a call
                encoder.embed(chunk, task)
            print(json.dumps({"cpu_ms": (time.process_time() - cpu) * 1000}), flush=True)


if __name__ == "__main__":
    _serve()
