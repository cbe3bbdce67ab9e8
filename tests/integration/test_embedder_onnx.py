"""The ONNX Runtime embedder gives the vectors sentence-transformers gives (the index holds vectors
made by either), exported from the packaged weights once and reused from its cache."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ragmesh import config
from ragmesh.cpu_features import has_vnni, native_bf16
from services.embedder import backends
from services.embedder.backends.local import SentenceTransformersEmbedder
from services.embedder.backends.cores import CoreShare
from services.embedder.backends.onnx import (DOCUMENT_INPUTS, DOCUMENT_UNFUSED, QUANT_BLOCK, SHORT_RUN_TOKENS,
                                             OnnxMiniLMEmbedder, quantize_weights)

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
    assert cosine.min() >= 0.999, cosine.min()  # short texts run on the 8-bit copy (the next test)
    assert cosine[[len(onnx_embedder._tokenizer.encode(text).ids) > SHORT_RUN_TOKENS for text in texts]].min() >= 0.9999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # Rows come back in the caller's order whatever the length sort inside.
    assert np.allclose(onnx_embedder.embed(texts[::-1], "QUERY")[::-1], ours, atol=1e-5)
    assert onnx_embedder.embed([], "QUERY").shape == (0, 384)


class _RunLog:
    """Stands in for a session and records which model each run went to, its texts and tokens."""

    def __init__(self, session, name: str, runs: list[tuple[str, int, int]]) -> None:  # noqa: ANN001 - an ORT session
        self.session, self.name, self.runs = session, name, runs

    def run(self, outputs, feed):  # noqa: ANN001 - as InferenceSession.run
        self.runs.append((self.name, *feed["input_ids"].shape[:1], feed["input_ids"].size))
        return self.session.run(outputs, feed)


def test_short_texts_go_to_the_8_bit_copy_within_the_cosine_bound(onnx_embedder: OnnxMiniLMEmbedder,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    torch_embedder = SentenceTransformersEmbedder()
    torch_embedder.warm_up()
    runs: list[tuple[str, int, int]] = []
    monkeypatch.setattr(onnx_embedder, "_short", _RunLog(onnx_embedder._short, "8-bit", runs))
    monkeypatch.setattr(onnx_embedder, "_session", _RunLog(onnx_embedder._session, "float32", runs))
    texts = _texts()
    tokens = {text: len(onnx_embedder._tokenizer.encode(text).ids) for text in texts}
    short = [text for text in texts if tokens[text] <= SHORT_RUN_TOKENS]
    assert 4 <= len(short) < len(texts)
    alone = np.concatenate([onnx_embedder.embed([text], "QUERY") for text in short])
    assert [name for name, *_ in runs] == ["8-bit"] * len(short)
    assert alone.shape == (len(short), 384) and alone.dtype == np.float32
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    assert (alone * torch_embedder.embed(short, "QUERY")).sum(axis=1).min() >= 0.999
    # A batch of short and long texts: each on the model for its own length, so the short ones get the
    # vectors they get alone (the embedder batches concurrent questions), the long ones float32's.
    runs.clear()
    batched = onnx_embedder.embed(texts, "QUERY")
    assert np.allclose(batched[[texts.index(text) for text in short]], alone, atol=1e-5)
    assert (batched * torch_embedder.embed(texts, "QUERY")).sum(axis=1)[
        [tokens[text] > SHORT_RUN_TOKENS for text in texts]].min() >= 0.9999
    assert {name for name, *_ in runs} == {"8-bit", "float32"}
    assert all(size <= SHORT_RUN_TOKENS for name, _, size in runs if name == "8-bit"), runs
    assert sum(rows for name, rows, _ in runs if name == "8-bit") == len(short)
    # The limit counts tokens with [CLS] and [SEP]; short texts share a run while it stays within it.
    runs.clear()
    for batch in (["word " * (SHORT_RUN_TOKENS - 2)], ["word " * (SHORT_RUN_TOKENS - 1)], ["word " * 30] * 3):
        onnx_embedder.embed(batch, "QUERY")
    assert runs == [("8-bit", 1, SHORT_RUN_TOKENS), ("float32", 1, SHORT_RUN_TOKENS + 1),
                    ("8-bit", 2, SHORT_RUN_TOKENS), ("8-bit", 1, SHORT_RUN_TOKENS // 2)]


def test_8_bit_weights_multiply_as_the_float32_ones() -> None:
    """The block quantization stores what MatMulNBits reads (zero point 128, a scale per block): a
    MatMul by a constant weight gives the same product after quantize_weights, within int8's step."""
    onnxruntime = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    rows, inputs, outputs = 5, 3 * QUANT_BLOCK + 7, 48  # inputs not a whole number of blocks
    weight = rng.standard_normal((inputs, outputs)).astype(np.float32)
    weight[:, 3] = 0.0  # a column of zeros: a zero scale must not divide by zero
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="product")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inputs])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, outputs])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    quantize_weights(model)
    assert [node.op_type for node in model.graph.node] == ["MatMulNBits"]
    assert "w" not in {tensor.name for tensor in model.graph.initializer}  # the float32 weight is gone
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    product, exact = session.run(None, {"x": x})[0], x @ weight
    cosine = (product * exact).sum(axis=1) / np.linalg.norm(product, axis=1) / np.linalg.norm(exact, axis=1)
    assert cosine.min() >= 0.999, cosine
    assert np.abs(product[:, 3]).max() == 0.0


