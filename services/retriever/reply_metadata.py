"""A search reply's metadata, bounded in size.

A document may carry 64 metadata values of 4,000 characters each, and every hit of a search repeats
its chunk's metadata: one tenant asking with top_k 50 over such documents made each reply ~12 MB,
encoded here, parsed by the gateway, kept in its scope entry and streamed out with the citations --
CPU taken from every tenant on the same cores. A search reply therefore carries each metadata value
up to REPLY_VALUE_CHARS characters; a longer one is cut and says so (CUT_MARK and the characters left
out), so a reply's metadata is at most 64 x ~280 characters a hit whatever a tenant stores. The whole
value stays readable where one chunk or document is read (GetChunk, GetDocument)."""
from __future__ import annotations

import dataclasses

from ragmesh.types import Hit

REPLY_VALUE_CHARS = 256  # names, places, types, tags and ids fit whole; free text beyond this is cut
CUT_MARK = "…[cut: {} more characters]"


def cut(value: str) -> str:
    """`value` whole, or its first REPLY_VALUE_CHARS characters and a mark saying how much was left out."""
    if len(value) <= REPLY_VALUE_CHARS:
        return value
    return value[:REPLY_VALUE_CHARS] + CUT_MARK.format(len(value) - REPLY_VALUE_CHARS)


def bounded(hits: list[Hit]) -> list[Hit]:
    """The hits with their chunks' long metadata values cut (copies: the index's chunks are shared)."""
    return [h if all(len(v) <= REPLY_VALUE_CHARS for v in h.chunk.metadata.values()) else
            dataclasses.replace(h, chunk=dataclasses.replace(
                h.chunk, metadata={k: cut(v) for k, v in h.chunk.metadata.items()}))
            for h in hits]
