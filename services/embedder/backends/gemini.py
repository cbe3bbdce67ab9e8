"""Gemini `gemini-embedding-001` through google-genai: 768 dimensions (output_dimensionality),
RETRIEVAL_QUERY / RETRIEVAL_DOCUMENT task types, at most 100 texts a request. Vectors
truncated below the model's 3072 dimensions are not unit length, so they are normalised
here: the retriever's inner-product search assumes cosine."""
from __future__ import annotations

import numpy as np

from ragmesh.errors import Unavailable
from ragmesh.provider_errors import gemini_error

TASK_TYPES = {"QUERY": "RETRIEVAL_QUERY", "DOCUMENT": "RETRIEVAL_DOCUMENT", "DOCUMENT_FAST": "RETRIEVAL_DOCUMENT"}


class GeminiEmbedder:
    model_name = "gemini-embedding-001"
    dimensions = 768
    max_batch = 100  # the API's limit per batchEmbedContents request
    lanes = 1  # no slicing either: the time is spent on Google's machines

    def __init__(self, api_key: str, base_url: str = "") -> None:
        if not api_key:
            raise ValueError("EMBED_BACKEND=gemini needs GEMINI_API_KEY")
        self.api_key = api_key
        self.base_url = base_url
        self._client = None

    def warm_up(self) -> None:
        """Builds the client; no request, so start-up spends no quota and needs no network."""
        from google import genai
        from google.genai import types

        options = types.HttpOptions(base_url=self.base_url or None)
        self._client = genai.Client(api_key=self.api_key, http_options=options)

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        from google.genai import types

        if self._client is None:
            raise RuntimeError("embedder used before warm_up()")
        config = types.EmbedContentConfig(task_type=TASK_TYPES[task], output_dimensionality=self.dimensions)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.max_batch):
            try:
                reply = self._client.models.embed_content(
                    model=self.model_name, contents=texts[start : start + self.max_batch], config=config,
                )
            except Exception as exc:
                error = gemini_error(exc)
                if error is None:
                    raise
                raise error from exc
            rows += [e.values or [] for e in reply.embeddings or []]
        if len(rows) != len(texts) or any(len(r) != self.dimensions for r in rows):
            raise Unavailable(f"gemini returned {len(rows)} vectors for {len(texts)} texts, or of the wrong size")
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dimensions)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)
