"""A scope entry as bytes for Redis: its fields as one orjson array (hits and chunks as positional
rows, the context's blocks and hits as positions in the entry's hits) and the question's vector as raw
bytes, zlib-compressed at its fastest level (a demo entry: 50 KB of JSON, 12 KB stored; chunk texts and
metadata repeat in the context), after a byte naming the layout. No pickle (nothing read from Redis can
run code); decoded once per replica and version of an entry (see RedisScopes)."""
from __future__ import annotations

import dataclasses
import struct
import zlib

import numpy as np
import orjson

from ragmesh.types import Chunk, ContextBlock, Hit
from services.gateway.context import Context
from services.gateway.scope_cache import ScopeEntry

FORMAT = b"\x01"  # changed when the layout changes: an entry of another layout reads as a miss
LEVEL = 1  # zlib's fastest: most of what a higher level would save, at a fraction of the time
_HEADER = struct.Struct("<I")  # length of the JSON part
_CHUNK = [f.name for f in dataclasses.fields(Chunk)]
_HIT = [f.name for f in dataclasses.fields(Hit) if f.name != "chunk"]


class Unreadable(ValueError):
    """Bytes that are not a scope entry of this layout."""


def encode(entry: ScopeEntry) -> bytes:
    vector = entry.question_vector
    shape = None if vector is None else [str(vector.dtype), list(vector.shape)]
    fields = [entry.key, entry.collections, entry.question, entry.candidate_count, shape,
              [_hit_row(h) for h in entry.hits], _context_row(entry), entry.asked]
    body = orjson.dumps(fields, option=orjson.OPT_SERIALIZE_NUMPY)
    raw = b"" if vector is None else np.ascontiguousarray(vector).tobytes()
    return FORMAT + zlib.compress(_HEADER.pack(len(body)) + body + raw, LEVEL)


def decode(blob: bytes) -> ScopeEntry:
    if blob[:1] != FORMAT:
        raise Unreadable(f"scope entry layout {blob[:1]!r}, this gateway reads {FORMAT!r}")
    try:
        data = zlib.decompress(blob[1:])
        (size,) = _HEADER.unpack_from(data)
        key, collections, question, candidates, shape, rows, context, asked = orjson.loads(data[4:4 + size])
        vector = None
        if shape is not None:
            vector = np.frombuffer(data, dtype=shape[0], offset=4 + size).reshape(shape[1]).copy()
        hits = [Hit(Chunk(**dict(zip(_CHUNK, row[0]))), **dict(zip(_HIT, row[1:]))) for row in rows]
        entry = ScopeEntry(key, collections, question, vector, hits, candidates, asked=asked)
        entry.context = _context_from(context, hits)
        return entry
    except (ValueError, TypeError, IndexError, struct.error, zlib.error) as exc:
        raise Unreadable(f"scope entry: {exc}") from exc


def _hit_row(hit: Hit) -> list:
    return [[getattr(hit.chunk, name) for name in _CHUNK], *(getattr(hit, name) for name in _HIT)]


def _context_row(entry: ScopeEntry) -> list | None:
    """[hits it was built from, blocks as [index, text, hit position of the chunk or -1, label], text,
    hits used as positions]; None when there is none, or it refers to hits not in the entry."""
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
    return [len(source), blocks, ctx.text, [hit_at[id(h)] for h in ctx.hits_used]]


def _context_from(row: list | None, hits: list[Hit]) -> tuple[list[Hit], Context] | None:
    if row is None:
        return None
    count, blocks, text, used = row
    return hits[:count], Context(
        [ContextBlock(index, block_text, None if at < 0 else hits[at].chunk, label)
         for index, block_text, at, label in blocks], text, [hits[i] for i in used])