def test_the_export_is_cached_and_reused(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    exported = sorted(onnx_embedder.cache_dir.glob("*.onnx"))
    assert len(exported) == 3 and not list(onnx_embedder.cache_dir.glob("tmp*")), exported
    # the int8 copy for documents and the 8-bit one for short texts beside the float32 model
    assert exported[0].name.endswith(f"-documents-{'int8' if has_vnni() else 'int7'}.onnx")
    assert exported[1].name.endswith("-q8.onnx")
    stamps = [path.stat().st_mtime_ns for path in exported]
    again = OnnxMiniLMEmbedder(onnx_embedder.cache_dir)
    again.warm_up()
    assert [path.stat().st_mtime_ns for path in exported] == stamps  # not exported a second time
    assert np.allclose(again.embed(["net exposure"], "QUERY"), onnx_embedder.embed(["net exposure"], "QUERY"))


def test_the_runtime_is_chosen_by_settings(tmp_path: Path) -> None:
    base = config.load().replace(data_dir=tmp_path, embed_backend="local", model_cache_dir="")
    chosen = backends.create(base.replace(embed_runtime="onnx"))
    assert isinstance(chosen, OnnxMiniLMEmbedder) and chosen.cache_dir == tmp_path / "models"
    assert isinstance(backends.create(base.replace(embed_runtime="torch")), SentenceTransformersEmbedder)
    with pytest.raises(ValueError, match="EMBED_RUNTIME must be 'onnx' or 'torch'"):
        backends.create(base.replace(embed_runtime="tensorrt"))


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
    base = config.load().replace(embed_backend="local", embed_runtime="onnx", model_cache_dir=str(tmp_path),
                                 embed_documents_int8=False)
    assert backends.create(base.replace(embed_documents_bf16="off")).documents is None
    on = backends.create(base.replace(embed_documents_bf16="on")).documents
    assert isinstance(on, SentenceTransformersEmbedder) and on.bf16
    assert (backends.create(base).documents is not None) == native_bf16()
    with pytest.raises(ValueError, match="EMBED_DOCUMENTS_BF16"):
        backends.create(base.replace(embed_documents_bf16="maybe"))


@pytest.fixture(scope="module")
def int8_embedder(onnx_embedder: OnnxMiniLMEmbedder) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(onnx_embedder.cache_dir, int8_documents=True)  # the export made with the other
    embedder.warm_up()
    return embedder


def test_int8_documents_stay_within_the_cosine_bound(onnx_embedder: OnnxMiniLMEmbedder,
                                                     int8_embedder: OnnxMiniLMEmbedder) -> None:
    float32 = SentenceTransformersEmbedder()
    float32.warm_up()
    texts = _texts()
    ours, theirs = int8_embedder.embed(texts, "DOCUMENT"), float32.embed(texts, "DOCUMENT")
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert (ours * theirs).sum(axis=1).min() >= 0.99
    # Past SHORT_RUN_TOKENS on the int8 copy; shorter ones as questions are, on the 8-bit copy.
    long = np.array([len(int8_embedder._tokenizer.encode(text).ids) > SHORT_RUN_TOKENS for text in texts])
    same = (ours * onnx_embedder.embed(texts, "DOCUMENT")).sum(axis=1)
    assert same[long].max() < 0.99999, "the documents did not go through the int8 copy"
    assert np.array_equal(ours[~long], onnx_embedder.embed([t for t, x in zip(texts, long) if not x], "QUERY"))
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(int8_embedder.embed(texts, "QUERY"), onnx_embedder.embed(texts, "QUERY")), \
        "queries stay on the float32 and 8-bit copies"
    assert int8_embedder.embed([], "DOCUMENT").shape == (0, 384)


def test_the_int8_document_copy_runs_unmasked_with_residual_adds_and_layer_norms_apart(
        int8_embedder: OnnxMiniLMEmbedder, tmp_path: Path) -> None:
    """A run is one unpadded text, so the copy takes no attention mask; and ONNX Runtime's fused
    SkipLayerNormalization, 4x the CPU of an Add and a LayerNormalization here, is neither exported
    nor fused back by the session the embedder opens (the graph it optimizes, saved, shows it)."""
    import onnx
    import onnxruntime as ort

    path = next(int8_embedder.cache_dir.glob("*-documents-*.onnx"))
    assert [i.name for i in int8_embedder._documents.get_inputs()] == list(DOCUMENT_INPUTS)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=list(DOCUMENT_UNFUSED))
    ops = {node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}
    assert "SkipLayerNormalization" not in ops and {"LayerNormalization", "QAttention"} <= ops
    assert ("FastGelu" in ops) == has_vnni() != ("BiasGelu" in ops)  # 7-bit weights keep the exact GELU


