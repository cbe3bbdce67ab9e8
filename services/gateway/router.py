"""Which path a question takes, decided by rules in this order:

1. DIRECT    turns that are not questions: greetings, thanks, acknowledgements, "what else?", "what is your
             name" (the reading's `small_talk`): answered without retrieval, from the conversation.
2. NO_RAG    a follow-up that reworks what the conversation already holds ("summarize that", "why?"
             after searched answers, nothing new, filters unchanged): answered from the conversation
             (the scope cache's NO_RAG). Whether it does is decided before routing (services/gateway/followup.py).
3. DEEP      reasoning keywords: deep-reasoner prompt, reasoning model, 15 chunks, threshold 0.6 (the
             deep-reasoner path), before the summary path, so "compare"/"why" over one document reasons
             over its chunks.
4. SUMMARY   summary keywords with a single document in scope: its pre-computed summary (the summary path);
             asked for its chapters or table of contents ("list the chapters"), its outline: the section titles.
5. LOOKUP    "question 6" style references: fetch that item directly (question lookup); "all the
             questions" with no number: every numbered item.
6. SPECIFIC  the default: 5 chunks at threshold 0.7 for pointed questions, 10 at 0.5 for general ones
             (the specific hybrid path).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.gateway.followup import Followup
from services.gateway.question_lookup import ALL_QUESTIONS_K
from services.gateway.reading import Reading

DIRECT, NO_RAG, SUMMARY, DEEP, LOOKUP, SPECIFIC = "DIRECT", "NO_RAG", "SUMMARY", "DEEP", "LOOKUP", "SPECIFIC"
FALLBACK_SIMILARITY = 0.3  # the second similarity threshold layer
# Asking for a document's outline ("table of contents", "list the chapters", "what chapters does it have"), not
# for what a chapter says ("which chapters discuss lenses?" searches).
_CONTENTS = re.compile(
    r"\b(table of contents|(?:list|show|name|give me)\b[\w ]{0,20}?\b(?:chapters|sections)"
    r"|(?:what|which|how many) (?:chapters|sections)\b(?![\w ,']*\b(?:about|on|cover|covers|discuss|"
    r"discusses|mention|mentions|explain|explains|say|says|deal|deals|talk|talks|describe|describes)\b))", re.I)


@dataclass(frozen=True)
class Route:
    name: str
    reason: str
    k: int = 0  # chunks for the context (0: no retrieval)
    min_similarity: float = 0.0
    prompt: str = "fund_research"
    question_numbers: tuple[str, ...] = ()
    all_questions: bool = False  # every numbered item ("all the questions", naming none)
    contents: bool = False  # SUMMARY asked for the document's outline (its section titles), not its summary

    @property
    def retrieves(self) -> bool:
        return self.k > 0


def route(reading: Reading, followup: Followup | None, documents_in_scope: int, specific_k: int = 5,
          general_k: int = 10, deep_k: int = 15) -> Route:
    """`reading`: the question's; `followup`: whether it reworks what the conversation holds (None: not
    known yet, so not a rework)."""
    if reading.small_talk:
        return Route(DIRECT, f"not a question ({reading.small_talk}): answered from the conversation, no search")
    if followup is not None and followup.rework:
        return Route(NO_RAG, followup.describe())
    if reading.reasoning:
        return Route(DEEP, f"reasoning keyword {reading.reasoning!r}", deep_k, 0.6, "deep_reasoner")
    contents = _CONTENTS.search(reading.text)
    if contents and documents_in_scope == 1:
        return Route(SUMMARY, f"table-of-contents keyword {contents.group(1).lower()!r} with one document in scope",
                     contents=True)
    if reading.summary and documents_in_scope == 1:
        return Route(SUMMARY, f"summary keyword {reading.summary!r} with one document in scope")
    if numbers := reading.numbers:
        return Route(LOOKUP, f"refers to item {', '.join(numbers)}", specific_k, 0.0, "fund_research", numbers)
    if reading.all_questions:
        return Route(LOOKUP, "asks for all the questions, naming none", ALL_QUESTIONS_K, 0.0, all_questions=True)
    if reading.general:
        return Route(SPECIFIC, "general question", general_k, 0.5)
    return Route(SPECIFIC, "specific question", specific_k, 0.7)
