"""A search reply's metadata, bounded in size.

A document may carry 16 KB of metadata (MAX_METADATA_BYTES: 64 keys, values of up to 4,000 characters),
and every hit of a search repeats its chunk's: one tenant asking with top_k 50 over such documents made
each reply ~800 KB, encoded here, parsed by the gateway, kept in its scope entry and streamed out with
the citations -- CPU taken from every tenant on the same cores. So a hit in a search reply carries:

- each metadata value up to VALUE_CHARS characters; a longer one is cut, ending in a mark that says
  how much was left out;
- HIT_CHARS characters of keys and values at most, the shortest entries first (names, places, types,
  tags and ids are short): entries past that are left out, and CUT_KEY says how many.

The whole metadata stays readable where one chunk or document is read (GetChunk, GetDocument)."""
from __future__ import annotations

import dataclasses

from ragmesh import access
from ragmesh.types import Hit

VALUE_CHARS = 256  # a metadata value in a search reply, at most (then cut)
HIT_CHARS = 2_048  # a hit's metadata keys and values in a search reply, at most (then entries left out)
CUT_MARK = "…[cut: {:,} more characters]"
CUT_KEY = "__cut__"  # reserved (no client may set a key starting "__"): the entries left out
LEFT_OUT = "{:,} more metadata entries left out of this search reply; GetChunk has them all"


def cut(value: str) -> str:
    """`value` whole, or its first VALUE_CHARS characters and a mark saying how much was left out."""
    if len(value) <= VALUE_CHARS:
        return value
    return value[:VALUE_CHARS] + CUT_MARK.format(len(value) - VALUE_CHARS)


def _fits(metadata: dict[str, str]) -> bool:
    """Whether the metadata is within both bounds as it is."""
    return sum(len(k) + len(v) for k, v in metadata.items()) <= HIT_CHARS and all(
        len(v) <= VALUE_CHARS for v in metadata.values())


def shown(metadata: dict[str, str]) -> dict[str, str]:
    """The metadata as a search reply carries it (see the module), without the encoded access (a field of
    its own)."""
    metadata = access.shown(metadata)
    if _fits(metadata):
        return metadata
    kept: dict[str, str] = {}
    room = HIT_CHARS
    for size, key, entry in sorted((len(k) + len(cut(v)), k, cut(v)) for k, v in metadata.items()):
        if size > room:
            break
        kept[key] = entry
        room -= size
    left_out = len(metadata) - len(kept)
    return {k: kept[k] for k in metadata if k in kept} | ({CUT_KEY: LEFT_OUT.format(left_out)} if left_out else {})


def bounded(hits: list[Hit]) -> list[Hit]:
    """The hits with their chunks' metadata as a search reply carries it: a hit within the bounds as it
    is, the others copied (the index's chunks are shared)."""
    return [h if _fits(h.chunk.metadata)  # as most are: the proto conversion drops the access as always
            else dataclasses.replace(h, chunk=dataclasses.replace(h.chunk, metadata=shown(h.chunk.metadata)))
            for h in hits]
