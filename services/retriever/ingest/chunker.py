"""Sentence-aware chunking: chunks of about min..max characters that never cut a
sentence, with the previous chunk's last sentence repeated for continuity."""
from __future__ import annotations

from ragmesh.text import split_sentences

def chunk_text(text: str, min_chars: int = 400, max_chars: int = 800, overlap: int = 1) -> list[str]:
    """Packs whole sentences into chunks; a sentence longer than max_chars stands alone."""
    sentences = split_sentences(text)
    chunks: list[list[str]] = []
    current: list[str] = []
    fresh = 0  # sentences in `current` that are not overlap from the previous chunk

    def length(parts: list[str]) -> int:
        return sum(len(p) for p in parts) + max(len(parts) - 1, 0)

    for sentence in sentences:
        if current and fresh and length(current + [sentence]) > max_chars:
            chunks.append(current)
            carried = current[-overlap:] if overlap else []
            # Carry overlap only while it leaves room for new text.
            if length(carried + [sentence]) > max_chars:
                carried = []
            current, fresh = list(carried), 0
        current.append(sentence)
        fresh += 1
    if current and fresh:
        # A short tail joins the previous chunk when that stays within bounds.
        if chunks and length(current) < min_chars // 2:
            tail = current[overlap:] if overlap and len(current) > overlap else current
            merged = chunks[-1] + tail
            if length(merged) <= max_chars + min_chars // 2:
                chunks[-1] = merged
                return [" ".join(c) for c in chunks]
        chunks.append(current)
    return [" ".join(c) for c in chunks]
