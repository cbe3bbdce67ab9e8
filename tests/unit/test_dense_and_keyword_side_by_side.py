"""Dense and keyword search of one query run side by side, not one after the other: each list's search,
once started, waits for the other to start too; both see the other only if they overlap. (A wait that
ends unseen is a failure, bounded so a sequential search fails instead of hanging; nothing is timed.)"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.index import IndexRegistry

BOUND_S = 10.0  # only reached when the two do not overlap


def test_dense_and_keyword_lists_are_searched_at_the_same_time(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = IndexRegistry(4)
    vectors = np.eye(4, dtype=np.float32)
    registry.apply("c", [(("", f"d{i}"), [StoredChunk(Chunk(f"d{i}#0", f"d{i}", "c", text), vectors[i])])
                         for i, text in enumerate(["gold miners", "bond yields", "gold price", "oil"])])
    index = registry.get("c")
    started = {"dense": threading.Event(), "sparse": threading.Event()}
    saw_other: dict[str, bool] = {}

    def meeting(kind: str, other: str, search):
        def run(*args, **kwargs):
            started[kind].set()
            saw_other[kind] = started[other].wait(BOUND_S)
            return search(*args, **kwargs)
        return run

    monkeypatch.setattr(index.dense, "search", meeting("dense", "sparse", index.dense.search))
    monkeypatch.setattr(index.sparse, "top_k", meeting("sparse", "dense", index.sparse.top_k))
    found = registry.search("c", ["gold"], vectors[:1], 10, SearchFilter())
    assert saw_other == {"dense": True, "sparse": True}, "each list's search was running while the other started"
    assert found is not None and len(found.dense[0][0]) and len(found.sparse[0][0])
