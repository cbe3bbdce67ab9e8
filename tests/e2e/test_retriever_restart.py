"""The retriever as its own process: a graceful restart loads the index snapshot, a
killed process (SIGKILL, mid bulk load) rebuilds from the store, and either way the
store and the indexes agree afterwards. No embedder runs: vectors come with Upsert. The test
calls as the gateway does, with the service token (made once under the process's DATA_DIR)
acting for tenant DEMO; Stats needs that service credential."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from deploy.run import wait_serving
from ragmesh import config
from ragmesh.identity.authenticator import service_token
from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.e2e.test_operators import free_port
from tests.stack import DEMO

pytestmark = pytest.mark.slow
DIM = 384


class RetrieverProcess:
    def __init__(self, data_dir: Path, name: str = "retriever") -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.env = {**os.environ, "DATA_DIR": str(data_dir), "RETRIEVER_PORT": str(self.port),
                    "RAGMESH_HOST": "127.0.0.1", "EMBEDDER_ADDR": f"127.0.0.1:{free_port()}",
                    "FOLLOW_INTERVAL_S": "0.2"}
        self.log = data_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        # The token the process will read from DATA_DIR/secrets (or SERVICE_TOKEN, when set): made here first.
        token = service_token(config.load().replace(host="127.0.0.1", data_dir=data_dir))
        self.metadata = bearer(token, DEMO, "tester")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "services.retriever"], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT)
        wait_serving(self.address, "retriever", self.proc, timeout=120)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def stub(self) -> retriever_pb2_grpc.RetrieverStub:
        return retriever_pb2_grpc.RetrieverStub(channel(self.address, self.metadata))


def upserts(docs: range, collection: str = "bulk", chunks_per_doc: int = 3) -> Iterator[retriever_pb2.UpsertRequest]:
    for d in docs:
        for i in range(chunks_per_doc):
            rng = np.random.default_rng(d * 100 + i)
            vector = rng.standard_normal(DIM).astype(np.float32)
            vector /= np.linalg.norm(vector)
            yield retriever_pb2.UpsertRequest(
                chunk=common_pb2.Chunk(chunk_id=f"{collection}/doc{d}#{i}", doc_id=f"doc{d}", collection=collection,
                                       text=f"document {d} part {i} about topic{d % 7} and theme{i}",
                                       metadata={"group": str(d % 3)}, date="2024-05-01"),
                vector=vector.tolist())


def search(stub: retriever_pb2_grpc.RetrieverStub) -> list[tuple[str, int, int]]:
    vector = next(upserts(range(3, 4))).vector
    reply = stub.Search(retriever_pb2.SearchRequest(query="topic3 theme0", query_vector=vector, top_k=20,
                                                    collections=["bulk"]), timeout=10)
    return [(h.chunk.chunk_id, h.dense_rank, h.sparse_rank) for h in reply.hits]


def store_and_index_agree(stub: retriever_pb2_grpc.RetrieverStub, data_dir: Path) -> int:
    """Every collection's store and index hold the same chunks, and no document is partial."""
    collections = stub.Stats(retriever_pb2.StatsRequest(), timeout=10).collections
    for info in collections:
        assert info.chunks == info.indexed_chunks, info
    with sqlite3.connect(data_dir / "ragmesh.sqlite3") as db:
        partial = db.execute(
            "SELECT d.doc_id FROM documents d LEFT JOIN chunks c USING (tenant, collection, doc_id) "
            "GROUP BY d.collection, d.doc_id HAVING COUNT(c.chunk_id) != MAX(d.chunk_count)").fetchall()
    assert not partial, f"documents with missing chunks: {partial[:5]}"
    return sum(info.chunks for info in collections)