def test_int8_documents_come_back_in_the_callers_order_whatever_their_company(
        int8_embedder: OnnxMiniLMEmbedder) -> None:
    """Sorted by length and spread over threads inside, a call's rows are the caller's, each the vector
    its text gets alone (one run a text: no shared activation scale, no padding)."""
    texts = _texts()
    lengths = {len(int8_embedder._tokenizer.encode(text).ids) for text in texts}
    assert len(lengths) > 10  # lengths vary, so the sort inside reorders them
    forward = int8_embedder.embed(texts, "DOCUMENT")
    assert np.allclose(int8_embedder.embed(texts[::-1], "DOCUMENT")[::-1], forward, atol=1e-6)
    alone = np.concatenate([int8_embedder.embed([text], "DOCUMENT") for text in texts])
    assert np.allclose(alone, forward, atol=1e-6)
    distinct = [i for i, text in enumerate(texts) if texts.index(text) == i]
    assert (np.argmax(forward[distinct] @ alone[distinct].T, axis=1) == np.arange(len(distinct))).all()


def test_int8_documents_of_two_callers_at_once(int8_embedder: OnnxMiniLMEmbedder) -> None:
    """Two calls at once (the batcher's two lanes, two tenants) share the cores and each gets its own rows."""
    texts = _texts()
    expected = int8_embedder.embed(texts, "DOCUMENT")
    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(int8_embedder.embed, texts[start::2], "DOCUMENT") for start in (0, 1)] * 3
        results = [call.result() for call in calls]
    for start, result in zip((0, 1) * 3, results):
        assert np.allclose(result, expected[start::2], atol=1e-6)
    assert int8_embedder.lanes == 2


class _Documents:
    """Stands in for the bf16 document encoder and records the tasks it is asked for."""

    lanes = 2

    def __init__(self) -> None:
        self.cores = CoreShare()
        self.tasks: list[str] = []

    def warm_up(self) -> None:
        pass

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        self.tasks.append(task)
        return np.zeros((len(texts), 384), dtype=np.float32)


