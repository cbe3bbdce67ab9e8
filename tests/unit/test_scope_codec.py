"""A scope entry through its Redis encoding: what comes back is what went in, the context's hits are
the entry's own (so the pipeline reuses that context on another replica), and bytes of another
layout, or bytes a Redis writer made (wrong types, shapes, a decompression bomb), read as unreadable (a
miss), never as a wrong entry or another error. Each hit's metadata is cut to a budget."""
from __future__ import annotations

import struct
import time
import zlib

import numpy as np
import orjson
import pytest

from ragmesh.context_budget import ContextBudget
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
    entry.context = (hits[:2], build(hits[:2], ContextBudget(4000)))
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


@pytest.mark.parametrize("blob", [b"", b"\x01" + codec.encode(_entry())[1:], b"\x02not zlib"])
def test_bytes_of_another_layout_are_unreadable(blob: bytes) -> None:
    with pytest.raises(codec.Unreadable):
        codec.decode(blob)


def _blob(fields: list, raw: bytes = b"") -> bytes:
    """Bytes a Redis writer could store: any JSON and raw part, in the entry's layout."""
    body = orjson.dumps(fields)
    return codec.FORMAT + zlib.compress(struct.pack("<I", len(body)) + body + raw)


def _fields(**change) -> tuple[list, bytes]:
    """A well-formed entry's fields and vector bytes, with `change` applied to its first hit's row."""
    blob = codec.encode(_entry())
    data = zlib.decompress(blob[1:])
    (size,) = struct.unpack_from("<I", data)
    fields = orjson.loads(data[4:4 + size])
    for at, value in change.items():
        part, index = at.split("_")
        row = fields[5][0][0] if part == "chunk" else fields[5][0]
        row[int(index)] = value
    return fields, data[4 + size:]


def _hostile() -> dict[str, bytes]:
    fields, raw = _fields()
    cases = {
        "vector of another type": _blob(fields[:4] + [["object", [4]]] + fields[5:], raw),
        "vector longer than its bytes": _blob(fields[:4] + [["float32", [64]]] + fields[5:], raw),
        "vector of two dimensions": _blob(fields[:4] + [["float32", [2, 2]]] + fields[5:], raw),
        "vector of integers": _blob(fields[:4] + [["int32", [4]]] + fields[5:], raw),
        "missing fields": _blob(fields[:6], raw),
        "fields as an object": _blob({"key": "k"}, raw),  # type: ignore[arg-type]
        "context pointing past the hits": _blob(fields[:6] + [[2, [[1, "x", 99, "l"]], "x", [0]], fields[7]], raw),
        "truncated": codec.encode(_entry())[:-20],
    }
    for name, at, value in [("metadata as a list", "chunk_4", ["fund_name", "Kestrel"]),
                            ("metadata values not text", "chunk_4", {"fund_name": 3}),
                            ("chunk index as text", "chunk_8", "0"), ("score as text", "hit_1", "high"),
                            ("boosts as text", "hit_7", "recency"), ("chunk row too short", "hit_0", ["c0"])]:
        bad, raw = _fields(**{at: value})
        cases[name] = _blob(bad, raw)
    return cases


@pytest.mark.parametrize("name", list(_hostile()))
def test_a_hostile_entry_is_unreadable_never_another_error(name: str) -> None:
    with pytest.raises(codec.Unreadable):
        codec.decode(_hostile()[name])


def test_an_entry_that_inflates_past_the_largest_written_is_refused_without_inflating_it() -> None:
    packer = zlib.compressobj(1)
    bomb = codec.FORMAT + b"".join(packer.compress(bytes(1 << 20)) for _ in range(64)) + packer.flush()
    assert len(bomb) < 1 << 20
    started = time.perf_counter()
    with pytest.raises(codec.Unreadable, match="inflates past"):
        codec.decode(bomb)
    assert time.perf_counter() - started < 0.5, "stopped at the cap, not after 64 MB"


def test_each_hits_metadata_is_cut_to_its_budget_keeping_what_the_context_reads() -> None:
    entry = _entry()
    for hit in entry.hits:
        hit.chunk.metadata = {f"k{i:02}": "x" * 4000 for i in range(64)} | {"fund_name": "Kestrel", "n": "1"}
    back = codec.decode(codec.encode(entry))
    for hit in back.hits:
        assert hit.chunk.metadata == {"fund_name": "Kestrel", "n": "1"}, "whole keys within the budget, read ones first"
    assert codec.decode(codec.encode(entry)).context is not None


def test_an_entry_past_the_largest_is_not_encoded() -> None:
    entry = _entry()
    entry.hits[0].parent_text = "y" * codec.MAX_ENTRY_BYTES
    with pytest.raises(codec.TooLarge):
        codec.encode(entry)
