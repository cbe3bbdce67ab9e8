"""Routing: the rule order, and the follow-up decision that sends a question to NO_RAG only when it
reworks what the conversation holds (services/gateway/followup.py)."""
from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from ragmesh.errors import Unavailable
from ragmesh.types import Chunk, Hit, Turn
from services.gateway import followup
from services.gateway.followup import Followup, asked_key, decide, may_rework
from services.gateway.reading import Reading, read
from services.gateway.request import AskInput
from services.gateway.router import DEEP, DIRECT, LOOKUP, NO_RAG, SPECIFIC, SUMMARY, route
from services.gateway.scope_cache import ScopeEntry

TODAY = dt.date(2026, 1, 15)
FUNDS = ["Kestrel Emerging Markets", "Northwind Global Macro Fund"]
REWORKS = Followup(True, followup.REWORK, "refers back")
TURNS = [
    Turn("What did Kestrel do with its Brazil exposure?",
         "Here is what the sources say:\n\n- **Kestrel Emerging Markets, meeting 2024-03-14**: Herrera cut Brazil "
         "exposure from 12% to 4% of NAV, on fiscal slippage and rate cuts that came too early. [1]\n"
         "- The only remaining Brazil holding is Banco Serra Azul. [2]"),
]


@pytest.mark.parametrize("question, follow, docs, name, k", [
    ("hello", None, 0, DIRECT, 0),
    ("Thank you!", REWORKS, 0, DIRECT, 0),
    ("what is your name?", None, 0, DIRECT, 0),
    ("Summarize that", REWORKS, 0, NO_RAG, 0),
    ("Summarize that", None, 0, SPECIFIC, 5),
    ("Summarize this document", None, 1, SUMMARY, 0),
    ("Summarize this document", None, 2, SPECIFIC, 5),
    # a document's chapters asked for: its outline (the summary route's table of contents)
    ("List the chapters", None, 1, SUMMARY, 0),
    ("What is the table of contents?", None, 1, SUMMARY, 0),
    ("What chapters does this book have?", None, 1, SUMMARY, 0),
    ("How many sections are there?", None, 1, SUMMARY, 0),
    ("List the chapters", None, 0, SPECIFIC, 5),
    ("Which chapters discuss Fresnel lenses?", None, 1, SPECIFIC, 5),  # what a chapter says: searched
    ("What does chapter 2 say about logbooks?", None, 1, SPECIFIC, 5),
    ("Why did Kestrel cut Brazil?", None, 0, DEEP, 15),
    ("Why did they cut it?", REWORKS, 0, NO_RAG, 0),
    ("What is the relationship between rates and returns?", None, 0, DEEP, 15),
    # 004: a reasoning question over one document reasons over its chunks, not its summary
    ("Summarize why the fund lost money in August", None, 1, DEEP, 15),
    ("Compare the summary's two scenarios", None, 1, DEEP, 15),
    ("Explain question 6", None, 0, LOOKUP, 5),
    ("What is Kestrel's net exposure?", None, 0, SPECIFIC, 5),
    ("Give me an overview of all funds", None, 0, SPECIFIC, 10),
    ("Is the fund showing growth?", None, 0, SPECIFIC, 5),  # 'show' is not 'how'
])
def test_routes_in_order(question: str, follow: Followup | None, docs: int, name: str, k: int) -> None:
    r = route(read(question, TODAY), follow, docs)
    assert (r.name, r.k) == (name, k), r.reason


def ask(question: str, **fields) -> AskInput:
    return AskInput(question, tenant="t", conversation_id="c", **fields)


def reading(question: str, turns: list[Turn] = TURNS) -> Reading:
    """The question's reading in a conversation of `turns`, as the planner makes it."""
    return read(question, TODAY).naming(FUNDS).following(turns, FUNDS, TODAY)


def verdict_on(question: str, turns: list[Turn] = TURNS, cached: ScopeEntry | None = None, **fields) -> Followup:
    return decide(reading(question, turns), ask(question, **fields), turns, cached)


