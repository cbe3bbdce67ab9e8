"""The context as the fund-research layout lays it out: blocks grouped by where they came from, each group under its
header (`=== MEETING NOTES (RAG Retrieved) ===`; the factsheets' group says how many factsheets and
sections matched), in a fixed order. Blocks keep their [n] numbers (best first), so citations do not move."""
from __future__ import annotations

from dataclasses import dataclass

HEADERS = {
    "meeting_notes": "=== MEETING NOTES (RAG Retrieved) ===",
    "factsheets": "=== RELEVANT FACTSHEET DATA (RAG Retrieved) ===",
    "documents": "=== DOCUMENTS (RAG Retrieved) ===",
    "conversations": "=== EARLIER CONVERSATIONS (RAG Retrieved) ===",
}


@dataclass(frozen=True)
class RenderedBlock:
    collection: str
    text: str
    sections: int  # the hits the block holds (a factsheet's matching sections)


def header(collection: str, blocks: list[RenderedBlock]) -> str:
    title = HEADERS.get(collection) or f"=== {collection.replace('_', ' ').upper()} (RAG Retrieved) ==="
    if collection != "factsheets":
        return title
    sections = sum(b.sections for b in blocks)
    return f"{title}\nFound {len(blocks)} unique factsheet(s) with {sections} relevant section(s)"


def sectioned(blocks: list[RenderedBlock]) -> str:
    """The blocks under their collections' headers: the fund-research collections first, then others as they come."""
    groups: dict[str, list[RenderedBlock]] = {c: [] for c in HEADERS}
    for block in blocks:
        groups.setdefault(block.collection, []).append(block)
    return "\n\n".join(f"{header(c, group)}\n\n" + "\n---\n".join(b.text for b in group)
                       for c, group in groups.items() if group)
