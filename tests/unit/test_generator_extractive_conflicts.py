"""The offline backend says when its sources disagree, citing both, and only then:
the same figure restated, or figures for different periods, are not conflicts."""
from __future__ import annotations

import asyncio
import re

from ragmesh.types import Chunk, ContextBlock
from services.generator.backends import GenerationRequest
from services.generator.backends.conflicts import find_conflicts
from services.generator.backends.extractive import ExtractiveBackend

KESTREL = "Kestrel Emerging Markets"


def block(i: int, text: str, fund: str = KESTREL, date: str = "2024-03-14") -> ContextBlock:
    chunk = Chunk(f"c{i}", f"d{i}", "meeting_notes", text, {"fund_name": fund}, date)
    return ContextBlock(i, text, chunk, f"Meeting note, {fund}, {date}")


def answer(question: str, blocks: list[ContextBlock]) -> str:
    async def collect() -> str:
        request = GenerationRequest("extractive", question, blocks)
        return "".join([e.text async for e in ExtractiveBackend(delay_ms=0).stream(request) if e.kind == "content"])

    return asyncio.run(collect())


def test_different_percentages_for_the_same_fund_metric_and_period_are_reported_citing_both() -> None:
    text = answer("What did Kestrel do with its Brazil exposure in March 2024?", [
        block(1, "Kestrel cut its Brazil exposure from 12% to 4% in March 2024. Herrera sounded calm."),
        block(2, "In March 2024 Kestrel reduced its Brazil exposure to 5%.", date="2024-04-30"),
    ])
    body, _, conflicts = text.partition("**Conflicting information**")
    assert "12% to 4%" in body and conflicts, text
    [line] = [ln for ln in conflicts.splitlines() if ln.startswith("- ")]
    assert KESTREL in line and "exposure" in line and "Mar 2024" in line
    assert re.search(r"\[1\] says 12%, 4%, but \[2\] says 5%", line), line


def test_the_same_figure_restated_is_not_a_conflict() -> None:
    text = answer("What did Kestrel do with its Brazil exposure?", [
        block(1, "Kestrel cut its Brazil exposure from 12% to 4% in March 2024."),
        block(2, "In March 2024 the Brazil exposure was cut to 4%.", date="2024-06-30"),
    ])
    assert "Conflicting information" not in text


def test_figures_for_different_periods_or_funds_are_not_conflicts() -> None:
    sentences = [
        (block(1, ""), "Net exposure was 55% at the start of the year."),
        (block(2, "", date="2024-06-25"), "Net exposure was 32% at the start of the year."),  # another date
        (block(3, ""), "Kestrel returned 2.1% in Q1 2024."),
        (block(4, ""), "Kestrel returned 3.4% in Q2 2024."),  # different quarters
        (block(5, "", fund="Northwind Global Macro Fund"), "Net exposure was 40% at the start of the year."),
        # Factsheets of different dates: ISO dates are stamps, bare years (maturities) are no period.
        (block(6, "", date="2024-06-30"), "Top holdings as of 2024-06-30: Corvo Chemicals 7.5% 2029 bonds 3.7%."),
        (block(7, "", date="2024-09-30"), "Top holdings as of 2024-09-30: Corvo Chemicals 7.5% 2029 bonds 4.0%."),
        # Two events of one company: filing and emerging are different things.
        (block(8, ""), "Vantor Telecom filed for Chapter 11 on 20 May 2024."),
        (block(9, ""), "Vantor emerged from Chapter 11 on 12 September 2024."),
    ]
    assert find_conflicts(sentences) == []


def test_different_dates_for_the_same_event_and_person_are_reported() -> None:
    altair = "Altair Credit Opportunities"
    [conflict] = find_conflicts([
        (block(1, "", fund=altair), "Marcus Lindqvist, head of European credit, left on 14 June 2024."),
        (block(2, "", fund=altair, date="2024-08-01"), "Lindqvist left on 21 June 2024 to join a rival."),
        (block(3, "", fund=altair), "Sara Berg left on 3 May 2024."),  # someone else: not a conflict
    ])
    assert conflict.describe() == f"{altair}, left: [1] says 14 June 2024, but [2] says 21 June 2024."
