"""Embedding at ingest: texts in batches of at most `batch_size` (the embedder's own limit,
e.g. Gemini's 100 a call, caps it at warm-up), each call retried with exponential backoff
when the embedder is unavailable or rate-limited. Other errors fail at once.

Conversation memory is embedded as DOCUMENT_FAST: the fastest document encoder (half the CPU of the
corpus's path, vectors at cosine >= 0.99 to it), for the turns that come without their question's vector
(the gateway sends one with nearly every turn); the corpus keeps DOCUMENT, the vectors its labelled
answers were checked on."""
from __future__ import annotations

import asyncio
import logging

import numpy as np

from ragmesh.errors import ResourceExhausted, Unavailable
from ragmesh.types import MEMORY_COLLECTION
from services.retriever.search import EmbedFn

log = logging.getLogger(__name__)

TRANSIENT = (Unavailable, ResourceExhausted)


def task_for(collection: str) -> str:
    """The embedding task of a collection's chunks."""
    return "DOCUMENT_FAST" if collection == MEMORY_COLLECTION else "DOCUMENT"


class BatchEmbedder:
    def __init__(self, embed: EmbedFn, batch_size: int = 64, retries: int = 4, backoff_s: float = 0.5) -> None:
        if batch_size < 1:
            raise ValueError(f"embedding batch size must be at least 1, got {batch_size}")
        self.embed = embed
        self.batch_size = batch_size
        self.retries = retries
        self.backoff_s = backoff_s

    async def __call__(self, texts: list[str], task: str = "DOCUMENT") -> np.ndarray:
        """(len(texts), dims) float32; texts must not be empty."""
        parts = [await self._call(texts[i : i + self.batch_size], task) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts)

    async def _call(self, batch: list[str], task: str) -> np.ndarray:
        for attempt in range(self.retries + 1):
            try:
                return await self.embed(batch, task)
            except TRANSIENT as exc:
                if attempt == self.retries:
                    raise
                delay = self.backoff_s * 2**attempt
                log.warning("embedding failed, retrying",
                            extra={"attempt": attempt + 1, "delay_s": delay, "error": str(exc)})
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")
