"""Embedding backends: each turns a batch of texts into L2-normalised float32 vectors."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ragmesh.config import Settings


class EmbeddingBackend(Protocol):
    model_name: str
    dimensions: int
    max_batch: int
    # Calls the backend runs at once, each on its share of the cores (the batcher gives them to
    # different tenants); 1 = one at a time.
    lanes: int

    def warm_up(self) -> None:
        """Loads the model; called once before the service reports SERVING."""

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        """(len(texts), dimensions) float32, rows of unit length. task: QUERY, DOCUMENT or DOCUMENT_FAST (a
        document whose vector may come from the fastest document encoder, at cosine >= 0.99 to DOCUMENT's)."""


def create(settings: Settings) -> EmbeddingBackend:
    if settings.embed_backend == "local" and settings.embed_runtime == "onnx":
        from ragmesh.cpu_features import native_bf16
        from services.embedder.backends.local import SentenceTransformersEmbedder
        from services.embedder.backends.onnx import OnnxMiniLMEmbedder

        if settings.embed_documents_bf16 not in ("auto", "on", "off"):
            raise ValueError(f"EMBED_DOCUMENTS_BF16 must be auto, on or off, got {settings.embed_documents_bf16!r}")
        cache = Path(settings.model_cache_dir or settings.data_dir / "models")
        if settings.embed_documents_int8:
            return OnnxMiniLMEmbedder(cache, int8_documents=True)
        bf16 = settings.embed_documents_bf16 == "on" or (
            settings.embed_documents_bf16 == "auto" and native_bf16(cpu_class=settings.cpu_class))
        documents = SentenceTransformersEmbedder(settings.embed_batch_size, bf16=True) if bf16 else None
        return OnnxMiniLMEmbedder(cache, documents=documents)
    if settings.embed_backend == "local" and settings.embed_runtime == "torch":
        from services.embedder.backends.local import SentenceTransformersEmbedder

        return SentenceTransformersEmbedder(batch_size=settings.embed_batch_size)
    if settings.embed_backend == "local":
        raise ValueError(f"EMBED_RUNTIME must be 'onnx' or 'torch', got {settings.embed_runtime!r}")
    if settings.embed_backend == "gemini":
        from services.embedder.backends.gemini import GeminiEmbedder

        return GeminiEmbedder(settings.gemini_api_key, settings.gemini_base_url)
    raise ValueError(f"EMBED_BACKEND must be 'local' or 'gemini', got {settings.embed_backend!r}")
