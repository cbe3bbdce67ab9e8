"""An offline backend that answers by quoting the context: it scores every sentence
of the given blocks against the question, keeps the best distinct ones, and cites
each by its block number. It can only cite blocks it was given. Words match by their
stem ("manages" finds "managed"), and a sentence that carries what the question asks
for (a name for "who", a figure for "how much", a date for "when": ragmesh.question_kinds)
counts three times, so the answer leads with it; the blocks' metadata (a fund's manager, a
report's date) is quoted as sentences too when it is what was asked. When relevant
sentences of two blocks give different figures or dates for the same thing, a
"Conflicting information" part says so, citing both.

A figure, name or date is given as the answer only when its sentence is about what was asked: it states the
measure the question names (answer_kinds.MEASURES: a fund's AUM, not a sleeve's size), or it and the sentences
leading into it hold most of the question's topic (weighted by rarity). Other sentences holding a thing of the
kind asked answer a different question and are left out; when no sentence answers, the answer says the
sources do not say it, and which sources were found."""
from __future__ import annotations

import asyncio
import calendar
import math
import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import lru_cache

from ragmesh.context_budget import OFFLINE, ContextBudget
from ragmesh.question_kinds import DATE, FIGURE, PERSON, asked, asking_words
from ragmesh.text import split_sentences, strip_citations, tokenize
from ragmesh.types import ContextBlock, GenEvent
from services.generator.backends import GenerationRequest
from services.generator.backends.answer_kinds import COUNT, Measure, carries, counted, measure_asked, metadata_sentences
from services.generator.backends.conflicts import TEXT_CACHE, find_conflicts

NO_DATA = "There is no data in the selected sources that matches this question and these filters."
NOTHING_RELEVANT = (
    "The retrieved sources do not contain information that answers this question, "
    "so I can't answer it from them."
)
_MARKER = re.compile(r"\[\d+\]")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SUFFIXES = ("ing", "ies", "ed", "es", "er", "e", "s")
_IRREGULAR = {  # the forms a question and a note use for the same event that no suffix joins
    "lost": "lose", "loss": "lose", "losses": "lose", "losing": "lose", "left": "leave", "leaving": "leave",
    "ran": "run", "running": "run", "paid": "pay", "rose": "rise", "risen": "rise", "fell": "fall",
    "fallen": "fall", "grew": "grow", "grown": "grow", "sold": "sell", "bought": "buy", "held": "hold",
    "made": "make", "won": "win", "gains": "gain", "gained": "gain",
}
# Words that say what to do with the sources, not what to look for: a question of nothing else ("Summarize
# that") is answered with each source's opening sentences.
INSTRUCTIONS = ("summarize", "summarise", "summary", "explain", "elaborate", "tell", "more", "list", "recap",
                "remind", "describe", "detail", "details", "again", "please", "simpler", "words", "points", "give",
                "overview", "briefly", "short", "shorter")
# A matched sentence that names the subject but not what was asked ("M&A was the main driver.", "The loss came
# from Dunmore ...") is often followed by the one that holds it: the next CONTINUATION sentences of the same
# source are quoted after the best FOLLOWED sentences when they hold a figure, a date or a name.
CONTINUATION, FOLLOWED = 2, 2
LEAD_IN = 2  # sentences before one that may name what it speaks of ("the loss", "the position")
FACTS = {PERSON, FIGURE, DATE, COUNT}
_AMPERSAND = re.compile(r"\b[a-z]&[a-z]\b")  # M&A, R&D, S&P: one term, not two letters
ASKED_WEIGHT = 3.0  # a sentence holding the kind of thing asked for, against one that only shares words
# A question word every block's label holds (the fund asked about: retrieval gave only its sources) tells no
# sentence apart, so it counts this much of its rarity; the other words say what is asked about it.
SUBJECT_WEIGHT = 0.25
METADATA_WEIGHT = 0.9  # a metadata sentence yields to the text's own sentence that says as much
# The share of the topic's weight (its words' rarity among the candidate sentences) a sentence and its lead-in
# must hold more than, to be about it.
ABOUT_SHARE = 0.5
KIND_NAMES = {PERSON: "a name", FIGURE: "a figure", DATE: "a date"}
NOT_STATED = "The sources found do not say this: none of them gives {what} that answers \u201c{question}\u201d."


@dataclass
class _Scored:
    score: float
    block: ContextBlock
    sentence: str
    order: int


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _stem(token: str) -> str:
    """The token without one common ending, keeping at least four letters: managed, manages, manager -> manag;
    irregular forms first become their verb (lost, loss -> lose), and a noun's final y goes first so it meets
    its verb (recovery, recovered -> recov)."""
    token = _IRREGULAR.get(token, token)
    if token.endswith("y") and len(token) > 5:
        token = token[:-1]
    for suffix in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 4:
            return token[: -len(suffix)]
    return token


