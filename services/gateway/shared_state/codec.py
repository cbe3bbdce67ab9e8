"""A scope entry as bytes for Redis: its fields as one orjson array (hits and chunks as positional
rows, the context's blocks and hits as positions in the entry's hits) and the question's vector as raw
bytes, zlib-compressed at its fastest level (a demo entry: 50 KB of JSON, 12 KB stored; chunk texts and
metadata repeat in the context), after a byte naming the layout. No pickle (nothing read from Redis can
run code); decoded once per replica and version of an entry (see RedisScopes).

What Redis holds is input (anyone who can write to it can write any bytes there): an entry is read like
a request, every field checked for its type and range, and inflated to at most MAX_ENTRY_BYTES, the
most `encode` writes. An entry that does not pass is Unreadable: a miss, the question searches again.
Each hit keeps at most METADATA_BYTES of its chunk's metadata (the keys the context and a follow-up read
first), so one ask cannot store megabytes of metadata for every hit."""
from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from ragmesh.context_budget import ContextBudget
from ragmesh.types import Chunk, ContextBlock, Hit
from services.gateway.context import Context
from services.gateway.scope_cache import ScopeEntry

FORMAT = b"\x02"  # changed when the layout changes: an entry of another layout reads as a miss
LEVEL = 1  # zlib's fastest: most of what a higher level would save, at a fraction of the time
MAX_ENTRY_BYTES = 1 << 20  # an entry inflated (JSON and vector): larger ones are not written, nor read
MAX_STORED_BYTES = MAX_ENTRY_BYTES + (MAX_ENTRY_BYTES >> 10) + 64  # the most zlib makes of it, with FORMAT
METADATA_BYTES = 2_048  # of each hit's chunk metadata (keys and values, UTF-8) stored
# Metadata the context, its labels and citations read: kept first when a chunk's metadata is cut.
READ_KEYS = ("fund_name", "filename", "factsheet_id", "section_type", "chunk_type", "doc_type", "manager")
VECTOR_TYPES = ("float32", "float64")
MAX_DIMENSIONS = 16_384
_HEADER = struct.Struct("<I")  # length of the JSON part
_CHUNK = [f.name for f in dataclasses.fields(Chunk)]
_HIT = [f.name for f in dataclasses.fields(Hit) if f.name != "chunk"]


class Unreadable(ValueError):
    """Bytes that are not a scope entry of this layout, or one larger than this gateway writes."""


class TooLarge(ValueError):
    """An entry larger than MAX_ENTRY_BYTES even with its metadata cut: not stored."""


def encode(entry: ScopeEntry) -> bytes:
    vector = entry.question_vector
    shape = None if vector is None else [str(vector.dtype), list(vector.shape)]
    fields = [entry.key, entry.collections, entry.question, entry.candidate_count, shape,
              [_hit_row(h) for h in entry.hits], _context_row(entry), entry.asked]
    body = orjson.dumps(fields, option=orjson.OPT_SERIALIZE_NUMPY)
    raw = b"" if vector is None else np.ascontiguousarray(vector).tobytes()
    if _HEADER.size + len(body) + len(raw) > MAX_ENTRY_BYTES:
        raise TooLarge(f"scope entry of {_HEADER.size + len(body) + len(raw)} bytes, at most {MAX_ENTRY_BYTES}")
    return FORMAT + zlib.compress(_HEADER.pack(len(body)) + body + raw, LEVEL)


def decode(blob: bytes) -> ScopeEntry:
    if blob[:1] != FORMAT:
        raise Unreadable(f"scope entry layout {blob[:1]!r}, this gateway reads {FORMAT!r}")
    try:
        data = _inflate(blob[1:])
        (size,) = _HEADER.unpack_from(data)
        fields = orjson.loads(data[_HEADER.size:_HEADER.size + size])
        _check(isinstance(fields, list) and len(fields) == 8, "8 fields")
        key, collections, question, candidates, shape, rows, context, asked = fields
        _check(_is(str)(key) and _is(str)(question) and _is(str)(asked) and _list_of(collections, _is(str))
               and _is(int)(candidates) and candidates >= 0, "key, collections, question, candidates")
        vector = _vector(shape, data[_HEADER.size + size:])
        _check(isinstance(rows, list), "hits")
        hits = [_hit(row) for row in rows]
        entry = ScopeEntry(key, collections, question, vector, hits, candidates, asked=asked)
        entry.context = _context_from(context, hits)
        return entry
    except (ValueError, TypeError, IndexError, struct.error, zlib.error) as exc:
        raise Unreadable(f"scope entry: {exc}") from exc


