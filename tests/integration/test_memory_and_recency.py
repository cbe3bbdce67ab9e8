"""A conversation's first turn is never lost from the prompt, recency words reach the retriever's time
decay, 002's default window falls back to the most recent notes, and a date read from the question that
would leave nothing is relaxed (one the user set is not). Asked through POST /api/chat/ask on the demo
corpus; the Search requests the retriever received are recorded (the `searches` fixture)."""
from __future__ import annotations

import datetime as dt

import pytest

from services.gateway.pipeline import NO_MATCH
from tests.integration.test_boosters_from_ask import Searches, ask, searches  # noqa: F401 (the fixture)
from tests.stack import Stack

KESTREL = "Kestrel Emerging Markets"
# Turn 1 holds the Brazil fact; no later question or answer mentions Brazil.
FIRST = "What did Kestrel do with its Brazil exposure in March 2024?"
LATER = [
    "Who joined Harborview as head of short research?",
    "Which Altair executive left in June 2024?",
    "What did Altair recover on Vantor Telecom?",
    "When did Meridian close to new investors?",
    "What premium was paid for Brightwater Bio?",
    "What did the Corveth Therapeutics trial failure cost Solstice?",
    "What was Meridian's return in July 2024?",
]


@pytest.fixture(scope="module", autouse=True)
def memory_idle_after(stack: Stack):
    """The module's background memory work is done before the next module's tests start."""
    yield
    stack.call(stack.app("gateway").memory.idle())


