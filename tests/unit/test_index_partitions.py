"""The memory engine's partitions: each (collection, tenant) is an index of its own, so a tenant's
BM25 scores are rank_bm25's over that tenant's documents alone, a parent is found only in the
child's own document, and snapshots keep every partition under a file name safe for any tenant."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rank_bm25 import BM25Okapi

from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.index import SNAPSHOT_FORMAT, IndexRegistry
from tests.unit.test_index_concurrency import DIM

RNG = np.random.default_rng(11)
MINE = ["the kestrel fund bought copper", "copper prices fell", "a note on gold", "kestrel kestrel copper"]
THEIRS = ["copper copper copper everywhere"] * 6 + ["kestrel sold copper"]


def docs(tenant: str, texts: list[str]) -> list[tuple[tuple[str, str], list[StoredChunk]]]:
    return [((tenant, f"d{i}"), [StoredChunk(Chunk(f"d{i}#0", f"d{i}", "c", text, {"fund": "K"}, "", tenant),
                                             RNG.standard_normal(DIM).astype(np.float32))])
            for i, text in enumerate(texts)]


def sparse_scores(registry: IndexRegistry, tenant: str, query: str) -> dict[str, float]:
    found = registry.search("c", [query], None, 50, SearchFilter(tenant=tenant))
    slots, scores = found.sparse[0]
    return {found.chunks[int(s)].doc_id: float(v) for s, v in zip(slots, scores)}


def test_a_tenants_scores_are_rank_bm25_over_its_own_documents_whatever_another_writes() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", docs("mine", MINE))
    alone = sparse_scores(registry, "mine", "kestrel copper")
    registry.apply("c", docs("theirs", THEIRS))  # another tenant, same collection, same ids
    assert sparse_scores(registry, "mine", "kestrel copper") == alone
    analyze = registry.analyzer("c").analyze
    reference = BM25Okapi([analyze(t) for t in MINE], k1=1.5, b=0.75, epsilon=0.25).get_scores(
        analyze("kestrel copper"))
    for doc_id, score in alone.items():
        assert abs(score - reference[int(doc_id[1:])]) < 1e-5
    assert registry.indexed("c", "mine") == len(MINE) and registry.indexed("c") == len(MINE) + len(THEIRS)
    assert registry.searchable(["c", "other"], "mine") == ["c"] and registry.searchable(["c"], "nobody") == []
    assert registry.field_values("fund", ["c"], "mine") == ["K"] and registry.field_values("fund", [], "x") == []


def test_a_parent_is_found_only_in_the_childs_own_document() -> None:
    registry = IndexRegistry(DIM)
    vector = RNG.standard_normal(DIM).astype(np.float32)
    parent = StoredChunk(Chunk("p", "owner", "c", "the owner's confidential parent", tenant="t"), None)
    child = StoredChunk(Chunk("owner#0", "owner", "c", "owner child text", tenant="t", parent_chunk_id="p"), vector)
    # written before parents were checked: another document's chunk naming the owner's parent
    planted = StoredChunk(Chunk("x#0", "planter", "c", "planter child text", tenant="t", parent_chunk_id="p"),
                          vector)
    registry.apply("c", [(("t", "owner"), [parent, child]), (("t", "planter"), [planted])])
    found = registry.search("c", ["child text"], None, 10, SearchFilter(tenant="t"), with_parents=True)
    assert found.parents == {"p": "the owner's confidential parent"}
    planter_only = registry.search("c", ["planter"], None, 10, SearchFilter(tenant="t", doc_ids=["planter"]),
                                   with_parents=True)
    assert planter_only.parents == {}


def test_every_partition_survives_a_snapshot_under_a_hashed_name(tmp_path: Path) -> None:
    registry = IndexRegistry(DIM)
    odd = "../../etc/passwd\n\x00tenant"
    registry.apply("c", docs("mine", MINE) + docs(odd, THEIRS))
    (tmp_path / "c.pkl").write_bytes(b"a snapshot of the format before partitions")
    registry.save_snapshot(tmp_path, version=3)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "c.pkl" not in names, "files of another format are removed"
    assert len([n for n in names if n.endswith(".pkl")]) == 2
    assert all(n == "manifest.json" or len(n.split(".")[0]) == 32 for n in names)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == SNAPSHOT_FORMAT and sorted(map(tuple, manifest["partitions"])) == [
        ("c", odd), ("c", "mine")]
    loaded = IndexRegistry(DIM)
    assert loaded.load_snapshot(tmp_path, version=3)
    assert loaded.indexed("c", odd) == len(THEIRS) and loaded.indexed("c", "mine") == len(MINE)
    assert sparse_scores(loaded, "mine", "kestrel copper") == sparse_scores(registry, "mine", "kestrel copper")


def test_options_stay_per_collection_across_its_partitions() -> None:
    from services.retriever.backend import CollectionOptions

    registry = IndexRegistry(DIM)
    registry.apply("c", docs("a", MINE) + docs("b", THEIRS))
    registry.configure("c", CollectionOptions(dense="hnsw", analyzer={"stemming": False}))
    assert {registry.get("c", t).options.dense for t in "ab"} == {"hnsw"}
    registry.apply("c", docs("new", MINE))
    assert registry.get("c", "new").options.analyzer == {"stemming": False}
    assert registry.analyzer("c").analyze("prices") == ["prices"]
