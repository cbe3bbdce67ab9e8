"""Index snapshots: read back only when they match the store's version and this code's
snapshot format; a loaded index takes further writes like a built one."""
from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import numpy as np

from ragmesh.types import SearchFilter
from services.retriever import index as index_module
from services.retriever.index import IndexRegistry
from tests.unit.test_index_concurrency import DIM, document


def test_a_snapshot_loads_only_in_its_format_and_version_and_takes_writes(tmp_path: Path) -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [document("a", "alpha", 3), document("b", "beta", 2)])
    with mock.patch.object(index_module, "_SNAPSHOT_BLOCK", 2):  # the chunks in three blocks
        registry.save_snapshot(tmp_path, version=7)

    assert not IndexRegistry(DIM).load_snapshot(tmp_path, version=8), "another store version: rebuild"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for other in ({"format": manifest["format"] - 1}, {"analysis": "another stemmer"}):
        (tmp_path / "manifest.json").write_text(json.dumps({**manifest, **other}))
        assert not IndexRegistry(DIM).load_snapshot(tmp_path, version=7), f"{other}: rebuild"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    loaded = IndexRegistry(DIM)
    assert loaded.load_snapshot(tmp_path, version=7)
    assert [c.chunk_id for c in loaded.get("c").chunks] == [c.chunk_id for c in registry.get("c").chunks]
    query = np.ones((1, DIM), np.float32)
    for r in (registry, loaded):  # a replace after loading removes the old terms exactly
        r.apply("c", [document("a", "gamma", 1)])
    found = [r.get("c").search(["alpha gamma"], query, 10, SearchFilter()) for r in (registry, loaded)]
    assert [sorted(f.chunks[int(s)].chunk_id for s in f.sparse[0][0]) for f in found] == [["a#0"]] * 2
    assert loaded.get("c").sparse.doc_freq("alpha") == 0 and loaded.get("c").live == 3


def test_repeated_strings_are_stored_once_and_stay_so_through_a_snapshot(tmp_path: Path) -> None:
    """Equal but separate strings (as a store or protobuf hands them over) end up as one object."""
    def fresh(text: str) -> str:
        return json.loads(json.dumps(text))

    key, chunks = document("doc", "v1", 3)
    for c in chunks:
        c.chunk.collection, c.chunk.doc_id = fresh("c"), fresh("doc")
        c.chunk.metadata = {fresh("fund_name"): fresh("Kestrel"), "long": "x" * 100}
    registry = IndexRegistry(DIM)
    registry.apply("c", [(key, chunks)])
    with mock.patch.object(index_module, "_SNAPSHOT_BLOCK", 1):  # each chunk a pickle of its own
        registry.save_snapshot(tmp_path, version=1)
    loaded = IndexRegistry(DIM)
    assert loaded.load_snapshot(tmp_path, version=1)
    for r in (registry, loaded):
        a, b = (r.get("c").chunk(slot) for slot in (0, 2))
        assert a.collection is b.collection and a.doc_id is b.doc_id
        [(ka, va), (kb, vb)] = [next(iter(m.items())) for m in (a.metadata, b.metadata)]
        assert ka is kb and va is vb and va == "Kestrel"


def test_an_unreadable_snapshot_means_rebuild_not_a_crash(tmp_path: Path) -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [document("a", "alpha", 3)])
    registry.save_snapshot(tmp_path, version=1)
    (pkl,) = tmp_path.glob("*.pkl")
    pkl.write_bytes(pkl.read_bytes()[: pkl.stat().st_size // 2])
    assert not IndexRegistry(DIM).load_snapshot(tmp_path, version=1)
