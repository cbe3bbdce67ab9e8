"""Words asking for the latest become the retriever's time decay; DEFAULT_WINDOW_DAYS is read per data
source; the decay is counted from the newest hit when it would be at its floor for all of them."""
from __future__ import annotations

import pytest

from services.gateway import boosts
from services.gateway.query_analysis import recency_phrase, reported_period


@pytest.mark.parametrize(("question", "phrase"), [
    ("What is the latest on Kestrel?", "latest"),
    ("What are the most recent notes on Altair?", "most recent"),
    ("Show me the newest factsheet", "newest"),
    ("What is Meridian's current AUM?", "current"),
    ("Where does Northwind stand as of now?", "as of now"),
    ("What has Solstice done recently?", "recently"),
    ("What did Kestrel do with Brazil in March 2024?", ""),
    ("Who manages Altair Credit Opportunities?", ""),
])
def test_recency_phrase(question: str, phrase: str) -> None:
    assert recency_phrase(question) == phrase


def test_the_decay_goes_to_every_collection_asked_with_recency() -> None:
    ranking = boosts.Ranking(0.3, "c", now="2025-12-10", half_life_days=30, decay_floor=0.3)
    for collection in ("meeting_notes", "conversations", "documents"):
        b = boosts.options(collection, ranking)["boosters"]
        assert (b["half_life_days"], b["decay_floor"]) == (30, 0.3)
    assert "half_life_days" not in boosts.options("meeting_notes", boosts.Ranking(0.7, "c"))["boosters"]


@pytest.mark.parametrize(("newest", "flat"), [("2025-12-03", False), ("2025-11-05", False), ("2025-11-01", True),
                                              ("2024-10-02", True), ("", False), ("2025-13", False)])
def test_flat_when_the_newest_hit_is_past_the_floor_age(newest: str, flat: bool) -> None:
    """30-day half-life, floor 0.3: the decay reaches its floor after 30 x ln(1 / 0.3) = 36.1 days."""
    ranking = boosts.Ranking(0.3, "c", now="2025-12-10", half_life_days=30, decay_floor=0.3)
    assert ranking.flat_for(newest) is flat
    assert not boosts.Ranking(0.3, "c", now="2025-12-10").flat_for(newest), "no decay asked for"


def test_default_windows_per_data_source() -> None:
    assert boosts.default_windows("Conversation memory=90, Meeting Notes=30, Factsheet=0") == {
        "conversations": 90, "meeting_notes": 30}
    assert boosts.default_windows("") == {}
    for bad in ("Notes=90", "Meeting Notes=ninety", "Meeting Notes"):
        with pytest.raises(ValueError, match="DEFAULT_WINDOW_DAYS"):
            boosts.default_windows(bad)


@pytest.mark.parametrize(("question", "end"), [
    ("What was Orion's 2025 full-year return?", "2025-12-31"),
    ("What was the full year 2024 return?", "2024-12-31"),
    ("AUM at year-end 2023?", "2023-12-31"),
    ("How did FY2025 go?", "2025-12-31"),
    ("What did Orion return in 2025?", ""),
    ("What is the latest 2025 full-year figure?", ""),  # recency words: the decay counts from today
])
def test_a_whole_year_asked_about_ranks_from_the_year_s_end(question: str, end: str) -> None:
    """What reports on a year is dated at its end or after: the decay counts from the year's end, so a
    mid-year report (six months before) scores well below the year-end one."""
    latest = dict(half_life_days=30, decay_floor=0.3) if recency_phrase(question) else {}
    ranking, note = boosts.toward_period(boosts.Ranking(0.7, "c", now="2026-03-01", **latest), reported_period(question))
    b = boosts.options("factsheets", ranking)["boosters"]
    if end:
        assert (b["now"], b["half_life_days"]) == (end, boosts.PERIOD_HALF_LIFE_DAYS) and end in note
    else:
        assert b["now"] == "2026-03-01" and note == ""
