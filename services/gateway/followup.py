"""Whether a follow-up reworks what the conversation already holds (answered from it, with no search:
NO_RAG) or needs facts it does not hold (searched).

A question is answered from the conversation only when all of these hold:
- it refers back: "that", "it", "the above", "those", "tell me more", "in simpler words", ..., or it is
  nothing but a transform word ("why?", "summarize", "explain") — the fund-research transform words are this one
  signal, not the rule;
- the conversation has answers from an earlier search to rework, under the same filters the user set
  (funds, dates, window, documents, sources): a changed filter always searches;
- it keeps the conversation's subject: it names no other fund or person, nor "the other fund"
  (services/gateway/reading.py says what it inherits and what it replaces);
- it brings nothing new: no period, no number or name, no content term that the answers shown so far
  do not hold (those answers are what the conversation-only prompt carries: a fact only in the
  sources behind them could not be answered from it);
- the model, when one is configured to check, does not say the answers lack what is asked.
The first of these that fails is the signal that decided, and the strategy event names it.
The decisions take the question's one reading (services/gateway/reading.py); the functions here that read
its words are what that reading calls, once per ask.
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragmesh.clients import GeneratorClient
from ragmesh.errors import RagmeshError
from ragmesh.question_kinds import DATE, FIGURE, PERSON, asked
from ragmesh.text import strip_citations
from ragmesh.types import Hit, Turn
from services.gateway.reading import Reading
from services.gateway.referents import WORD, content_words, stem
from services.gateway.request import AskInput
from services.gateway.scope import Scope
from services.gateway.scope_cache import ScopeEntry

# The signals, in the order they are checked; the first that decides is named in the strategy event.
NO_REFERENT = "no_referent"  # the question does not refer back: it asks something of its own
NO_EARLIER_SEARCH = "no_earlier_search"  # no searched answers in this conversation (or their scope expired)
FILTERS_CHANGED = "filters_changed"  # the user set other funds, dates, window, documents or sources
NEW_SUBJECT = "new_subject"  # it names another fund or person than the conversation's, or "the other fund"
NEW_PERIOD = "new_period"  # a time expression: a date filter of its own
NEW_ENTITY = "new_entity"  # a name or number the answers do not hold
NEW_TERM = "new_term"  # a content word the answers do not hold
MODEL = "model"  # the model says the conversation does not hold the answer
REWORK = "rework"  # refers back and brings nothing new: answered from the conversation

FACT_KINDS = frozenset({PERSON, FIGURE, DATE})  # what `new_kind` compares
_WORD_STARTS = " \n(\"'$-/"


@dataclass(frozen=True)
class Followup:
    """The decision and the signal that made it."""

    rework: bool  # answered from the conversation, no search
    signal: str
    detail: str

    def describe(self) -> str:
        return f"follow-up {self.signal}: {self.detail}"


def may_rework(reading: Reading) -> bool:
    """False when the question is searched for whatever the conversation holds and searched as asked (the
    embedding can start before the conversation is read): it neither refers back nor says nothing of its
    own (terse: an elliptical follow-up is searched in the words of the question it asks again)."""
    return reading.refers_back or reading.terse


def asked_key(ask: AskInput) -> str:
    """The scope the user set on the request (not what the gateway reads from the question)."""
    return Scope.asked(ask).key


def not_in_hits(words: dict[str, str], hits: Sequence[Hit]) -> list[str]:
    """The question's content `words` (stem -> as written) that none of `hits` holds: reusing those hits
    (RAG_REUSE) would answer without what the question asks for."""
    text = " " + " ".join(f"{h.chunk.text} {' '.join(map(str, h.chunk.metadata.values()))}" for h in hits).lower()
    # A word starts after one of these: substring tests stay in C (this runs before every reuse).
    return [w for s, w in words.items() if not any(f"{c}{s}" in text for c in _WORD_STARTS)]


def new_kind(kinds: frozenset[str], searched: str) -> str:
    """The fact the question asks for (a person, a figure, a date) that the question an earlier search was
    made for did not ("a person" after "a date"), or "": that search ranked its hits for the other fact, so
    a name they happen to hold (a predecessor's, say) is not the one asked for. A reason is told by the
    passages that tell what happened: "why" after "what" reuses them."""
    return " and ".join(f"a {kind}" for kind in sorted((kinds - asked(searched)) & FACT_KINDS))


def _held(turns: Sequence[Turn]) -> set[str]:
    return {stem(w.lower()) for t in turns for w in WORD.findall(strip_citations(t.answer))}


def subject(turns: Sequence[Turn]) -> str:
    """The conversation's subject: its latest question that asks something of its own (a "Summarize that"
    before it refers back as well), or "" when none does."""
    return next((t.question for t in reversed(turns) if content_words(t.question)), "")


def search_context(reading: Reading, turns: Sequence[Turn]) -> list[str]:
    """More search queries for a question that refers back but is searched (under new filters, say):
    "Summarize that" alone finds nothing, so the conversation's subject is searched with it."""
    if not turns or not reading.refers_back or reading.content:
        return []
    return [found] if (found := subject(turns)) else []


