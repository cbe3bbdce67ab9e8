"""`Retriever/Ingest` over gRPC embeds a stream's documents in shared calls, and keeps the embedder fed:
a real retriever calls a real Embedder server (its batcher and slicing as configured for the local
model) whose fake model runs a call only when the test lets it, so what is asserted is which texts each
model call carried and what was waiting while one ran, never how fast."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from ragmesh.identity.authenticator import service_token
from ragmesh.serving import ServiceHost
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from services.embedder.app import EmbedderApp
from services.retriever.ingest.pipeline import CALLS_AHEAD, GROUP_CHARS
from services.retriever.app import RetrieverApp
from tests.auth import aio_channel, bearer
from tests.fakes.serving import settings
from tests.security.test_embed_fairness import until

DOCUMENTS = 30
TEXT_CHARS = 700  # one chunk each (CHUNK_MAX_CHARS 800): five fill a group of GROUP_CHARS


class GatedModel:
    """Records each model call's texts; the first waits until the test opens the gate."""

    model_name = "gated"
    dimensions = 4
    max_batch = 256
    lanes = 1

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()

    def warm_up(self) -> None:
        pass

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        self.calls.append(list(texts))
        assert self.gate.wait(30), "the test never opened the gate"
        vectors = np.ones((len(texts), self.dimensions), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def document(i: int) -> retriever_pb2.Document:
    text = f"Document {i:02d} about the harbour. " + " ".join(f"word{i}x{j}" for j in range(200))
    return retriever_pb2.Document(doc_id=f"d{i:02d}", collection="shared_calls", text=text[:TEXT_CHARS].strip() + ".",
                                  summarize=False)


def test_streamed_documents_share_embedding_calls_and_the_next_calls_wait_while_one_runs(tmp_path: Path) -> None:
    s = settings(data_dir=tmp_path, embed_backend="local", retriever_backend="memory")
    model = GatedModel()
    embedder_app = EmbedderApp(s, model)

    async def go() -> None:
        embedder = ServiceHost(embedder_app, s, 0, grace=0.5)
        await embedder.start()
        r = s.replace(embedder_addr=embedder.address)
        retriever = ServiceHost(RetrieverApp(r), r, 0, grace=0.5)
        await retriever.start()
        try:
            async with aio_channel(retriever.address, bearer(service_token(s), "demo", "ana")) as channel:
                async def sent() -> AsyncIterator[retriever_pb2.Document]:
                    for i in range(DOCUMENTS):
                        yield document(i)

                async def ingest() -> list[retriever_pb2.IngestProgress]:
                    stream = retriever_pb2_grpc.RetrieverStub(channel).Ingest(sent(), timeout=60)
                    return [p async for p in stream]

                ingesting = asyncio.create_task(ingest())
                # While the first model call runs, the stream reads on: its next calls wait at the embedder.
                group = GROUP_CHARS // TEXT_CHARS
                await until(lambda: model.calls and embedder_app.batcher.waiting == CALLS_AHEAD * group,
                            "the stream's next embedding calls queued while the first ran")
                await asyncio.sleep(0.2)
                assert len(model.calls) == 1 and embedder_app.batcher.waiting == CALLS_AHEAD * group, \
                    "and no more: a stream keeps CALLS_AHEAD calls waiting"
                model.gate.set()
                progress = await asyncio.wait_for(ingesting, 60)
        finally:
            model.gate.set()
            await retriever.stop()
            await embedder.stop()

        indexed = {p.doc_id for p in progress if p.stage == retriever_pb2.INDEXED}
        assert indexed == {f"d{i:02d}" for i in range(DOCUMENTS)}
        texts = [t for call in model.calls for t in call]
        assert len(texts) == len(set(texts)) == DOCUMENTS  # each document's chunk embedded once
        # Shared calls: several documents a call (a document not at hand within NEXT_AT_HAND_S may go
        # alone), the first within one slice for a tenant alone, so it was not cut into a slice and a
        # tail; and the calls that waited together ran together.
        assert len(model.calls) <= DOCUMENTS / 3, [len(c) for c in model.calls]
        assert len(model.calls[0]) == group and sum(map(len, model.calls[0])) <= GROUP_CHARS
        assert len(model.calls[1]) == CALLS_AHEAD * group, [len(c) for c in model.calls]

    asyncio.run(go())
