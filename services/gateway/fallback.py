"""When a search of the meeting notes or factsheets finds nothing: the most recent notes of the fund(s) in
scope, newest first, become the context, and the answer says that is what they are, not matches (the notes
design's fallback: keyword + recency, then recent notes, then "no notes"). The fund filter and picked
documents stay; the dates and the question's words that left nothing are what is set aside. A tenant with no
notes of those funds at all still gets the plain no-match answer.

The pipeline asks `recent_notes` once the context came out empty, and `preface` when generating: the
answer's first words say what the context is."""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from ragmesh.clients import RetrieverClient
from ragmesh.types import Hit
from services.gateway.planner import Plan
from services.gateway.request import AskInput
from services.gateway.strategy import Strategy

COLLECTIONS = ("meeting_notes", "factsheets")  # the sources whose recent notes stand in
RECENT = 6  # chunks of the newest notes given as the context
FETCHED = 50  # the chunks looked at for the newest, per collection
FALLEN_BACK = "nothing matched: the most recent notes"
NOTE = FALLEN_BACK + "{of}, newest first, are the context"
PREFACE = ("I don't have any notes that match this question and these filters, so here are the most recent "
           "notes{of} instead (newest first); they may not answer it.\n\n")


@dataclass(frozen=True)
class RecentNotes:
    hits: list[Hit]
    note: str  # what the strategy's relaxed list and reason say


async def recent_notes(retriever: RetrieverClient, ask: AskInput, plan: Plan) -> RecentNotes | None:
    """The newest chunks of the notes and factsheets the plan searched, within its funds and picked documents
    but any date; None when the plan searched neither, or they hold nothing of those funds."""
    collections = [c for c in plan.collections if c in COLLECTIONS]
    if not collections:
        return None
    undated = dataclasses.replace(plan.filter, start_date="", end_date="")
    found = await asyncio.gather(*(
        retriever.search(ask.question, [c], dataclasses.replace(undated, doc_ids=ask.picked(c)), FETCHED)
        for c in collections))
    hits = sorted((h for result in found for h in result.hits), key=lambda h: (h.chunk.date, h.score), reverse=True)
    if not hits:
        return None
    return RecentNotes(hits[:RECENT], NOTE.format(of=_of(plan)))


def preface(s: Strategy) -> str:
    """The answer's first words when its context is the recent notes (the strategy says so), else ""."""
    note = next((r for r in s.relaxed if r.startswith(FALLEN_BACK)), "")
    return PREFACE.format(of=note[len(FALLEN_BACK):note.index(", newest first")]) if note else ""


def _of(plan: Plan) -> str:
    funds = plan.filter.any_of.get("fund_name", [])
    return f" of {', '.join(funds)}" if funds else ""
