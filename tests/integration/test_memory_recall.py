"""Conversation memory recall (bench/memory_recall.py, tests/data/memory_recall.yaml): 40 past turns written as
the gateway writes them, then 28 later questions searched through the memory source as the planner searches it.
A later question must find what the past answer said, whether it asks the past question again in other words or
matches only something in the answer: that is what conversation memory is for, whatever it costs to write."""
from __future__ import annotations

import pytest

from bench.memory_recall import RECALL_FLOOR, Found, load_set, probe, recall, remember
from tests.stack import Stack

# Recall at 5 hits (a specific question's context), by the later question's kind: the share for which a hit holds
# the fact of the past answer it needs (RECALL_FLOOR), and the share whose past turn is among the hits at all.
TURN_RECALL_FLOOR = {"question": 0.95, "answer": 0.9}


@pytest.fixture(scope="module")
def found(stack: Stack) -> list[Found]:
    turns, probes = load_set()
    memory = stack.app("gateway").memory
    owner = stack.call(remember(memory, "recall", "reader", turns), timeout=600)
    return stack.call(probe(memory, "recall", "reader", probes, owner), timeout=600)


@pytest.mark.parametrize("kind", ["question", "answer"])
def test_a_later_question_finds_what_the_past_answer_said(found: list[Found], kind: str) -> None:
    missed = [f for f in found if f.probe.kind == kind and not 0 < f.fact_rank <= 5]
    assert recall(found, 5, kind, by_fact=True) >= RECALL_FLOOR[kind], missed


@pytest.mark.parametrize("kind", ["question", "answer"])
def test_a_later_question_finds_its_past_turn(found: list[Found], kind: str) -> None:
    missed = [f for f in found if f.probe.kind == kind and not 0 < f.turn_rank <= 5]
    assert recall(found, 5, kind, by_fact=False) >= TURN_RECALL_FLOOR[kind], missed


def test_another_users_later_questions_find_nothing_of_it(stack: Stack, found: list[Found]) -> None:
    _, probes = load_set()
    memory = stack.app("gateway").memory
    others = stack.call(probe(memory, "recall", "someone-else", probes[:4], {}), timeout=120)
    assert all(f.fact_rank == 0 for f in others), others
