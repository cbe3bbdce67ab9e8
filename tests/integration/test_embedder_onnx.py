"""The ONNX Runtime embedder gives the vectors sentence-transformers gives (the index holds vectors
made by either), exported from the packaged weights once and reused from its cache."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from ragmesh import config
from services.embedder import backends
from services.embedder.backends.local import SentenceTransformersEmbedder, native_bf16
from services.embedder.backends.onnx import OnnxMiniLMEmbedder

SCIFACT = Path(__file__).parents[3] / "shared" / "data" / "scifact" / "corpus.jsonl"


def _texts() -> list[str]:
    """Short and long texts (past the model's 256-token limit, so truncation must match too)."""
    texts = ["net exposure", "Who manages Kestrel?", "", "ünïcödé ⟨text⟩ — with symbols & 数字 123",
             "word " * 600]
    if SCIFACT.exists():
        with SCIFACT.open() as f:
            texts += [json.loads(next(f))["text"] for _ in range(40)]
    return texts


@pytest.fixture(scope="module")
def onnx_embedder(tmp_path_factory: pytest.TempPathFactory) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(tmp_path_factory.mktemp("models"))
    embedder.warm_up()
    return embedder


def test_onnx_vectors_match_sentence_transformers(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    torch_embedder = SentenceTransformersEmbedder()
    torch_embedder.warm_up()
    texts = _texts()
    ours, theirs = onnx_embedder.embed(texts, "DOCUMENT"), torch_embedder.embed(texts, "DOCUMENT")
    assert ours.shape == theirs.shape == (len(texts), 384) and ours.dtype == np.float32
    cosine = (ours * theirs).sum(axis=1)
    assert cosine.min() >= 0.9999, cosine.min()
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # Rows come back in the caller's order whatever the length sort inside.
    assert np.allclose(onnx_embedder.embed(texts[::-1], "QUERY")[::-1], ours, atol=1e-5)
    assert onnx_embedder.embed([], "QUERY").shape == (0, 384)


def test_the_export_is_cached_and_reused(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    exported = list(onnx_embedder.cache_dir.glob("*.onnx"))
    assert len(exported) == 1 and not list(onnx_embedder.cache_dir.glob("tmp*")), exported
    stamp = exported[0].stat().st_mtime_ns
    again = OnnxMiniLMEmbedder(onnx_embedder.cache_dir)
    again.warm_up()
    assert exported[0].stat().st_mtime_ns == stamp  # not exported a second time
    assert np.allclose(again.embed(["net exposure"], "QUERY"), onnx_embedder.embed(["net exposure"], "QUERY"))


def test_the_runtime_is_chosen_by_settings(tmp_path: Path) -> None:
    base = dataclasses.replace(config.load(), data_dir=tmp_path, embed_backend="local", model_cache_dir="")
    chosen = backends.create(dataclasses.replace(base, embed_runtime="onnx"))
    assert isinstance(chosen, OnnxMiniLMEmbedder) and chosen.cache_dir == tmp_path / "models"
    assert isinstance(backends.create(dataclasses.replace(base, embed_runtime="torch")), SentenceTransformersEmbedder)
    with pytest.raises(ValueError, match="EMBED_RUNTIME must be 'onnx' or 'torch'"):
        backends.create(dataclasses.replace(base, embed_runtime="tensorrt"))


@pytest.mark.skipif(not native_bf16(), reason="documents run in bf16 only on CPUs that multiply bf16 in hardware")
def test_documents_in_bf16_stay_within_the_cosine_bound(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    mixed = OnnxMiniLMEmbedder(onnx_embedder.cache_dir, documents=SentenceTransformersEmbedder(bf16=True))
    mixed.warm_up()
    float32 = SentenceTransformersEmbedder()
    float32.warm_up()
    texts = _texts()
    ours, theirs = mixed.embed(texts, "DOCUMENT"), float32.embed(texts, "DOCUMENT")
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert (ours * theirs).sum(axis=1).min() >= 0.999
    assert not np.array_equal(ours, theirs), "the documents did not go through bf16"
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(mixed.embed(texts[:3], "QUERY"), onnx_embedder.embed(texts[:3], "QUERY")), \
        "queries stay on ONNX Runtime"


def test_bf16_documents_follow_the_setting_and_the_cpu(tmp_path: Path) -> None:
    base = dataclasses.replace(config.load(), embed_backend="local", embed_runtime="onnx", model_cache_dir=str(tmp_path))
    assert backends.create(dataclasses.replace(base, embed_documents_bf16="off")).documents is None
    on = backends.create(dataclasses.replace(base, embed_documents_bf16="on")).documents
    assert isinstance(on, SentenceTransformersEmbedder) and on.bf16
    assert (backends.create(base).documents is not None) == native_bf16()
    with pytest.raises(ValueError, match="EMBED_DOCUMENTS_BF16"):
        backends.create(dataclasses.replace(base, embed_documents_bf16="maybe"))
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert not native_bf16(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16\n")
    assert native_bf16(cpuinfo)