def test_document_fast_runs_on_the_int8_copy_and_document_keeps_its_path(
        onnx_embedder: OnnxMiniLMEmbedder, int8_embedder: OnnxMiniLMEmbedder) -> None:
    """Conversation memory's task: the int8 document copy (half the CPU of the default document path),
    whichever path DOCUMENT takes, at cosine >= 0.99 to DOCUMENT's vectors."""
    texts = _texts()
    fast, document = onnx_embedder.embed(texts, "DOCUMENT_FAST"), onnx_embedder.embed(texts, "DOCUMENT")
    assert np.allclose(fast, int8_embedder.embed(texts, "DOCUMENT"), atol=1e-6)
    long = np.array([len(onnx_embedder._tokenizer.encode(text).ids) > SHORT_RUN_TOKENS for text in texts])
    cosine = (fast * document).sum(axis=1)
    assert cosine.min() >= 0.99 and cosine[long].max() < 0.99999, cosine
    assert np.array_equal(fast[~long], onnx_embedder.embed([t for t, x in zip(texts, long) if not x], "QUERY"))
    bf16 = _Documents()
    beside = OnnxMiniLMEmbedder(onnx_embedder.cache_dir, documents=bf16)
    beside.warm_up()
    assert np.allclose(beside.embed(texts, "DOCUMENT_FAST"), fast, atol=1e-6) and bf16.tasks == []
    beside.embed(texts, "DOCUMENT")
    assert bf16.tasks == ["DOCUMENT"]


def test_short_documents_beside_bf16_run_on_the_question_copy(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    """With bf16 documents, a text of at most SHORT_RUN_TOKENS (a one-line upload) runs as a question does, as in
    every other mode: torch's start for one short text cost several times the whole question run. Longer ones
    keep the bf16 encoder, each in its own row."""
    bf16 = _Documents()
    beside = OnnxMiniLMEmbedder(onnx_embedder.cache_dir, documents=bf16)
    beside.warm_up()
    texts = _texts()
    long = np.array([len(onnx_embedder._tokenizer.encode(text).ids) > SHORT_RUN_TOKENS for text in texts])
    assert long.any() and not long.all()
    got = beside.embed(texts, "DOCUMENT")
    assert np.array_equal(got[~long], onnx_embedder.embed([t for t, x in zip(texts, long) if not x], "QUERY"))
    assert not got[long].any(), "the long texts' rows are the bf16 encoder's (the stand-in's zeros)"
    assert bf16.tasks == ["DOCUMENT"]
    beside.embed(["Fairness probe 000001."], "DOCUMENT")
    assert bf16.tasks == ["DOCUMENT"], "a one-line document went to torch"


def test_int8_documents_are_opt_in(tmp_path: Path) -> None:
    base = config.load().replace(embed_backend="local", embed_runtime="onnx", model_cache_dir=str(tmp_path))
    chosen = backends.create(base)
    assert not chosen.int8_documents and (chosen.documents is not None) == native_bf16()
    chosen = backends.create(base.replace(embed_documents_int8=True))
    assert chosen.int8_documents and chosen.documents is None


def test_cpus_without_vnni_get_7_bit_document_weights_within_the_cosine_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without VNNI, int8 products are added in pairs into 16 bits, where full-range weights can
    overflow: such CPUs (the AVX2 class, asked for here) get a copy with 7-bit weights, which stays within
    the bound too."""
    monkeypatch.setenv("CPU_CLASS", "avx2")
    seven = OnnxMiniLMEmbedder(tmp_path / "models", int8_documents=True)
    seven.warm_up()
    assert [p.name.split("-")[-1] for p in (tmp_path / "models").glob("*-documents-*")] == ["int7.onnx"]
    float32 = SentenceTransformersEmbedder()
    float32.warm_up()
    texts = _texts()
    assert (seven.embed(texts, "DOCUMENT") * float32.embed(texts, "DOCUMENT")).sum(axis=1).min() >= 0.99