def entry(asked: AskInput) -> ScopeEntry:
    """The scope of the conversation's last search, made for `asked`."""
    return ScopeEntry("k", asked.collections, TURNS[-1].question, None, [], 0, asked=asked_key(asked))


@pytest.mark.parametrize("question", [
    "Summarize that", "why?", "Tell me more", "Explain it in simpler words", "Can you explain the above?",
    "Why did they cut it?", "List those points", "What does that mean for the Brazil holding?",
    "Tell me more about Banco Serra Azul",
])
def test_a_question_that_refers_back_and_brings_nothing_new_reworks_the_answers(question: str) -> None:
    verdict = verdict_on(question, TURNS, entry(ask("first")))
    assert verdict.rework and verdict.signal == followup.REWORK, verdict


@pytest.mark.parametrize("question, signal", [
    ("How did performance look?", followup.NO_REFERENT),  # asks something of its own
    ("List the top holdings of Kestrel", followup.NO_REFERENT),  # 'list' alone is no longer the rule
    ("Why did Northwind lose money?", followup.NO_REFERENT),
    ("How big is their India position?", followup.NEW_ENTITY),
    ("What about Northwind?", followup.NO_REFERENT),
    ("What about the Northwind fund?", followup.NEW_SUBJECT),  # Kestrel's conversation: another fund
    ("What about the other fund?", followup.NEW_SUBJECT),
    ("What did that cost in basis points?", followup.NEW_TERM),
    ("Was it 12% or 15%?", followup.NEW_ENTITY),
    ("Summarize that for 2023", followup.NEW_PERIOD),
    ("How did it do this year?", followup.NEW_PERIOD),
    ("Tell me more about the manager", followup.NEW_TERM),
])
def test_a_question_that_brings_something_new_searches(question: str, signal: str) -> None:
    verdict = verdict_on(question, TURNS, entry(ask("first")))
    assert (verdict.rework, verdict.signal) == (False, signal), verdict


@pytest.mark.parametrize("before, now", [
    ({}, {"selected_funds": ["Meridian Quant Systematic"]}),
    ({"selected_funds": ["Harborview Long/Short Equity"]}, {"selected_funds": ["Meridian Quant Systematic"]}),
    ({"selected_funds": ["Harborview Long/Short Equity"]}, {}),
    ({}, {"start_date": "2025-01-01"}),
    ({}, {"context_window": "1w"}),
    ({}, {"data_sources": ["Meeting Notes"]}),
])
def test_a_changed_filter_always_searches(before: dict, now: dict) -> None:
    verdict = verdict_on("Summarize that", TURNS, entry(ask("first", **before)), **now)
    assert (verdict.rework, verdict.signal) == (False, followup.FILTERS_CHANGED), verdict
    same = verdict_on("Summarize that", TURNS, entry(ask("first", **before)), **before)
    assert same.rework, same


def test_without_an_earlier_search_there_is_nothing_to_rework() -> None:
    assert verdict_on("Summarize that", TURNS, None).signal == followup.NO_EARLIER_SEARCH
    assert verdict_on("Summarize that", [], entry(ask("first"))).signal == followup.NO_EARLIER_SEARCH


def test_only_a_question_that_refers_back_may_skip_the_search() -> None:
    assert all(may_rework(read(q, TODAY)) for q in ("Summarize that", "why?", "Tell me more"))
    for question in ("What did Kestrel do with Brazil?", "How did performance look?", "What happened this year?",
                     "List the top holdings of Kestrel"):
        assert not may_rework(read(question, TODAY)), question


