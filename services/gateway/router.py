"""Rule-based intent, no model call: a follow-up that transforms the previous answer
("summarize that", "explain") with at least two earlier turns needs no retrieval."""
from __future__ import annotations

import re

NO_RAG = "NO_RAG"
NEW_QUERY = "NEW_QUERY"

TRANSFORM_PATTERNS = (
    "summarize", "summary", "list", "compare", "contrast", "tell me more", "explain",
    "elaborate", "what do you mean", "can you clarify", "in other words", "why", "how",
    "what about the", "regarding the", "about the above",
)
_PATTERN = re.compile(r"\b(" + "|".join(re.escape(p) for p in TRANSFORM_PATTERNS) + r")\b", re.I)


def classify_intent(question: str, history_turns: int) -> tuple[str, str]:
    """(intent, reason)."""
    match = _PATTERN.search(question)
    if match and history_turns >= 2:
        return NO_RAG, f"follow-up pattern {match.group(1).lower()!r} with {history_turns} earlier turns"
    if match:
        return NEW_QUERY, f"pattern {match.group(1).lower()!r} but only {history_turns} earlier turns"
    return NEW_QUERY, "no follow-up pattern"