@lru_cache(maxsize=TEXT_CACHE)
def _stems(text: str) -> frozenset[str]:
    """The text's word stems (and its M&A-like terms). Kept for the texts last seen: the same sources' sentences
    come back in answer after answer, so most are stemmed once."""
    return frozenset({_stem(t) for t in tokenize(text)} | set(_AMPERSAND.findall(text.lower())))


@lru_cache(maxsize=TEXT_CACHE)
def _sentences(text: str) -> tuple[str, ...]:
    """A block's sentences, kept for the texts last seen like their stems."""
    return tuple(split_sentences(text))


_INSTRUCTION_STEMS = {_stem(w) for w in INSTRUCTIONS}
_HOW = {"much", "many"}  # of "how much" / "how many": they ask, a sentence holding them ("much lower") says nothing
# Words of a question's asking phrase that name the thing asked, which the sentence that gives it says too.
_NAMING = {_stem(w) for w in ("percentage", "percent", "share", "size", "premium", "price", "cost", "level",
                                   "weight", "amount", "capacity", "drawdown", "exposure", "yield", "spread")}


def _subject(blocks: list[ContextBlock]) -> set[str]:
    """The words every block's label holds: what the sources are all about (one fund's notes and factsheets)."""
    labels = [_stems(b.label) for b in blocks]
    return set(labels[0].intersection(*labels[1:])) if labels and all(labels) else set()


