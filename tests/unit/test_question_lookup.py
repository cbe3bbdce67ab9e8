"""001's lookup by question number: which questions ask for every numbered item (strategy 2), and the
route they take; a question that merely says "questions" is not one of them."""
from __future__ import annotations

import datetime as dt

import pytest

from services.gateway import router
from services.gateway.question_lookup import ALL_QUESTIONS_K, asks_all_questions
from services.gateway.reading import read


@pytest.mark.parametrize("question", ["Go through all the questions", "Explain each of the questions",
                                      "Answer every question", "Explain the questions in this document",
                                      "walk me through all of the exercises"])
def test_all_the_questions_take_the_lookup_route_for_every_item(question: str) -> None:
    assert asks_all_questions(question)
    chosen = router.route(read(question, dt.date(2026, 1, 15)), None, 0)
    assert (chosen.name, chosen.all_questions, chosen.k, chosen.question_numbers) == (
        router.LOOKUP, True, ALL_QUESTIONS_K, ())


@pytest.mark.parametrize("question", ["What are the questions raised about Kestrel liquidity?",
                                      "What questions did the IC raise?", "Answer question 6",
                                      "explain all questions 1 to 3"])
def test_other_questions_do_not(question: str) -> None:
    assert not asks_all_questions(question)
    assert not router.route(read(question, dt.date(2026, 1, 15)), None, 0).all_questions
