"""A scope entry through its Redis encoding: what comes back is what went in, the context's hits are
the entry's own (so the pipeline reuses that context on another replica), and bytes of another
layout read as unreadable (a miss), never as a wrong entry."""
from __future__ import annotations

import numpy as np
import pytest

from ragmesh.types import Chunk, ContextBlock, Hit
from services.gateway.context import Context, build
from services.gateway.scope_cache import ScopeEntry
from services.gateway.shared_state import codec


def _entry() -> ScopeEntry:
    hits = [Hit(Chunk(f"c{i}", f"d{i}", "meeting_notes", f"Kestrel cut Brazil exposure, note {i}.",
                      {"fund_name": "Kestrel", "n": str(i)}, "2024-03-0{}".format(i + 1), "demo"),
                np.float32(0.9 - i / 10), dense_rank=i + 1, fused_score=0.5, boosts=["recency"])
            for i in range(3)]
    entry = ScopeEntry("k", ["meeting_notes"], "What did Kestrel do?", np.arange(4, dtype=np.float32), hits, 7)
    entry.context = (hits[:2], build(hits[:2], 4000))
    return entry


def test_an_entry_comes_back_as_it_went_in_with_its_context_on_its_own_hits() -> None:
    entry = _entry()
    back = codec.decode(codec.encode(entry))
    assert (back.key, back.collections, back.question, back.candidate_count) == ("k", ["meeting_notes"],
                                                                                 "What did Kestrel do?", 7)
    assert back.question_vector.dtype == np.float32 and back.question_vector.tolist() == [0, 1, 2, 3]
    assert back.hits == entry.hits
    source, ctx = back.context
    assert all(a is b for a, b in zip(source, back.hits[:2])) and len(source) == 2
    assert ctx == entry.context[1]
    assert all(any(h is used for h in back.hits) for used in ctx.hits_used)
    assert all(any(h.chunk is b.chunk for h in back.hits) for b in ctx.blocks)


def test_a_context_not_built_from_the_entrys_hits_is_not_kept() -> None:
    entry = _entry()
    stranger = Hit(Chunk("x", "x", "meeting_notes", "other"), 1.0)
    entry.context = ([stranger], Context([ContextBlock(1, "other", stranger.chunk)], "other", [stranger]))
    assert codec.decode(codec.encode(entry)).context is None
    entry.question_vector = None
    assert codec.decode(codec.encode(entry)).question_vector is None


@pytest.mark.parametrize("blob", [b"", b"\x02" + codec.encode(_entry())[1:], b"\x01not zlib"])
def test_bytes_of_another_layout_are_unreadable(blob: bytes) -> None:
    with pytest.raises(codec.Unreadable):
        codec.decode(blob)
