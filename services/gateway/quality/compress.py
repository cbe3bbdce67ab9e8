"""Contextual compression: each chunk is cut by the model to the sentences needed
to answer the question, copied word for word, with "[Partial]: " or "[Conflicting]: " in front
when they answer only part of it or contradict each other. A sentence the chunk does not hold is
dropped (the model may quote, never add), and a reply with none of the chunk's sentences leaves
the chunk whole."""
from __future__ import annotations

import re

from ragmesh.text import split_sentences

SYSTEM = "You compress retrieved excerpts for a question-answering assistant, copying sentences verbatim."
NOTHING = "NONE"
MARKERS = ("[Partial]: ", "[Conflicting]: ")
_MARKER = re.compile(r"^\s*\[(partial|conflicting)\]:?\s*", re.I)


def prompt(question: str, text: str) -> str:
    return (f"Question: {question}\n\nExcerpt:\n{text}\n\n"
            f"Copy, word for word, only the sentences of the excerpt that are directly needed to answer the "
            f"question. Start your reply with \"[Partial]: \" when they answer only part of the question, or "
            f"with \"[Conflicting]: \" when they contradict each other. Reply {NOTHING} when no sentence helps.")


def _plain(text: str) -> str:
    return " ".join(text.lower().split())


def compressed(reply: str, original: str) -> str | None:
    """The compressed chunk: "" when the model found nothing relevant, None when its reply holds none
    of the chunk's sentences (unusable: keep the chunk whole)."""
    if reply.strip().strip(".").upper() == NOTHING:
        return ""
    marker = ""
    if m := _MARKER.match(reply):
        marker = MARKERS[0] if m[1].lower() == "partial" else MARKERS[1]
        reply = reply[m.end():]
    whole = _plain(original)
    kept = [s for s in split_sentences(reply) if _plain(s) and _plain(s) in whole]
    return marker + " ".join(kept) if kept else None