class Model:
    """A generator whose short replies are scripted (or fail)."""

    def __init__(self, reply: str | Exception, delay: float = 0.0) -> None:
        self.reply, self.delay, self.prompts = reply, delay, []

    async def complete(self, *, model: str, system_instruction: str, prompt: str) -> str:
        self.prompts.append(prompt)
        await asyncio.sleep(self.delay)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.mark.parametrize("reply, delay, rework, note", [
    ("YES", 0.0, True, "model agrees"),
    ("NO, the conversation does not say", 0.0, False, "model says"),
    (Unavailable("generator down"), 0.0, True, "timed out"),
    ("NO", 1.0, True, "timed out"),
])
def test_the_model_may_send_a_rework_to_a_search(reply, delay: float, rework: bool, note: str) -> None:
    model = Model(reply, delay)
    verdict = asyncio.run(followup.confirm(verdict_on("Summarize that", TURNS, entry(ask("first"))),
                                           "Summarize that", TURNS, model, "m", timeout_s=0.2))
    assert verdict.rework == rework and note in verdict.describe(), verdict
    assert verdict.signal == (followup.REWORK if rework else followup.MODEL)
    assert "Banco Serra Azul" in model.prompts[0], "the model sees the conversation"


def test_the_model_is_not_asked_about_a_question_that_searches() -> None:
    model = Model("YES")
    searched = verdict_on("What about Northwind?", TURNS, entry(ask("first")))
    assert asyncio.run(followup.confirm(searched, "What about Northwind?", TURNS, model, "m", 0.2)) == searched
    assert model.prompts == []


def test_a_reused_scope_must_hold_the_question_s_words() -> None:
    hits = [Hit(Chunk(chunk_id="n#0", doc_id="n", collection="meeting_notes", text="Herrera cut Brazil to 4% of NAV.",
                      metadata={"fund_name": "Kestrel Emerging Markets"}), 1.0)]
    assert followup.not_in_hits(read("Remind me: why did Kestrel cut Brazil?", TODAY).words, hits) == []
    assert followup.not_in_hits(read("Who is Kestrel's head of research?", TODAY).words, hits) == ["head", "research"]


def test_a_follow_up_searched_with_no_words_of_its_own_searches_with_the_question_it_refers_to() -> None:
    assert followup.search_context(reading("Summarize that", TURNS), TURNS) == [TURNS[-1].question]
    assert followup.search_context(reading("Tell me more about Banco Serra Azul", TURNS), TURNS) == []  # words of its own
    assert followup.search_context(reading("What did Kestrel do?", TURNS), TURNS) == []  # refers to nothing
    assert followup.search_context(reading("Summarize that", []), []) == []


def test_a_follow_up_with_no_words_of_its_own_searches_with_the_conversation_s_subject() -> None:
    """After "Summarize that" was asked once, a second one (under other sources) still searches with the
    question that had words of its own."""
    turns = [*TURNS, Turn("Summarize that", "Herrera cut Brazil. [1]")]
    assert followup.search_context(reading("Summarize that", turns), turns) == [TURNS[-1].question]
    assert followup.subject([Turn("Summarize that", "...")]) == ""


@pytest.mark.parametrize(("question", "searched", "kind"), [
    ("Who is Meridian's head of research?", "When did Meridian close to new investors?", "a person"),
    ("How much did Northwind lose in August?", "What was Northwind's return in August?", ""),
    ("What did Kestrel do in Mexico?", "When did Kestrel cut Brazil?", ""),
    ("Why did Kestrel cut Brazil?", "What did Kestrel do with Brazil?", ""),  # the same passages tell why
    ("When did Meridian close, and at what capacity?", "What is Meridian's strategy?", "a date and a figure"),
])
def test_a_cached_search_made_for_another_kind_of_question_is_not_reused(question: str, searched: str,
                                                                          kind: str) -> None:
    assert followup.new_kind(read(question, TODAY).kinds, searched) == kind


def test_a_pronoun_is_never_a_new_term() -> None:
    """"Tell me more about him" brings nothing new: "him" refers back as "her" does."""
    assert verdict_on("Tell me more about him", TURNS, entry(ask("first"))).rework
