"""The real embedder (local MiniLM) behind gRPC: concurrent Embed calls are micro-batched into fewer
model calls, and batching changes no caller's vector."""
from __future__ import annotations

import asyncio

import numpy as np

from ragmesh.cpu_features import native_bf16
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.app import LOCAL_SLICE_CHARS, EmbedderApp
from services.embedder.backends.local import SentenceTransformersEmbedder
from services.embedder.batcher import MicroBatcher
from tests.fakes.serving import serving, settings


def test_concurrent_embed_calls_share_model_calls_and_match_embedding_each_text_alone() -> None:
    app = EmbedderApp(settings(embed_backend="local"))
    texts = [f"question {i}: how does the {i % 7}th clause limit net exposure?" for i in range(32)]

    async def go() -> list[embedder_pb2.EmbedResponse]:
        async with serving(app) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            return await asyncio.gather(*(
                stub.Embed(embedder_pb2.EmbedRequest(texts=[t], task=embedder_pb2.QUERY), timeout=60)
                for t in texts))

    replies = asyncio.run(go())
    assert 1 <= app.batcher.batches < len(texts), app.batcher.batches
    for text, reply in zip(texts, replies):
        assert len(reply.vectors) == 1 and reply.dimensions == 384
        alone = app.backend.embed([text], "QUERY")[0]
        assert np.allclose(reply.vectors[0].values, alone, atol=1e-5), text



def test_two_tenants_documents_embedded_side_by_side_match_each_text_alone() -> None:
    """Two tenants' DOCUMENT calls run on the model at once (two lanes, each on its share of the cores):
    the shared model and tokenizer give every caller the vectors its texts get alone."""
    backend = SentenceTransformersEmbedder(bf16=native_bf16())
    backend.warm_up()
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=LOCAL_SLICE_CHARS, lanes=backend.lanes)
    long = [f"fund {i} cut its exposure to Brazil and raised duration; " * 30 for i in range(6)]
    short = [f"note {i}: Kestrel holds India at {i} percent." for i in range(12)]

    async def go() -> tuple[np.ndarray, list[np.ndarray]]:
        try:
            rival = asyncio.ensure_future(batcher.embed(long, "DOCUMENT", tenant="rival"))  # runs in slices
            while not batcher.batches:
                await asyncio.sleep(0.001)
            uploads = [await batcher.embed([t], "DOCUMENT", tenant="demo") for t in short]
            return await rival, uploads
        finally:
            await batcher.close()

    rival, uploads = asyncio.run(go())
    assert backend.lanes == 2 and batcher.batches > 2
    for text, row in zip(long + short, [*rival, *(u[0] for u in uploads)]):
        alone = backend.embed([text], "DOCUMENT")[0]
        assert float(np.dot(row, alone)) > 0.999, text
