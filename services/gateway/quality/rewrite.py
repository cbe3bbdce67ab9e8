"""Intent-aware query expansion: the question's intent (factual, procedural,
exploratory, temporal) is read by rules, which costs no model round trip, and one model call
rewrites the question with that intent's instructions into at most MAX_VARIANTS more search
queries. The retriever fuses every variant's lists with the question's (at most 4 queries)."""
from __future__ import annotations

import re

MAX_VARIANTS = 3  # with the question itself: at most 4 queries
MAX_VARIANT_CHARS = 300

SYSTEM = "You rewrite questions into search queries for a document search engine."
GUIDANCE = {
    "procedural": "The user wants to know how to do something: target instructions, steps, processes and "
                  "how-to wording.",
    "temporal": "The user asks about a time or period: keep the time reference, and name the period in other "
                "ways (dates, months, quarters, years).",
    "factual": "The user wants one fact: target that same fact with other words (synonyms, full names of "
               "the people, funds or things named, the figure or field asked for).",
    "exploratory": "The user explores a topic: cover different aspects of it, broader and narrower.",
}
_RULES = (
    ("procedural", re.compile(r"\b(how (to|do|does|can|should)|steps?|process|procedure|guide|set ?up|configure|"
                              r"install)\b", re.I)),
    ("temporal", re.compile(r"\b(when|latest|recent(ly)?|last|this (week|month|quarter|year)|since|before|after|"
                            r"yesterday|today|ago|q[1-4]|(19|20)\d\d|january|february|march|april|may|june|july|"
                            r"august|september|october|november|december)\b", re.I)),
    ("factual", re.compile(r"^\s*(what|who|which|where|how (much|many)|is|are|was|were|does|did|do|can|"
                           r"has|have)\b", re.I)),
)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.):]|query \d+:)\s*", re.I)


def intent(question: str) -> str:
    """factual | procedural | exploratory | temporal, first matching rule in that order of checks."""
    for name, rule in _RULES:
        if rule.search(question):
            return name
    return "exploratory"


def prompt(question: str, kind: str) -> str:
    return (f"Intent: {kind}. {GUIDANCE[kind]}\n"
            f"Write {MAX_VARIANTS} alternative search queries for the question below, one per line, "
            f"with no numbering and no commentary.\nQuestion: {question}")


def variants(reply: str, question: str) -> list[str]:
    """The distinct queries of the reply, other than the question, at most MAX_VARIANTS."""
    seen = {question.strip().lower()}
    found: list[str] = []
    for line in reply.splitlines():
        query = _BULLET.sub("", line).strip().strip('"\'').strip()
        if query and len(query) <= MAX_VARIANT_CHARS and query.lower() not in seen:
            seen.add(query.lower())
            found.append(query)
    return found[:MAX_VARIANTS]
