"""Embed, tried as an attacker would: one caller used to hand the embedder a 20 MB text (36 s of one
model call that every other tenant's question waited behind, 1.4 -> 4.1 GB kept), or 2,048 texts.
Now a call is bounded in texts, and a text and a call in characters, INVALID_ARGUMENT naming the
field and the limit, and what the platform itself sends (ingest batches of chunks, queries,
corrections) still fits. (A 20 MB text is refused at the edge: it is over GRPC_UNARY_MAX_BYTES.)"""
from __future__ import annotations

import dataclasses

import grpc
import pytest

from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.limits import CALL_CHARS, MAX_TEXTS, TEXT_CHARS, EmbedLimits
from tests.auth import channel
from tests.stack import Stack


def embed(stack: Stack, texts: list[str]) -> tuple[grpc.StatusCode, str, int]:
    """(code, details, vectors) of one Embed call with the service credential, as the retriever calls."""
    with channel(stack.address("embedder"), stack.service_metadata()) as ch:
        try:
            reply = embedder_pb2_grpc.EmbedderStub(ch).Embed(
                embedder_pb2.EmbedRequest(texts=texts, task=embedder_pb2.DOCUMENT), timeout=60)
            return grpc.StatusCode.OK, "", len(reply.vectors)
        except grpc.RpcError as exc:
            return exc.code(), exc.details(), 0


def test_one_huge_text_is_refused_naming_the_field_and_the_limit(stack: Stack) -> None:
    code, details, _ = embed(stack, ["short", "w " * 100_000])  # 200,000 characters, under the message limit
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("texts[1]: ") and f"{TEXT_CHARS:,}" in details and "EMBED_TEXT_MAX_CHARS" in details


def test_many_long_texts_in_one_call_are_refused_naming_the_call_limit(stack: Stack) -> None:
    texts = ["w " * (TEXT_CHARS // 2)] * (CALL_CHARS // TEXT_CHARS + 1)  # each allowed, together too much
    code, details, _ = embed(stack, texts)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("texts: ") and f"{CALL_CHARS:,}" in details and "EMBED_CALL_MAX_CHARS" in details


def test_thousands_of_short_texts_in_one_call_are_refused(stack: Stack) -> None:
    """2,048 short texts were one model call of 20 s on 2 cores, every question waiting behind it."""
    code, details, _ = embed(stack, [f"text {i}" for i in range(2048)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("texts: ") and f"at most {MAX_TEXTS} texts" in details


def test_what_the_platform_sends_still_fits(stack: Stack) -> None:
    s = stack.settings
    chunks = ["harbour " * (s.embed_max_chars // 8)] * s.embed_batch_size  # one ingest call
    assert embed(stack, chunks)[::2] == (grpc.StatusCode.OK, len(chunks))
    corrections = ["q" * 2000 + " " + "c" * 4000] * 13  # a question and the 12 corrections shortlisted
    assert embed(stack, corrections)[::2] == (grpc.StatusCode.OK, 13)


@pytest.mark.parametrize("embed_max_chars, batch, limits", [
    (800, 64, EmbedLimits(TEXT_CHARS, CALL_CHARS, MAX_TEXTS)),  # the defaults: above what the platform sends
    (8_000, 64, EmbedLimits(8_000, 512_000, 64)),  # Gemini's 2,048-token chunks: an ingest call still fits
    (16_000, 100, EmbedLimits(16_000, 1_600_000, 100)),
    (800, 16, EmbedLimits(TEXT_CHARS, CALL_CHARS, MAX_TEXTS)),
])
def test_the_defaults_follow_what_ingest_sends(stack: Stack, embed_max_chars: int, batch: int,
                                              limits: EmbedLimits) -> None:
    settings = stack.settings.replace(embed_max_chars=embed_max_chars, embed_batch_size=batch,
                                      embed_text_max_chars=None, embed_call_max_chars=None)
    assert EmbedLimits.from_settings(settings) == limits
    raised = settings.replace(embed_text_max_chars=50_000, embed_call_max_chars=2_000_000)
    assert EmbedLimits.from_settings(raised) == dataclasses.replace(limits, text_chars=50_000, call_chars=2_000_000)
