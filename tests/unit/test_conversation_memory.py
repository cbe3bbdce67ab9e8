"""What a prompt carries of a conversation (`History.remembered`) and how the running summary follows
it (`Memory`): whole while it fits the budget; past it, the summary of the turns that stopped fitting
and every turn after them, so at no turn is an earlier one in neither, even while the summary lags."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ragmesh.models import EXTRACTIVE
from ragmesh.store.sqlite import SqliteStore
from services.gateway.history import OVERFLOW, History, coverage, with_coverage
from services.gateway.memory import Memory

TURN_CHARS = 100  # each turn below: a 20-character question and an 80-character answer
BUDGET = 350  # three turns fit


@pytest.fixture
def history(tmp_path: Path) -> History:
    store = SqliteStore(tmp_path / "m.db")
    store.ensure_conversation("t", "u", "c")
    return History(store)


def _turn(history: History, i: int) -> None:
    history.store.add_message("c", "user", f"question {i:02d} fact{i}".ljust(20), {})
    history.store.add_message("c", "assistant", f"answer {i:02d}".ljust(80, "."), {})


def _turns(history: History, n: int) -> None:
    for i in range(1, n + 1):
        _turn(history, i)


def _carried(history: History, budget: int = BUDGET) -> tuple[set[int], int]:
    """(turns carried verbatim, turns the summary covers) of the prompt for the next question."""
    remembered = history.remembered("c", history.recent("c", 3), budget)
    covered = remembered.covered if remembered.summary else 0
    return {int(t.question.split()[1]) for t in remembered.turns}, covered


def _summarise(history: History, budget: int = BUDGET) -> None:
    memory = Memory(history.store, None, None, None, budget)  # type: ignore[arg-type]  # offline: no clients used
    asyncio.run(memory._summarize("c", EXTRACTIVE))


@pytest.mark.parametrize("n", range(1, 4))
def test_a_conversation_that_fits_is_carried_whole(history: History, n: int) -> None:
    _turns(history, n)
    assert _carried(history) == (set(range(1, n + 1)), 0)


@pytest.mark.parametrize("n", range(4, 13))
def test_no_turn_is_ever_in_neither_summary_nor_prompt(history: History, n: int) -> None:
    """Turn by turn, the summary folded after some answers and not after others (it lags)."""
    for turn in range(1, n + 1):
        _turn(history, turn)
        if turn % 3:  # the background summary ran after this answer
            _summarise(history)
        carried, covered = _carried(history)
        assert set(range(1, covered + 1)) | carried == set(range(1, turn + 1)), f"after turn {turn}"
        assert min(carried) <= covered + 1


def test_a_summary_that_caught_up_keeps_the_prompt_within_the_budget(history: History) -> None:
    _turns(history, 8)
    _summarise(history)
    carried, covered = _carried(history)
    assert (carried, covered) == ({6, 7, 8}, 5)
    summary, turns = coverage(history.store.conversation_summary("c"))
    assert turns == 5 and all(f"fact{i}" in summary for i in range(1, 6))


def test_without_a_summary_the_turns_are_carried_up_to_the_overflow(history: History) -> None:
    """A summary that cannot be made (the model down) lets the carried turns grow to OVERFLOW x budget."""
    _turns(history, 20)
    carried, covered = _carried(history)
    assert covered == 0 and len(carried) == OVERFLOW * BUDGET // TURN_CHARS


def test_summary_coverage_round_trips_and_an_unmarked_summary_covers_nothing() -> None:
    assert coverage(with_coverage("the gist", 7)) == ("the gist", 7)
    assert coverage("an old summary") == ("an old summary", 0)