def test_restart_uses_the_snapshot_and_a_kill_rebuilds_consistently(tmp_path: Path) -> None:
    retriever = RetrieverProcess(tmp_path)
    retriever.start()
    try:
        reply = retriever.stub().Upsert(upserts(range(60)), timeout=60)
        assert (reply.documents, reply.chunks, reply.rejected) == (60, 180, 0)
        hits = search(retriever.stub())
        assert hits[0] == ("bulk/doc3#0", 1, 1)
        assert retriever.stop() == 0

        retriever.start()
        assert "indexes loaded from snapshot" in retriever.log.read_text()
        assert search(retriever.stub()) == hits
        assert store_and_index_agree(retriever.stub(), tmp_path) == 180

        # Kill the process while a bulk load streams in: each batch is one store transaction.
        errors: list[Exception] = []

        def load() -> None:
            try:
                retriever.stub().Upsert(upserts(range(6000), "bulk2"), timeout=120)
            except grpc.RpcError as exc:
                errors.append(exc)

        loader = threading.Thread(target=load)
        loader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with sqlite3.connect(tmp_path / "ragmesh.sqlite3") as db:
                if db.execute("SELECT COUNT(*) FROM documents WHERE collection = 'bulk2'").fetchone()[0]:
                    break
            time.sleep(0.05)
        retriever.stop(signal.SIGKILL)
        loader.join(60)
        assert errors, "the load finished before the kill; the test proved nothing"

        retriever.start()
        log = retriever.log.read_text()
        assert log.count("indexes rebuilt from the store") == 2, "first start, then after the kill: a stale snapshot is never loaded"
        total = store_and_index_agree(retriever.stub(), tmp_path)
        assert 180 < total < 180 + 6000 * 3
        assert search(retriever.stub()) == hits, "the earlier documents rank as before"
    finally:
        if retriever.proc and retriever.proc.poll() is None:
            retriever.stop(signal.SIGKILL)


def test_an_unreachable_database_means_not_serving_not_a_crash(tmp_path: Path) -> None:
    """MongoDB is configured but nothing listens there: the retriever stays up, reports
    NOT_SERVING with a clear log line, keeps retrying, and still stops cleanly."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    retriever = RetrieverProcess(tmp_path)
    # A shared store needs a key pepper every process agrees on (refused at start-up without one).
    retriever.env |= {"MONGODB_URI": f"mongodb://app:secret@127.0.0.1:{free_port()}/", "MONGODB_TIMEOUT_MS": "200",
                      "API_KEY_PEPPER": "test-pepper"}
    with open(retriever.log, "ab") as log:
        retriever.proc = subprocess.Popen([sys.executable, "-m", "services.retriever"], env=retriever.env,
                                          stdout=log, stderr=subprocess.STDOUT)
    try:
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(retriever.address))
        status = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "warm-up failed" not in retriever.log.read_text():
            time.sleep(0.2)
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        log = retriever.log.read_text()
        assert "127.0.0.1" in log and "secret" not in log, "names the server, never the password"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "warm-up failed again" not in retriever.log.read_text():
            time.sleep(0.2)
        assert retriever.proc.poll() is None, "the process must not crash"
        assert "warm-up failed again" in retriever.log.read_text(), "it keeps retrying"
        assert retriever.stop() == 0
    finally:
        if retriever.proc.poll() is None:
            retriever.stop(signal.SIGKILL)


def test_two_retrievers_on_one_store_converge(tmp_path: Path) -> None:
    """Two replicas share one database: a write through either reaches the other's indexes
    through the store's change log, and both then answer a search identically."""
    a, b = RetrieverProcess(tmp_path, "a"), RetrieverProcess(tmp_path, "b")
    a.start()
    b.start()
    try:
        reply = a.stub().Upsert(upserts(range(40)), timeout=60)
        assert reply.documents == 40

        def converged() -> bool:
            sa, sb = (p.stub().Stats(retriever_pb2.StatsRequest(), timeout=5) for p in (a, b))
            counts = lambda s: sorted((c.name, c.chunks, c.indexed_chunks) for c in s.collections)  # noqa: E731
            return counts(sa) == counts(sb) and search(a.stub()) == search(b.stub())

        deadline = time.monotonic() + 30
        while not converged() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert converged(), "replica b never caught up with a's write"
        assert search(b.stub())[0][0] == "bulk/doc3#0"

        b.stub().Delete(retriever_pb2.DeleteRequest(collection="bulk", doc_ids=["doc3"]), timeout=10)
        deadline = time.monotonic() + 30
        while "bulk/doc3#0" in [h[0] for h in search(a.stub())] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "bulk/doc3#0" not in [h[0] for h in search(a.stub())], "a still returns a document b deleted"
        assert converged()
        assert "applied other writers' changes" in a.log.read_text()
    finally:
        for p in (a, b):
            if p.proc and p.proc.poll() is None:
                p.stop()