def _inflate(compressed: bytes) -> bytes:
    """At most MAX_ENTRY_BYTES: a small entry that would inflate past it is refused, never inflated."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(compressed, MAX_ENTRY_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise Unreadable(f"scope entry inflates past {MAX_ENTRY_BYTES} bytes, or is cut short")
    return data


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise Unreadable(f"scope entry: bad {what}")


def _is(kind: type) -> Callable[[Any], bool]:
    """A JSON value of `kind` (a bool is not an int, an int is a float)."""
    kinds = (int, float) if kind is float else (kind,)
    return lambda value: isinstance(value, kinds) and not isinstance(value, bool)


def _list_of(value: Any, ok: Callable[[Any], bool]) -> bool:
    return isinstance(value, list) and all(ok(item) for item in value)


def _vector(shape: Any, raw: bytes) -> np.ndarray | None:
    if shape is None:
        _check(not raw, "vector")
        return None
    _check(isinstance(shape, list) and len(shape) == 2 and shape[0] in VECTOR_TYPES
           and _list_of(shape[1], _is(int)) and len(shape[1]) == 1 and 0 < shape[1][0] <= MAX_DIMENSIONS
           and len(raw) == shape[1][0] * np.dtype(shape[0]).itemsize, "vector")
    vector = np.frombuffer(raw, dtype=shape[0]).copy()
    _check(bool(np.isfinite(vector).all()), "vector")
    return vector


_CHUNK_TYPES = [str, str, str, str, dict, str, str, str, int]  # Chunk's fields, in order
_HIT_TYPES = [float, int, int, float, float, float, list, str]  # Hit's fields after the chunk
assert len(_CHUNK_TYPES) == len(_CHUNK) and len(_HIT_TYPES) == len(_HIT), "the codec's types follow the dataclasses"


def _hit(row: Any) -> Hit:
    _check(isinstance(row, list) and len(row) == 1 + len(_HIT) and isinstance(row[0], list)
           and len(row[0]) == len(_CHUNK), "hit")
    _check(all(_is(kind)(value) for kind, value in zip(_CHUNK_TYPES, row[0])), "chunk")
    _check(all(_is(kind)(value) for kind, value in zip(_HIT_TYPES, row[1:])), "hit")
    chunk = Chunk(**dict(zip(_CHUNK, row[0])))
    _check(all(_is(str)(k) and _is(str)(v) for k, v in chunk.metadata.items()), "chunk metadata")
    hit = Hit(chunk, **dict(zip(_HIT, row[1:])))
    _check(_list_of(hit.boosts, _is(str)), "boosts")
    return hit


def _hit_row(hit: Hit) -> list:
    chunk = [_metadata(hit.chunk.metadata) if name == "metadata" else getattr(hit.chunk, name) for name in _CHUNK]
    return [chunk, *(getattr(hit, name) for name in _HIT)]


def _metadata(metadata: dict[str, str]) -> dict[str, str]:
    """The chunk's metadata within METADATA_BYTES: whole keys and values, those read first, in order."""
    kept: dict[str, str] = {}
    room = METADATA_BYTES
    for name in sorted(metadata, key=lambda k: k not in READ_KEYS):
        size = len(name.encode()) + len(metadata[name].encode())
        if size <= room:
            kept[name] = metadata[name]
            room -= size
    return kept


def _context_row(entry: ScopeEntry) -> list | None:
    """[hits it was built from, blocks as [index, text, hit position of the chunk or -1, label], text,
    hits used as positions, the budget it was built within or None]; None when there is none, or it refers to
    hits not in the entry."""
    if entry.context is None:
        return None
    source, ctx = entry.context
    hit_at = {id(h): i for i, h in enumerate(entry.hits)}
    chunk_at = {id(h.chunk): i for i, h in enumerate(entry.hits)}
    if any(hit_at.get(id(h)) != i for i, h in enumerate(source)):
        return None
    if any(id(h) not in hit_at for h in ctx.hits_used) or any(
            b.chunk is not None and id(b.chunk) not in chunk_at for b in ctx.blocks):
        return None
    blocks = [[b.index, b.text, -1 if b.chunk is None else chunk_at[id(b.chunk)], b.label] for b in ctx.blocks]
    budget = None if ctx.budget is None else dataclasses.astuple(ctx.budget)
    return [len(source), blocks, ctx.text, [hit_at[id(h)] for h in ctx.hits_used], budget]


def _context_from(row: Any, hits: list[Hit]) -> tuple[list[Hit], Context] | None:
    if row is None:
        return None
    _check(isinstance(row, list) and len(row) == 5, "context")
    count, blocks, text, used, budget = row
    at_hit = lambda i: _is(int)(i) and 0 <= i < len(hits)  # noqa: E731
    _check(_is(int)(count) and 0 <= count <= len(hits) and _is(str)(text) and _list_of(used, at_hit)
           and _list_of(blocks, lambda b: isinstance(b, list) and len(b) == 4 and _is(int)(b[0])
                        and _is(str)(b[1]) and (b[2] == -1 or at_hit(b[2])) and _is(str)(b[3]))
           and (budget is None or isinstance(budget, list) and len(budget) == 4
                and _list_of(budget[:3], lambda n: _is(int)(n) and n >= 0) and isinstance(budget[3], bool)), "context")
    return hits[:count], Context(
        [ContextBlock(index, block_text, None if at < 0 else hits[at].chunk, label)
         for index, block_text, at, label in blocks], text, [hits[i] for i in used],
        None if budget is None else ContextBudget(*budget))
