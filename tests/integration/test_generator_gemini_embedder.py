"""The embedder's Gemini backend (EMBED_BACKEND=gemini) through a real Embedder gRPC server,
the real google-genai SDK and the fake Gemini server: model, dimensions, task types,
batches of at most 100, unit-length vectors, and provider errors as status codes."""
from __future__ import annotations

import asyncio

import grpc
import httpx
import numpy as np
import pytest

from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.app import EmbedderApp
from tests.fakes.gemini import FakeGemini, fake_vector
from tests.fakes.serving import serving, settings


def embedder(fake: FakeGemini) -> EmbedderApp:
    """EMBED_BATCH_SIZE 150 lets one Embed call carry 150 texts, so the backend's own split into
    requests of 100 (the API's limit) shows."""
    return EmbedderApp(settings(embed_backend="gemini", gemini_api_key="test-key", gemini_base_url=fake.url,
                                embed_batch_size=150))


def test_embeds_in_batches_of_100_with_task_types_and_unit_length_768_dim_vectors(fake_gemini: FakeGemini) -> None:
    texts = [f"chunk number {i}" for i in range(150)]

    async def go() -> tuple[embedder_pb2.InfoResponse, embedder_pb2.EmbedResponse, embedder_pb2.EmbedResponse]:
        async with serving(embedder(fake_gemini)) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            info = await stub.Info(embedder_pb2.InfoRequest())
            docs = await stub.Embed(embedder_pb2.EmbedRequest(texts=texts, task=embedder_pb2.DOCUMENT))
            query = await stub.Embed(embedder_pb2.EmbedRequest(texts=["net exposure"], task=embedder_pb2.QUERY))
            return info, docs, query

    info, docs, query = asyncio.run(go())
    assert (info.model, info.dimensions, info.backend, info.max_batch) == (
        "gemini-embedding-001", 768, "GeminiEmbedder", 100)
    assert docs.model == "gemini-embedding-001" and docs.dimensions == 768

    vectors = np.array([v.values for v in docs.vectors])
    assert vectors.shape == (150, 768)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    raw = np.array(fake_vector(texts[42], 768))
    assert np.allclose(vectors[42], raw / np.linalg.norm(raw), atol=1e-5), "in order, and the fake's vector"

    batches = fake_gemini.requests("batchEmbedContents")
    assert [len(r.body["requests"]) for r in batches] == [100, 50, 1]
    assert all(r.path.endswith("/models/gemini-embedding-001:batchEmbedContents") for r in batches)
    first = batches[0].body["requests"][0]
    assert first["taskType"] == "RETRIEVAL_DOCUMENT" and first["outputDimensionality"] == 768
    assert first["content"]["parts"] == [{"text": "chunk number 0"}]
    assert batches[2].body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert batches[0].headers["x-goog-api-key"] == "test-key"


@pytest.mark.parametrize("status, code", [(429, grpc.StatusCode.RESOURCE_EXHAUSTED),
                                          (401, grpc.StatusCode.FAILED_PRECONDITION)])
def test_provider_errors_become_status_codes(fake_gemini: FakeGemini, status: int, code: grpc.StatusCode) -> None:
    fake_gemini.error(status, "no embeddings for you", retry_delay="3s", rpc="batchEmbedContents")

    async def go() -> None:
        async with serving(embedder(fake_gemini)) as channel:
            await embedder_pb2_grpc.EmbedderStub(channel).Embed(embedder_pb2.EmbedRequest(texts=["x"]))

    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(go())
    assert info.value.code() == code and "no embeddings for you" in info.value.details()


def test_the_gemini_backend_needs_a_key() -> None:
    with pytest.raises(ValueError, match="GEMINI_API_KEY"):
        EmbedderApp(settings(embed_backend="gemini"))


def test_the_fake_also_serves_the_single_text_embed_content_endpoint(fake_gemini: FakeGemini) -> None:
    """For REST clients and older SDKs, which call :embedContent one text at a time."""
    reply = httpx.post(f"{fake_gemini.url}/v1beta/models/gemini-embedding-001:embedContent",
                       json={"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 8})
    assert reply.json() == {"embedding": {"values": fake_vector("hello", 8)}}
