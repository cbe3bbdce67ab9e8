"""LLM rerank: the best fused candidates go to the model in one batch, which scores
each excerpt 0-10 for relevance to the question; candidates are reordered by that score (ties
and unscored ones keep their fused order, behind the scored ones)."""
from __future__ import annotations

import re

from ragmesh.types import Hit

EXCERPT_CHARS = 700  # of each candidate in the prompt: enough to judge, a bounded prompt

SYSTEM = "You judge how relevant document excerpts are to a question."
_SCORE = re.compile(r"^\W*(?:excerpt\s*)?#?(\d{1,3})\W+?(10(?:\.0+)?|\d(?:\.\d+)?)\b", re.I)


def prompt(question: str, hits: list[Hit]) -> str:
    excerpts = "\n\n".join(f"Excerpt {i}:\n{h.chunk.text[:EXCERPT_CHARS]}" for i, h in enumerate(hits, start=1))
    return (f"Question: {question}\n\nScore how relevant each excerpt is to the question, from 0 (unrelated) "
            f"to 10 (answers it). Reply with one line per excerpt, written as <excerpt number>: <score>, "
            f"and nothing else.\n\n{excerpts}")


def scores(reply: str, count: int) -> dict[int, float]:
    """Excerpt number (1-based) -> score, for the lines of the reply that name an excerpt in range."""
    found: dict[int, float] = {}
    for line in reply.splitlines():
        if (m := _SCORE.match(line)) and 1 <= int(m[1]) <= count:
            found.setdefault(int(m[1]), float(m[2]))
    return found


def reorder(hits: list[Hit], scored: dict[int, float]) -> list[Hit]:
    """The scored hits by score, best first, then the unscored in their order."""
    rank = sorted(range(len(hits)), key=lambda i: (-scored.get(i + 1, -1.0), i))
    return [hits[i] for i in rank]
