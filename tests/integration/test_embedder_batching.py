"""The real embedder (local MiniLM) behind gRPC: concurrent Embed calls are micro-batched into fewer
model calls, and batching changes no caller's vector."""
from __future__ import annotations

import asyncio

import numpy as np

from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.app import EmbedderApp
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
