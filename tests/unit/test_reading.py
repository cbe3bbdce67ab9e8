"""What a follow-up inherits from the conversation, and what replaces what (services/gateway/reading.py):
funds kept unless named (or "the other fund"), a period and the question kept only by an elliptical
follow-up, the person a pronoun refers to, and small talk read as such."""
from __future__ import annotations

import datetime as dt

import pytest

from ragmesh.types import Turn
from services.gateway.reading import Reading, read, small_talk

TODAY = dt.date(2026, 1, 15)
FUNDS = ["Altair Credit Opportunities", "Kestrel Emerging Markets", "Meridian Quant Systematic",
         "Northwind Global Macro Fund"]
AUGUST = Turn("How much did Northwind lose in August 2024?", "Northwind lost 4.1% in August [1].")


def reading(question: str, *turns: Turn) -> Reading:
    return read(question, TODAY).naming(FUNDS).following(list(turns), FUNDS, TODAY)


def test_an_elliptical_period_asks_the_conversation_s_question_again_for_the_same_fund() -> None:
    r = reading("How about July 2024?", AUGUST)
    assert r.text == "How much did Northwind lose in July 2024?"
    assert r.scope_funds == ("Northwind Global Macro Fund",) and r.carried.funds == r.scope_funds
    assert (r.scope_period.start, r.scope_period.end) == ("2024-07-01", "2024-07-31")
    assert r.carried.replaced == ("period: August 2024 -> July 2024",)


def test_a_month_without_its_year_takes_the_conversation_s_year() -> None:
    r = reading("How about July?", AUGUST)
    assert (r.scope_period.start, r.scope_period.end) == ("2024-07-01", "2024-07-31")
    undated = reading("How about July?", Turn("Who manages Altair?", "Priya Raman [1]."))
    assert undated.text == "Who manages Altair in July?" and undated.scope_period is None


def test_a_named_fund_replaces_the_conversation_s_and_keeps_its_period() -> None:
    r = reading("And Meridian?", AUGUST)
    assert r.text == "How much did Meridian Quant Systematic lose in August 2024?"
    assert r.scope_funds == ("Meridian Quant Systematic",) and r.carried.funds == ()
    assert r.carried.period == "August 2024" and r.scope_period.start == "2024-08-01"
    assert r.carried.replaced == ("fund: Northwind Global Macro Fund -> Meridian Quant Systematic",)


def test_the_other_fund_is_the_one_spoken_of_before_the_current_one() -> None:
    turns = [AUGUST, Turn("And Meridian?", "Meridian lost 3.9% [1].")]
    r = reading("And the other fund?", *turns)
    assert r.scope_funds == ("Northwind Global Macro Fund",)
    assert r.text == "How much did Northwind Global Macro Fund lose in August 2024?"


def test_a_question_of_its_own_keeps_the_fund_but_asks_across_dates() -> None:
    r = reading("Who left the fund in early 2025?", AUGUST)
    assert r.scope_funds == ("Northwind Global Macro Fund",) and r.scope_period is None
    assert r.text == r.question and not r.carried.question


@pytest.mark.parametrize("question", ["Which funds hold gold?", "What did Kestrel do with Brazil?"])
def test_a_question_across_funds_or_naming_one_inherits_no_fund(question: str) -> None:
    r = reading(question, AUGUST)
    assert not r.carried.funds and not r.elliptical and r.text == question


def test_a_pronoun_is_searched_as_the_person_the_conversation_asked_about() -> None:
    who = Turn("Who is Meridian's head of research?",
               "Hannah Okafor introduced the new head of research, Leah Abrams [1].")
    r = reading("What does she attribute to Atlas?", who)
    assert r.carried.people == ("Leah Abrams",) and r.text == "What does Leah Abrams attribute to Atlas?"
    assert r.scope_funds == ("Meridian Quant Systematic",)


def test_a_fund_its_answer_spoke_of_is_the_subject_of_a_question_that_named_none() -> None:
    turns = [Turn("What premium was paid for Brightwater Bio?", "Solstice Healthcare Innovation's position [1].")]
    funds = [*FUNDS, "Solstice Healthcare Innovation"]
    r = read("What did it add to returns?", TODAY).naming(funds).following(turns, funds, TODAY)
    assert r.carried.funds == ("Solstice Healthcare Innovation",)


def test_small_talk_keeps_the_subject() -> None:
    r = reading("What about Altair?", AUGUST, Turn("ok, thanks!", "You're welcome."))
    assert r.text == "How much did Altair Credit Opportunities lose in August 2024?"


@pytest.mark.parametrize("turn, kind", [
    ("ok, thanks, what else?", "else"), ("Thanks!", "thanks"), ("Great, that's helpful.", "ack"), ("hi there", "hello"), ("Hi, thanks!", "thanks"),
    ("Anything else?", "else"), ("Perfect, thank you. Bye!", "bye"), ("Who are you?", "name"),
    ("Thanks, and how did Kestrel do?", ""), ("What else did Kestrel buy?", ""), ("ok", "ack"),
])
def test_small_talk(turn: str, kind: str) -> None:
    assert small_talk(turn) == kind
