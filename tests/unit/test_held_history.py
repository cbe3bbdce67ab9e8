"""A conversation the client holds, read as a stored one is (services/gateway/history.py): its newest
turns for routing, its newest that fit the budget for the prompt, and the id that names it."""
from __future__ import annotations

import re

import pytest

from ragmesh.types import Turn
from services.gateway.history import held_conversation_id, held_recent, held_remembered

TURNS = [Turn(f"q{i}", "a" * 98) for i in range(5)]  # 100 characters each


@pytest.mark.parametrize(("keep", "newest"), [(0, 0), (3, 3), (5, 5), (8, 5)])
def test_held_recent_counts_every_turn_and_keeps_the_newest(keep: int, newest: int) -> None:
    recent = held_recent(TURNS, keep)
    assert recent.count == 5 and recent.turns == TURNS[5 - newest:]


@pytest.mark.parametrize(("budget", "newest"), [(1000, 5), (300, 3), (299, 2), (10, 1)])
def test_held_remembered_carries_the_newest_turns_that_fit_and_no_summary(budget: int, newest: int) -> None:
    remembered = held_remembered(TURNS, budget)
    assert remembered.turns == TURNS[5 - newest:] and remembered.summary == "" and remembered.covered == 0
    assert held_remembered([], budget).turns == []


def test_a_held_id_is_per_tenant_user_and_first_question_and_never_a_stored_ones() -> None:
    held = held_conversation_id("t", "u", "What did Kestrel do?")
    assert held == held_conversation_id("t", "u", "What did Kestrel do?"), "every turn names the same"
    assert held.startswith("held-") and not re.fullmatch(r"[0-9a-f]{32}", held), "stored ids are uuid4().hex"
    others = {held_conversation_id(*who) for who in [("t2", "u", "What did Kestrel do?"),
                                                     ("t", "u2", "What did Kestrel do?"), ("t", "u", "Other?"),
                                                     ("tu", "", "What did Kestrel do?")]}
    assert len(others) == 4 and held not in others
