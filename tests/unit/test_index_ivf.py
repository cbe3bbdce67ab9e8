"""The approximate dense option (`ivf`): exact until trained, then an IVF whose filtered
results never leave the filter, whose scores are the exact ones, and which a snapshot keeps."""
from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever import ivf
from services.retriever.backend import CollectionOptions
from services.retriever.dense import FLAT, IVF, DenseIndex
from services.retriever.index import IndexRegistry

DIM = 16
N = 20_000  # 256 lists: a filter admitting half the slots still fits the IVF


def clustered(n: int, seed: int = 7) -> np.ndarray:
    """Unit vectors around 40 centres: real embeddings cluster by topic, and so do these."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIM))
    x = centres[rng.integers(40, size=n)] + 0.4 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture()
def trained() -> tuple[DenseIndex, DenseIndex, np.ndarray]:
    vectors = clustered(N)
    exact, approx = DenseIndex(DIM, FLAT), DenseIndex(DIM, IVF, exact_below=N // 2)
    exact.add(vectors)
    approx.add(vectors[: N // 4])
    assert approx.ivf is None, "below exact_below the collection is scanned exactly"
    approx.add(vectors[N // 4 :])
    assert approx.ivf is not None and len(approx.ivf) == N, "trained once past exact_below, holding every slot"
    return exact, approx, vectors


def test_filtered_results_stay_inside_the_filter_at_every_width(trained) -> None:
    exact, approx, vectors = trained
    rng = np.random.default_rng(3)
    queries = clustered(50, seed=11)
    for share in (1.0, 0.5, 0.1, 0.01, 1 / N):
        mask = rng.random(N) < share
        mask[rng.integers(N)] = True  # at least one admitted slot
        for q in queries:
            slots, scores = approx.search(q, 10, mask)
            assert mask[slots].all(), f"a slot outside the filter at share {share}"
            assert len(slots) == min(10, int(mask.sum())), "as many results as the filter admits, up to k"
            np.testing.assert_allclose(scores, vectors[slots] @ q, rtol=1e-5, atol=1e-6)
            assert list(scores) == sorted(scores, reverse=True)


def test_the_ivf_answers_unfiltered_and_filtered_searches_close_to_exact(trained, monkeypatch) -> None:
    exact, approx, _ = trained
    queries = clustered(100, seed=13)
    half = np.arange(N) % 2 == 0
    scanned = []
    monkeypatch.setattr(approx.ivf, "candidates", lambda *a, _f=approx.ivf.candidates: scanned.append(1) or _f(*a))
    for mask in (np.ones(N, bool), half):
        recall = np.mean([len(np.intersect1d(exact.search(q, 10, mask)[0], approx.search(q, 10, mask)[0])) / 10
                          for q in queries])
        assert recall >= 0.9
    assert len(scanned) == 2 * len(queries), "both searches went through the IVF, not the exact scan"


def test_a_narrow_filter_is_scanned_exactly() -> None:
    codes = ivf.IVFCodes.trained(clustered(N))
    assert codes.probes(1.0) >= ivf.MIN_PROBES
    assert codes.probes(0.5) > codes.probes(1.0), "a filter widens the probe"
    assert codes.probes(0.001) == 0, "too thin for the IVF: exact"


def test_list_count_follows_the_size_and_leaves_enough_to_train() -> None:
    assert ivf.list_count(1_000_000) == 2048
    assert ivf.list_count(200_000) == 1024
    for n in (100, 1000, 5000):
        assert ivf.list_count(n) * ivf.TRAIN_PER_LIST <= n or ivf.list_count(n) == ivf.MIN_LISTS


def _documents(vectors: np.ndarray) -> list[tuple[tuple[str, str], list[StoredChunk]]]:
    return [(("t", f"d{i}"), [StoredChunk(Chunk(f"d{i}#0", f"d{i}", "big", f"text {i}", {"group": f"g{i % 10}"},
                                               tenant="t"), v)])
            for i, v in enumerate(vectors)]


def test_an_ivf_collection_filters_exactly_and_survives_a_snapshot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ivf, "EXACT_BELOW", 1000)
    vectors = clustered(3000)
    registry = IndexRegistry(DIM)
    registry.configure("big", CollectionOptions(dense=IVF))
    registry.apply("big", _documents(vectors))
    assert registry.get("big", "t").dense.ivf is not None
    registry.save_snapshot(tmp_path, version=1)
    loaded = IndexRegistry(DIM)
    assert loaded.load_snapshot(tmp_path, version=1)
    assert loaded.get("big", "t").dense.ivf is not None, "the trained IVF is read back, not retrained"
    group = SearchFilter(tenant="t", any_of={"group": ["g3"]})
    for r in (registry, loaded):
        for q in clustered(20, seed=5):
            found = r.search("big", ["text"], q.reshape(1, -1), 10, group)
            assert len(found.dense[0][0]) == 10
            assert all(found.chunks[int(s)].metadata["group"] == "g3" for s in found.dense[0][0])

    registry.configure("big", CollectionOptions(dense=FLAT))  # back to exact: no IVF left behind
    registry.save_snapshot(tmp_path, version=2)
    assert not list(tmp_path.glob("*.ivf.faiss"))
    again = IndexRegistry(DIM)
    assert again.load_snapshot(tmp_path, version=2) and again.get("big", "t").dense.ivf is None


def test_the_codes_are_scanned_by_fast_scan_kernels_in_codes_that_divide_the_vector() -> None:
    codes = ivf.IVFCodes.trained(clustered(N))
    assert isinstance(codes.index, faiss.IndexIVFPQFastScan) and codes.index.nbits == 4
    assert codes.index.pq.M == ivf.subquantizers(DIM)
    for dimensions in (16, 384, 768, 1536, 100, 7):
        m = ivf.subquantizers(dimensions)
        assert dimensions % m == 0 and m <= dimensions
    assert ivf.subquantizers(384) == 96, "a 4-bit code per 4 dimensions: 48 bytes a MiniLM vector"


def test_an_ivf_of_8_bit_codes_from_an_earlier_snapshot_still_serves(trained, tmp_path: Path) -> None:
    """A snapshot written before the 4-bit codes holds an IVF of 8-bit scalar codes: it reads back
    (whatever IVF FAISS wrote) and answers inside the filter, close to exact, until its next rebuild."""
    exact, approx, vectors = trained
    quantizer = faiss.IndexFlatIP(DIM)
    old = faiss.IndexIVFScalarQuantizer(quantizer, DIM, approx.ivf.nlist, faiss.ScalarQuantizer.QT_8bit,
                                        faiss.METRIC_INNER_PRODUCT)
    old.train(vectors)
    old.add(vectors)
    faiss.write_index(old, str(tmp_path / "old.ivf.faiss"))
    approx.ivf = ivf.IVFCodes(faiss.read_index(str(tmp_path / "old.ivf.faiss")))
    half = np.arange(N) % 2 == 0
    for q in clustered(30, seed=17):
        slots, _ = approx.search(q, 10, half)
        assert half[slots].all() and len(slots) == 10
        assert len(np.intersect1d(slots, exact.search(q, 10, half)[0])) >= 8
