import datetime as dt

import pytest

from services.gateway.answer_guard import AnswerGuard
from services.gateway.query_analysis import (DateRange, TimeWindow, is_general, mentioned_funds, question_numbers,
                                             time_hint, time_window)

TODAY = dt.date(2025, 11, 21)
FUNDS = ["Kestrel Emerging Markets", "Northwind Global Macro Fund", "Harborview Long/Short Equity",
         "Altair Credit Opportunities", "Global Value Partners"]


@pytest.mark.parametrize("question, start, end", [
    ("What changed last week?", "2025-11-07", "2025-11-21"),
    ("Returns in March 2024?", "2024-03-01", "2024-03-31"),
    ("Q1 2024 performance", "2024-01-01", "2024-03-31"),
    ("results for the third quarter of 2024", "2024-07-01", "2024-09-30"),
    ("what about last quarter", "2025-07-01", "2025-09-30"),
    ("How did Harborview do in the last quarter of 2024?", "2024-10-01", "2024-12-31"),
    ("Q4 of 2024", "2024-10-01", "2024-12-31"),
    ("and last month?", "2025-10-01", "2025-10-31"),
    ("since June 2024", "2024-06-01", "2025-11-21"),
    ("what did they do in 2024", "2024-01-01", "2024-12-31"),
    ("How did Kestrel's country allocation change through 2024?", "2024-01-01", "2024-12-31"),
    ("the positioning throughout 2023", "2023-01-01", "2023-12-31"),
    ("the top 10 holdings in 2024", "2024-01-01", "2024-12-31"),
    ("what happened this year", "2025-01-01", "2025-11-21"),
])
def test_time_hints_become_date_ranges(question: str, start: str, end: str) -> None:
    hint = time_hint(question, TODAY)
    assert isinstance(hint, DateRange) and (hint.start, hint.end) == (start, end)


def test_no_time_hint() -> None:
    assert time_hint("What is the net exposure?", TODAY) is None


def test_a_span_of_years_is_not_read_as_its_last_year() -> None:
    assert time_hint("How did the allocation move from 2022 through 2024?", TODAY) is None


@pytest.mark.parametrize("question, window, phrase", [
    ("What happened in the last 24 hours?", "24h", "last 24 hours"),
    ("anything new over the past day", "24h", "past day"),
    ("Meetings in the last 48 hours", "48h", "last 48 hours"),
    ("what changed in the past two days", "48h", "past two days"),
    ("What did Kestrel say this week?", "1w", "this week"),
    ("notes from the last 7 days", "1w", "last 7 days"),
])
def test_windows_in_the_question_are_003s_context_windows(question: str, window: str, phrase: str) -> None:
    assert time_window(question) == TimeWindow(window, phrase)
    assert time_hint(question, TODAY) is None, "a window is not also a date range"


def test_no_window_for_calendar_periods() -> None:
    assert time_window("What changed last week?") is None and time_window("Q1 2024 performance") is None


def test_fund_names_full_or_by_distinctive_first_word() -> None:
    assert mentioned_funds("How is kestrel doing vs Harborview Long/Short Equity?", FUNDS) == [
        "Harborview Long/Short Equity", "Kestrel Emerging Markets"]
    assert mentioned_funds("global markets outlook", FUNDS) == [], "'global' is no fund's distinctive word"
    assert mentioned_funds("Northwind's gold trade", FUNDS) == ["Northwind Global Macro Fund"]


def test_question_numbers_and_generality() -> None:
    assert question_numbers("explain question 6 and Q7, problem #12") == ["6", "7", "12"]
    assert is_general("What are the main themes?") and not is_general("What was the return in Q3 2024?")


def test_answer_guard_holds_text_until_a_valid_citation_or_an_admission() -> None:
    guard = AnswerGuard({1, 2}, enforce=True)
    assert guard.feed("Kestrel cut ") == "" and guard.feed("Brazil [9]. ") == ""
    assert guard.feed("It was 4% [2") == "" and guard.feed("].") == "Kestrel cut Brazil [9]. It was 4% [2]."
    assert guard.feed(" More.") == " More." and guard.finish() == ("", False)
    uncited = AnswerGuard({1}, enforce=True)
    uncited.feed("A confident claim without sources.")
    assert uncited.finish()[1] is True
    honest = AnswerGuard({1}, enforce=True)
    assert honest.feed("The sources do not contain enough information.") != ""
    assert AnswerGuard(set(), enforce=False).feed("anything") == "anything"
