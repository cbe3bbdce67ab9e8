"""The question-number lookup of documents, as a filter on the `question_number` metadata field:
strategy 1, the numbered items a question names ("explain question 6"); strategy 2, every numbered
item when it asks for all the questions and names none ("go through all the questions")."""
from __future__ import annotations

import dataclasses
import re

from ragmesh.clients import RetrieverClient
from ragmesh.types import SearchFilter

FIELD = "question_number"
ALL_QUESTIONS_K = 30  # numbered items in the context when all are asked for
_ITEMS = r"(?:questions?|problems?|exercises?)"
_ALL = re.compile(rf"\b(?:all|every|each)\s+(?:of\s+)?(?:the\s+)?{_ITEMS}\b|"
                  rf"\bthe\s+{_ITEMS}\s+(?:in|of|from)\s+(?:the|this)\s+(?:document|file|exam|paper|test|worksheet)\b",
                  re.I)


def asks_all_questions(question: str) -> bool:
    """"Explain all the questions", "answer each question", "the problems in this worksheet" (no number
    named); not any question that says "questions" ("what questions did the IC raise?")."""
    return bool(_ALL.search(question)) and not re.search(r"\d", question)


def _natural(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


async def numbered_filter(retriever: RetrieverClient, numbers: tuple[str, ...], all_questions: bool,
                          f: SearchFilter, collection: str) -> SearchFilter | None:
    """`f` narrowed to the numbered items asked for; for all of them, every number the collection
    holds (the retriever's distinct values of the field). None when there is nothing to look up."""
    wanted = list(numbers)
    if not wanted and all_questions:
        wanted = sorted(await retriever.field_values(FIELD, [collection]), key=_natural)[:ALL_QUESTIONS_K]
    if not wanted:
        return None
    return dataclasses.replace(f, any_of={**f.any_of, FIELD: wanted})