class ExtractiveBackend:
    name = "extractive"

    def __init__(self, delay_ms: float = 15.0, max_sentences: int = 6, words_per_piece: int = 3,
                 min_relative_score: float = 0.4, piece_window_ms: float = 0.0) -> None:
        """`piece_window_ms`: the generator's window (STREAM_PIECE_MS); the pieces due within one go out as one."""
        self.delay = delay_ms / 1000
        # The pieces of one window, which the generator would join anyway, yielded as one after their delays
        # added up: the same text at the same rate, with a wake-up a window instead of one a piece.
        self.per_wake = max(1, math.ceil(piece_window_ms / delay_ms)) if delay_ms > 0 else 1
        self.min_relative_score = min_relative_score
        self.max_sentences = max_sentences
        self.words_per_piece = words_per_piece

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        answer = self.compose(request)
        words = answer.split(" ")
        pieces = self.pieces(words)
        yield GenEvent("content", text=pieces[0])
        for i in range(1, len(pieces), self.per_wake):
            due = pieces[i: i + self.per_wake]
            await asyncio.sleep(self.delay * len(due))
            yield GenEvent("content", text="".join(due))
        yield GenEvent("usage", usage={
            "prompt_tokens": sum(len(b.text.split()) for b in request.blocks),
            "completion_tokens": len(words), "thinking_tokens": 0,
            "total_tokens": sum(len(b.text.split()) for b in request.blocks) + len(words),
        })
        yield GenEvent("done", model=self.name, text="stop")

    def budget(self, model: str) -> ContextBudget:
        """Little: it quotes the best hits' sentences and never reads the prompt."""
        return OFFLINE

    async def close(self) -> None:
        """Nothing to release: no clients, no files."""

    def pieces(self, words: list[str]) -> list[str]:
        """The answer's words, a few a piece; the first piece runs through the first citation, so the
        gateway, which shows nothing before a valid citation, can show it at once."""
        first = next((i + 1 for i, w in enumerate(words) if _MARKER.search(w)), self.words_per_piece)
        cuts = [0, *range(max(first, 1), len(words), self.words_per_piece), len(words)]
        return [(" " if a else "") + " ".join(words[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a]

    def compose(self, request: GenerationRequest) -> str:
        if request.blocks:
            return self._from_blocks(request.question, request.blocks)
        if request.history:
            return self._from_history(request)
        return NO_DATA

    def _from_blocks(self, question: str, blocks: list[ContextBlock]) -> str:
        terms = _stems(question)
        if not terms - _INSTRUCTION_STEMS:
            return self._openings(blocks)
        kinds = asked(question) | counted(question)
        measure = measure_asked(question) if FIGURE in kinds else None
        if measure:
            terms |= {_stem(w) for w in measure.words}
        subject = _subject(blocks)
        # What the question is about: its words that neither name what every source is about nor ask for a kind
        # ("lose" of "How much did X lose?"; a noun that names what is asked, "premium", stays: a sentence that
        # gives it says it), nor name the measure asked, which says what it is about in its own words.
        named = _stems(" ".join([measure.asked.search(question).group(0), *measure.words])) if measure else set()
        asking = {t for t in _stems(" ".join(asking_words(question))) if t not in _NAMING}
        topic = terms - subject - asking - named
        candidates = [  # (block, sentence, weight): the text's sentences, then what the metadata says
            (block, sentence, 1.0)
            for block in blocks
            for sentence in _sentences(block.text)
        ] + [(block, sentence, METADATA_WEIGHT) for block in blocks for sentence in metadata_sentences(question, kinds, block)]
        periods = {id(block): _period(block) for block in blocks}
        stems = [_stems(sentence) | periods[id(block)] for block, sentence, _ in candidates]
        # Inverse frequency over the candidate sentences: rare question terms count more.
        df = Counter(t for tokens in stems for t in tokens)
        n = len(candidates) or 1
        about = _About(topic, measure, stems, candidates, {t: math.log(1 + n / df[t]) for t in topic if df[t]})
        scores: dict[int, float] = {}
        for order, ((block, sentence, weight), tokens) in enumerate(zip(candidates, stems)):
            matched = (terms - _HOW) & tokens  # "much" of "how much" asks; "much lower" says nothing
            if not matched:
                continue
            # A metadata sentence is offered only when the question asks what it says: the fund's name is its point.
            told = weight != 1.0
            rarity = sum(math.log(1 + n / df[t]) * (SUBJECT_WEIGHT if t in subject and not told else 1.0)
                         for t in matched)
            score = weight * rarity / math.sqrt(1 + len(tokens) / 12)
            score *= 1.0 / (1 + 0.05 * (block.index - 1))  # earlier blocks ranked higher by retrieval
            # A cause seldom repeats the topic: a sentence touching it may tell why; a fact must be about it.
            on_topic = told or (about(order) if kinds & FACTS else about.touches(order))
            if kinds and on_topic and carries(sentence, kinds, block):
                score *= ASKED_WEIGHT
            scores[order] = score
        scored = sorted((_Scored(score, candidates[o][0], candidates[o][1], o) for o, score in scores.items()),
                        key=lambda s: (-s.score, s.order))
        floor = scored[0].score * self.min_relative_score if scored else 0.0
        chosen: list[_Scored] = []
        for s in scored:
            if s.score < floor:
                break  # matches a stray word of the question, not its point
            tokens = set(tokenize(s.sentence))
            if any(_jaccard(tokens, set(tokenize(c.sentence))) > 0.6 for c in chosen):
                continue  # the same fact said twice
            chosen.append(s)
            if len(chosen) == self.max_sentences:
                break
        if not chosen:
            return NOTHING_RELEVANT
        quoted = self._followed(chosen, candidates, kinds)
        if facts := kinds & FACTS:
            def off_question(s: _Scored) -> bool:  # holds a thing of the kind asked, about something else
                return (candidates[s.order][2] == 1.0 and not about(s.order)
                        and carries(s.sentence, facts, s.block))
            if all(off_question(s) or not carries(s.sentence, facts, s.block) for s in quoted):
                return self._not_stated(question, facts, measure, blocks)
            quoted = [s for s in quoted if not off_question(s)]
            scored = [s for s in scored if not off_question(s)]
        lines = ["Here is what the sources say:", ""]
        for s in quoted:
            label = f"**{s.block.label}**: " if s.block.label else ""
            lines.append(f"- {label}{s.sentence} [{s.block.index}]")
        relevant = [(s.block, s.sentence) for s in scored if s.score >= floor]
        if conflicts := find_conflicts(relevant):
            lines += ["", "**Conflicting information**", ""] + [f"- {c.describe()}" for c in conflicts]
        return "\n".join(lines)

    def _not_stated(self, question: str, facts: set[str], measure: Measure | None,
                    blocks: list[ContextBlock]) -> str:
        """No sentence holds what was asked about the thing asked: say so, and which sources were found."""
        what = measure.name if measure else " or ".join(KIND_NAMES[k] for k in sorted(facts & KIND_NAMES.keys()))
        lines = [NOT_STATED.format(what=what, question=question.strip()), "", "The sources found are about other things:", ""]
        lines += [f"- {b.label or 'Source'} [{b.index}]" for b in blocks[: self.max_sentences]]
        return "\n".join(lines)

    @staticmethod
    def _followed(chosen: list[_Scored], candidates: list[tuple[ContextBlock, str, float]],
                  kinds: set[str]) -> list[_Scored]:
        """The chosen sentences, each of the first FOLLOWED that lacks what was asked followed by the
        sentences after it in its source that hold a fact (not already quoted)."""
        quoted = {c.order for c in chosen}
        out: list[_Scored] = []
        for rank, anchor in enumerate(chosen):
            out.append(anchor)
            block, _, weight = candidates[anchor.order]
            if rank >= FOLLOWED or weight != 1.0 or (kinds and carries(anchor.sentence, kinds, block)):
                continue
            for after in range(anchor.order + 1, min(anchor.order + 1 + CONTINUATION, len(candidates))):
                next_block, sentence, next_weight = candidates[after]
                if next_block is not block or next_weight != 1.0:
                    break
                if after not in quoted and carries(sentence, FACTS, block):
                    quoted.add(after)
                    out.append(_Scored(anchor.score, block, sentence, after))
        return out

    def _openings(self, blocks: list[ContextBlock]) -> str:
        """A question that only says what to do with the sources ("Summarize that"): each source's
        opening sentence, in the order retrieval ranked them."""
        lines = ["Here is what the sources say:", ""]
        for block in blocks[: self.max_sentences]:
            if sentences := _sentences(block.text):
                label = f"**{block.label}**: " if block.label else ""
                lines.append(f"- {label}{sentences[0]} [{block.index}]")
        return "\n".join(lines) if len(lines) > 2 else NOTHING_RELEVANT

    def _from_history(self, request: GenerationRequest) -> str:
        """No context blocks but a conversation: restate the points already made."""
        points: list[str] = []
        for turn in request.history[-2:]:
            for line in turn.answer.splitlines():
                line = strip_citations(line).strip().lstrip("-* ").strip()
                if line and not line.endswith(":") and not line.startswith("*["):
                    points.append(line)
        if not points:
            return "We have not discussed anything I can summarise yet."
        unique: list[str] = []
        for p in points:
            if all(_jaccard(set(tokenize(p)), set(tokenize(u))) <= 0.6 for u in unique):
                unique.append(p)
        return "\n".join(["From our conversation so far:", ""] + [f"- {p}" for p in unique[: self.max_sentences]])


class _About:
    """Whether a candidate sentence is about what the question asks: it states the measure asked, if any, and it
    and the LEAD_IN sentences leading into it in its source ("Corveth's trial failed." before "The loss cost the
    fund 230bp.") hold at least ABOUT_SHARE of the topic's weight: a figure of the fund ("Orion gained 3.6% in
    June") answers "What did Orion gain from M&A?" only if it is about M&A. A topic word no candidate holds
    weighs as much as the mean of those some candidate holds (it has no rarity of its own): a sentence holding
    "2025" and "year" of "2025 full-year return" is about it, one holding "head" of "head of compliance" is
    not; when the sources hold no word of the topic at all ("Who audits Altair?"), no sentence is about it."""

    def __init__(self, topic: set[str], measure: Measure | None, stems: list[set[str]],
                 candidates: list[tuple[ContextBlock, str, float]], weights: dict[str, float]) -> None:
        self.topic, self.measure, self.stems, self.candidates, self.weights = topic, measure, stems, candidates, weights
        unseen = len(topic) - len(weights)
        self.total = sum(weights.values()) * (1 + unseen / len(weights)) if weights else 0.0

    def __call__(self, order: int) -> bool:
        if self.measure and not self.measure.stated.search(self.candidates[order][1]):
            return False
        if not self.topic:
            return True
        return bool(self.weights) and sum(self.weights[t] for t in self._held(order)) > ABOUT_SHARE * self.total

    def touches(self, order: int) -> bool:
        """Whether the sentence or its lead-in holds any word of the topic."""
        return not self.topic or bool(self._held(order))

    def _held(self, order: int) -> set[str]:
        block = self.candidates[order][0]
        return set().union(*(self.stems[o] for o in range(max(0, order - LEAD_IN), order + 1)
                             if self.candidates[o][0] is block)) & self.topic


def _period(block: ContextBlock) -> set[str]:
    """What each of a block's sentences holds without saying it: a factsheet's month and year as stems
    ({"august", "2024"} for 2024-08-31: its figures are of that month, "month return -4.1%"); another
    source's year only (a note of 2024-09-05 saying "lost 1.9% in July" speaks of July 2024; its month is
    when it was written, not what its figures are of)."""
    chunk = block.chunk
    if not chunk or not _ISO_DATE.match(chunk.date):
        return set()
    year, month = chunk.date[:4], int(chunk.date[5:7])
    if chunk.collection != "factsheets":
        return {year}
    return {year, _stem(calendar.month_name[month].lower())}