@pytest.fixture
def prompts(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The prompt of every answer the gateway asks the generator for, in order."""
    pipeline = stack.app("gateway").pipeline
    generate = pipeline.generator.generate
    sent: list[str] = []

    def recording(**kwargs):
        sent.append(kwargs["prompt"])
        return generate(**kwargs)

    monkeypatch.setattr(pipeline.generator, "generate", recording)
    return sent


def _budget(stack: Stack, monkeypatch: pytest.MonkeyPatch, chars: int) -> None:
    gateway = stack.app("gateway")
    planner = gateway.pipeline.planner
    monkeypatch.setattr(planner, "settings", planner.settings.replace(history_char_budget=chars))
    monkeypatch.setattr(gateway.memory, "history_char_budget", chars)


@pytest.mark.parametrize("settle", [True, False], ids=["summary-caught-up", "summary-still-running"])
def test_turn_one_is_in_every_prompt_up_to_turn_eight(stack: Stack, prompts: list[str],
                                                      monkeypatch: pytest.MonkeyPatch, settle: bool) -> None:
    """Past the budget the running summary holds turn 1; while the summary is still being made, turn 1
    is carried verbatim instead: at no turn is it in neither."""
    gateway = stack.app("gateway")
    _budget(stack, monkeypatch, 1500)
    first = ask(stack.http_url, stack.headers, FIRST)
    assert "Brazil" in first["answer"]
    conv = first["conversation_id"]
    for turn, question in enumerate(LATER, start=2):
        if settle:
            stack.call(gateway.memory.idle())
        ask(stack.http_url, stack.headers, question, conversation_id=conv)
        if turn >= 4:
            assert "Brazil" in prompts[-1], f"turn {turn}: turn 1 is in neither the summary nor the turns"
    stack.call(gateway.memory.idle())
    summary = gateway.store.conversation_summary(conv)
    assert summary.startswith("Turns 1-") and FIRST in summary
    if settle:  # caught up: turn 1 is summarised, not repeated verbatim
        assert "Conversation summary:" in prompts[-1] and f"User: {FIRST}" not in prompts[-1]


def test_a_short_conversation_is_carried_whole(stack: Stack, prompts: list[str]) -> None:
    conv = ask(stack.http_url, stack.headers, FIRST)["conversation_id"]
    for question in LATER[:4]:
        ask(stack.http_url, stack.headers, question, conversation_id=conv)
    assert all(f"User: {q}" in prompts[-1] for q in [FIRST, *LATER[:3]])
    assert "Conversation summary:" not in prompts[-1]


@pytest.mark.parametrize("question", ["What is the latest on Kestrel?", "What are Kestrel's current holdings?",
                                      "Where does Kestrel stand as of now?"])
def test_recency_words_send_the_decay_and_newer_notes_rank_first(stack: Stack, searches: Searches,
                                                                 monkeypatch: pytest.MonkeyPatch, question: str) -> None:
    monkeypatch.setattr(stack.app("gateway").pipeline.planner, "today", lambda: dt.date(2025, 12, 10))
    body = ask(stack.http_url, stack.headers, question, data_sources=["Meeting Notes"])
    strategy = body["meta"]["strategy"]
    assert strategy["recency"] and "time decay" in strategy["reason"]
    query, outcome = searches.of("meeting_notes")[0]
    assert (query.boosters.half_life_days, query.boosters.decay_floor) == (pytest.approx(30), pytest.approx(0.3))
    assert outcome.hits[0].chunk.doc_id == "mn-kestrel-2025-12-03"
    assert body["citations"][0]["doc_id"] == "mn-kestrel-2025-12-03"


def test_without_recency_words_the_older_note_that_matches_best_wins(stack: Stack, searches: Searches,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack.app("gateway").pipeline.planner, "today", lambda: dt.date(2025, 12, 10))
    body = ask(stack.http_url, stack.headers, "What is Kestrel doing?", data_sources=["Meeting Notes"])
    assert body["meta"]["strategy"]["recency"] == ""
    assert searches.of("meeting_notes")[0][0].boosters.half_life_days == 0


def test_recency_on_a_corpus_with_nothing_recent_counts_from_the_newest_note(stack: Stack, searches: Searches,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A year on, every note is past the decay's floor: it counts from the newest note instead."""
    monkeypatch.setattr(stack.app("gateway").pipeline.planner, "today", lambda: dt.date(2026, 12, 10))
    body = ask(stack.http_url, stack.headers, "What is the latest on Kestrel?", data_sources=["Meeting Notes"])
    (first, _), (second, outcome) = searches.of("meeting_notes")
    assert first.boosters.now == "2026-12-10" and second.boosters.now == "2025-12-03"
    assert outcome.hits[0].chunk.doc_id == body["citations"][0]["doc_id"] == "mn-kestrel-2025-12-03"


def test_default_window_searches_the_last_90_days(stack: Stack, searches: Searches,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    planner = stack.app("gateway").pipeline.planner
    monkeypatch.setattr(planner, "windows", {"meeting_notes": 90})
    monkeypatch.setattr(planner, "today", lambda: dt.date(2025, 12, 10))
    body = ask(stack.http_url, stack.headers, "What did Altair say about its credit book?",
               data_sources=["Meeting Notes", "Factsheet"])
    strategy = body["meta"]["strategy"]
    assert strategy["default_window"] == {"meeting_notes": 90} and strategy["relaxed"] == []
    [(notes, outcome)] = searches.of("meeting_notes")
    assert (notes.filter.start_date, notes.filter.end_date) == ("2025-09-11", "2025-12-10")
    assert outcome.hits and all("2025-09-11" <= h.chunk.date for h in outcome.hits)
    [(sheets, _)] = searches.of("factsheets")
    assert sheets.filter.start_date == "", "a source without a window searches every date"


def test_an_empty_default_window_falls_back_to_the_most_recent_notes(stack: Stack, searches: Searches,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    planner = stack.app("gateway").pipeline.planner
    monkeypatch.setattr(planner, "windows", {"meeting_notes": 90})
    monkeypatch.setattr(planner, "today", lambda: dt.date(2026, 9, 1))
    body = ask(stack.http_url, stack.headers, "What did Altair say about its credit book?",
               data_sources=["Meeting Notes"])
    strategy = body["meta"]["strategy"]
    assert strategy["relaxed"] == ["meeting_notes: nothing in the last 90 days: every date, most recent first"]
    assert "most recent first" in strategy["reason"]
    windowed, *fallback = searches.of("meeting_notes")
    assert windowed[0].filter.start_date == "2026-06-03" and not windowed[1].hits
    query, outcome = fallback[-1]
    assert query.filter.start_date == "" and query.boosters.half_life_days == pytest.approx(30)
    assert outcome.hits[0].chunk.doc_id == "mn-altair-2025-11-18", "the newest Altair note first"
    assert body["citations"] and body["answer"] != NO_MATCH


def test_an_inferred_date_that_leaves_nothing_is_relaxed(stack: Stack, searches: Searches) -> None:
    """The notes that report Kestrel's 2023 return are dated 2024: the year stays in the question's words."""
    body = ask(stack.http_url, stack.headers, "What did Kestrel return in 2023?")
    strategy = body["meta"]["strategy"]
    assert strategy["time_hint"] == "in 2023" and strategy["detected_funds"] == [KESTREL]
    assert strategy["relaxed"] == ["dates read from the question ('in 2023': 2023-01-01..2023-12-31) matched "
                                   "nothing: relaxed to every date"]
    assert (strategy["filter"]["start_date"], strategy["filter"]["end_date"]) == ("", "")
    assert strategy["filter"]["in"] == {"fund_name": [KESTREL]}, "the fund still narrows: it left something"
    assert "10.65%" in body["answer"]
    assert "mn-kestrel-2024-03-14" in {c["doc_id"] for c in body["citations"]}
    first, *_ = searches.of("meeting_notes")
    assert first[0].filter.start_date == "2023-01-01" and not first[1].hits


def test_an_inferred_date_that_finds_notes_stays_a_filter(stack: Stack) -> None:
    strategy = ask(stack.http_url, stack.headers, "What did Kestrel do in March 2024?")["meta"]["strategy"]
    assert strategy["relaxed"] == [] and strategy["filter"]["start_date"] == "2024-03-01"


def test_dates_the_user_set_stay_hard(stack: Stack) -> None:
    body = ask(stack.http_url, stack.headers, "What did Kestrel return in 2023?", start_date="2023-01-01",
               end_date="2023-12-31")
    strategy = body["meta"]["strategy"]
    assert strategy["filter"]["start_date"] == "2023-01-01"
    assert strategy["relaxed"] == [f"nothing matched: the most recent notes of {KESTREL}, newest first, are the context"]
    assert body["answer"].startswith(NO_MATCH.split(",")[0]), "said first: the recent notes are not 2023's"


def test_conversation_memory_has_the_90_day_window_by_default(stack: Stack, searches: Searches) -> None:
    today = stack.app("gateway").pipeline.planner.today()
    body = ask(stack.http_url, stack.headers, "What did I ask about Brazil?", data_sources=["Conversation memory"])
    assert body["meta"]["strategy"]["default_window"] == {"conversations": 90}
    query, _ = searches.of("conversations")[0]
    assert (query.filter.start_date, query.filter.end_date) == ((today - dt.timedelta(days=90)).isoformat(),
                                                                today.isoformat())
    assert query.filter.equals == {"user_id": "admin"}, "still the asker's own messages only"