def decide(reading: Reading, ask: AskInput, turns: Sequence[Turn], entry: ScopeEntry | None) -> Followup:
    """The cheap signals, in order; `reading` is the question's (with what it inherits), `turns` the
    conversation's last turns, `entry` its last search."""
    if not (ref := reading.referent):
        return Followup(False, NO_REFERENT, "the question does not refer back to earlier answers")
    if entry is None or not turns:
        return Followup(False, NO_EARLIER_SEARCH, f"refers back ({ref!r}) but no searched answers to rework")
    if entry.asked != asked_key(ask) or entry.collections != ask.collections:
        return Followup(False, FILTERS_CHANGED, f"filters or sources changed since the last search "
                                                f"({entry.asked} -> {asked_key(ask)})")
    if replaced := reading.carried.replaced or (("the other fund",) if reading.other_fund else ()):
        return Followup(False, NEW_SUBJECT, f"replaces the conversation's subject ({'; '.join(replaced)})")
    if period := reading.window or reading.period:
        return Followup(False, NEW_PERIOD, f"names a period ({period.phrase!r})")
    held = _held(turns)
    new = {s: w for s, w in reading.content if s not in held}
    capitalised = {n.lower() for n in reading.names}
    if entities := [w for w in new.values() if w.lower() in capitalised or any(c.isdigit() for c in w)]:
        return Followup(False, NEW_ENTITY, f"{', '.join(entities)} not in the earlier answers")
    if new:
        return Followup(False, NEW_TERM, f"{', '.join(new.values())} not in the earlier answers")
    return Followup(True, REWORK, f"refers back ({ref!r}) and brings nothing new, filters unchanged")


async def confirm(verdict: Followup, question: str, turns: Sequence[Turn], generator: GeneratorClient,
                  model: str, timeout_s: float) -> Followup:
    """A rework verdict checked by the model (bounded wait): it may send the question to a search when
    the answers lack what is asked. A timeout or failure keeps the cheap verdict, said so."""
    if not verdict.rework:
        return verdict
    said = "\n\n".join(f"Q: {t.question}\nA: {strip_citations(t.answer)}" for t in turns)
    prompt = (f"Conversation so far:\n{said}\n\nFollow-up: {question}\n\nCan the follow-up be answered "
              f"completely from the conversation above, with no new facts? Answer YES or NO.")
    try:
        text = (await asyncio.wait_for(generator.complete(
            model=model, system_instruction="Decide whether a follow-up needs new facts.", prompt=prompt),
            timeout_s)).upper()
    except (asyncio.TimeoutError, RagmeshError):
        return Followup(True, REWORK, f"{verdict.detail}; model check timed out")
    if re.search(r"\bNO\b", text):
        return Followup(False, MODEL, "the model says the conversation does not hold the answer")
    return Followup(True, REWORK, f"{verdict.detail}; model agrees" if "YES" in text else verdict.detail)
