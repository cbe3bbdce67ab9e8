"""The labelled conversation set (tests/data/conversations.yaml) through POST /api/chat/ask on the demo
corpus with the extractive backend: no fresh turn is answered without a search, every fresh turn's facts
are in its answer, few transform turns search (issue 24), and no answer gives a figure, name or date of
another question: where the notes do not hold what is asked, the answer says so (issue 36)."""
from __future__ import annotations

import pytest

from bench.conversations_bench import (FRESH, LABELS, NOT_THERE, SMALL_TALK, WASTED_TARGET, Score, http_asker,
                                      labelled_set, play)
from tests.stack import Stack


@pytest.fixture(scope="module")
def score(stack: Stack) -> Score:
    """The set asked of a gateway beside the stack's, with a retrieval deadline no loaded machine misses:
    the test is about what is searched, and a search given up for time would fail it for nothing."""
    gateway = stack.start_variant("gateway", retrieval_timeout_s=30.0)
    try:
        return play(http_asker(f"http://{stack.settings.host}:{gateway.app.http_port}", stack.headers),
                    labelled_set())
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())


def test_the_set_is_big_enough_and_covers_what_issue_24_names() -> None:
    conversations = labelled_set()
    turns = [t for c in conversations for t in c["turns"]]
    assert len(conversations) >= 15 and len(turns) >= 60
    assert all(t["label"] in LABELS for t in turns)
    assert all(bool(t.get("facts")) != bool(t.get("absent")) for t in turns if t["label"] == FRESH), \
        "every fresh turn names its facts, or what the notes do not hold"
    assert all(t.get("facts") for t in turns if t["label"] == SMALL_TALK), "every small-talk turn names its facts"
    absent = [t for t in turns if t.get("absent")]
    assert len(absent) >= 10 and all(t.get("not_facts") for t in absent), "each names the wrong facts to look for"
    assert any("selected_funds" in t.get("request", {}) for t in turns)
    assert any("start_date" in t.get("request", {}) for t in turns)


def test_no_fresh_turn_is_answered_from_the_conversation(score: Score) -> None:
    assert not score.stale, "\n".join(p.describe() for p in score.stale)


def test_small_talk_is_answered_without_a_search_by_a_reply_that_knows_the_conversation(score: Score) -> None:
    assert not score.small_talk, "\n".join(p.describe() for p in score.small_talk)
    assert any(p.label == SMALL_TALK for p in score.played)


def test_few_transform_turns_search(score: Score) -> None:
    assert score.wasted_share <= WASTED_TARGET, "\n".join(p.describe() for p in score.wasted)


def test_no_answer_gives_another_questions_fact(score: Score) -> None:
    """"How much money does Northwind Global Macro manage?" is not answered with a sleeve's $1.1bn, and a fee,
    an auditor or a launch date the notes never state is answered with "the sources do not say"."""
    assert not score.wrong, "\n".join(p.describe() for p in score.wrong)


def test_what_counts_as_saying_the_notes_lack_it() -> None:
    from ragmesh.prompts import NOT_ENOUGH
    from services.gateway.pipeline import NO_MATCH
    from services.generator.backends.extractive import NOT_STATED

    for said in (NOT_STATED.format(what="a figure", question="q"), NO_MATCH, NOT_ENOUGH,
                 "The notes do not state Northwind's management fee."):
        assert NOT_THERE.search(said), said
    assert not NOT_THERE.search("Northwind's AUM is $6.2bn [1], and it does not hedge the yen [2].")


def test_every_fresh_turn_has_its_facts(score: Score) -> None:
    """Turns marked `needs` depend on another part of issue 24 (inferred filters relaxed, extractive
    answers that answer the question); until it lands they are reported here, not hidden."""
    own = [p for p in score.missing if not p.needs]
    assert not own, "\n".join(p.describe() for p in own)
    done = [p for p in score.played if p.label == FRESH and p.needs and not p.missing]
    assert not done, "these turns have their facts now: drop their `needs` mark\n" + "\n".join(
        p.describe() for p in done)
    if pending := [p for p in score.missing if p.needs]:
        pytest.xfail("facts missing where another part of issue 24 is needed:\n"
                     + "\n".join(p.describe() for p in pending))
