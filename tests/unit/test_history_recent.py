"""Before every answer the gateway reads only the newest messages of a conversation and counts its
turns in the store (`History.recent`): the same count and last turns as reading it whole."""
from __future__ import annotations

from pathlib import Path

import pytest

from ragmesh.store.sqlite import SqliteStore
from services.gateway.history import History, _pairs


@pytest.fixture
def history(tmp_path: Path) -> History:
    store = SqliteStore(tmp_path / "h.db")
    store.ensure_conversation("t", "u", "c")
    return History(store)


def _say(history: History, *roles: str) -> None:
    for role in roles:
        history.store.add_message("c", role, f"{role} {len(history.store.messages('c'))}", {})


@pytest.mark.parametrize("keep", [1, 3, 5])
def test_recent_is_the_whole_reads_count_and_last_turns(history: History, keep: int) -> None:
    assert history.recent("c", keep).count == 0 and history.recent("c", keep).turns == []
    for n in range(1, 12):
        _say(history, "user", "assistant")
        whole = _pairs(history.store.messages("c"))
        recent = history.recent("c", keep)
        assert recent.count == len(whole) == n and recent.turns == whole[-keep:]
    _say(history, "user")  # a question under way: not a turn yet
    recent = history.recent("c", keep)
    assert recent.count == 11 and recent.turns == _pairs(history.store.messages("c"))[-keep:]


def test_recent_of_nothing_kept_still_counts(history: History) -> None:
    _say(history, "user", "assistant", "user", "assistant")
    assert history.recent("c", 0).count == 2 and history.recent("c", 0).turns == []
