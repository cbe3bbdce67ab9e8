"""`make run` on Milvus: `python -m deploy.run` with RETRIEVER_BACKEND=milvus and a milvus-lite file as
MILVUS_URI serves the whole stack from separate processes (the demo corpus loaded into Milvus, a
question answered with citations over the SSE bridge), and a stack restarted on the same files answers
alike, with nothing to index again."""
from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_operators import SERVICES, Running, _start, free_port, run_env

pytestmark = pytest.mark.slow


def milvus_env(data_dir: Path, ports: dict[str, int]) -> dict[str, str]:
    """`make run`'s on Milvus; the embedder with one model runtime (ONNX), as the in-process test stack:
    a second model (documents under torch bf16) loaded at each of the two starts tells nothing about Milvus."""
    return run_env(data_dir, ports) | {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": str(data_dir / "index.db"),
                                       "EMBED_DOCUMENTS_BF16": "off"}


def stop(running: Running) -> None:
    if running.proc.poll() is None:
        running.proc.send_signal(signal.SIGINT)
        running.proc.wait(60)


@pytest.fixture(scope="module")
def on_milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("milvus-run")
    ports = {name: free_port() for name in (*SERVICES, "http")}
    running = _start(milvus_env(data_dir, ports), data_dir, ports)
    try:
        yield running
    finally:
        stop(running)


def ask(running: Running, question: str) -> dict:
    reply = httpx.post(f"http://127.0.0.1:{running.ports['http']}/api/chat/ask", json={"question": question},
                       headers={"authorization": f"Bearer {running.key}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_whole_stack_answers_from_milvus(on_milvus: Running) -> None:
    assert (on_milvus.data_dir / "index.db").exists(), "the index lives in the milvus-lite file"
    body = ask(on_milvus, "When did Meridian close to new investors?")
    assert "March 2025" in body["answer"] or "1 March" in body["answer"]
    assert body["citations"] and body["meta"]["strategy"]["retrieval"] == "RAG_NEW_QUERY"


def test_a_restarted_stack_answers_alike_from_the_same_file(on_milvus: Running) -> None:
    before = ask(on_milvus, "Who left Northwind in early 2025?")
    stop(on_milvus)
    again = _start(milvus_env(on_milvus.data_dir, on_milvus.ports), on_milvus.data_dir, on_milvus.ports)
    try:
        assert "demo corpus: 0 documents indexed" in again.output, again.output
        after = ask(again, "Who left Northwind in early 2025?")
    finally:
        stop(again)
    assert [c["chunk_id"] for c in after["citations"]] == [c["chunk_id"] for c in before["citations"]]
    assert after["answer"] == before["answer"]
