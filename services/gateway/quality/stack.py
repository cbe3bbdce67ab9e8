"""The quality steps as the planner and the pipeline run them. Each step takes what it works on and
returns a typed result: the QualityStep the strategy event shows (what it did, why it was skipped, or
why it fell back to the unimproved path, with its time) and what it produced, or the input unchanged."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ragmesh import tracing
from ragmesh.clients import GeneratorClient
from ragmesh.config import AnsweringSettings
from ragmesh.models import EXTRACTIVE
from ragmesh.types import Hit
from services.gateway.quality import compress, rerank, rewrite
from services.gateway.quality.model import StepFailed, complete
from services.gateway.router import FALLBACK_SIMILARITY

DONE, SKIPPED, FALLBACK = "done", "skipped", "fallback"
NO_MODEL = "no model configured"
T = TypeVar("T")


@dataclass(frozen=True)
class QualityStep:
    """One quality step of an answer, in the order they ran."""

    __pydantic_config__ = {"use_attribute_docstrings": True, "json_schema_serialization_defaults_required": True}

    step: str
    """rewrite | rerank | history | compress"""
    status: str
    """done | skipped | fallback"""
    ms: float
    detail: str
    """What it did, or why it was skipped or fell back"""


@dataclass(frozen=True)
class Rewritten:
    step: QualityStep
    variants: list[str]  # more search queries the retriever fuses with the question ([]: the question alone)


@dataclass(frozen=True)
class Reranked:
    step: QualityStep
    hits: list[Hit]
    scored: int  # candidates the model scored (0: fused order kept)


@dataclass(frozen=True)
class Compressed:
    step: QualityStep
    hits: list[Hit]


@dataclass(frozen=True)
class FromHistory:
    step: QualityStep
    used: bool  # answer from the conversation, not from the hits


class QualityStack:
    def __init__(self, generator: GeneratorClient, settings: AnsweringSettings) -> None:
        """`settings`: the gateway's, which turn each step on (QUALITY_*) and bound its time."""
        self.generator = generator
        self.settings = settings

    async def _step(self, name: str, model: str, unneeded: str, work: Callable[[], Awaitable[tuple[str, T]]],
                    fallback: str) -> tuple[QualityStep, T | None]:
        """Runs `work` unless the step is off, has no model or is not needed (`unneeded` says why): how it
        went, and what `work` made (None when it did not run or fell back)."""
        started = time.perf_counter()
        made: T | None = None
        status, detail = SKIPPED, (
            f"turned off (QUALITY_{name.upper()}=false)" if not getattr(self.settings, f"quality_{name}")
            else NO_MODEL if model == EXTRACTIVE else unneeded)
        if not detail:
            with tracing.span("quality", step=name):
                try:
                    detail, made = await work()
                    status = DONE
                except StepFailed as exc:
                    status, detail = FALLBACK, f"{exc}: {fallback}"
                tracing.annotate(status=status)
        return QualityStep(name, status, round((time.perf_counter() - started) * 1000, 2), detail), made

    def model(self, answer_model: str) -> str:
        """The model the steps ask: their own, else the answer's."""
        return self.settings.quality_model or answer_model

    async def rewrite(self, question: str, answer_model: str, cache_hit: bool) -> Rewritten:
        """The more search queries the retriever fuses with the question."""
        model = self.model(answer_model)

        async def work() -> tuple[str, list[str]]:
            kind = rewrite.intent(question)
            reply = await complete(self.generator, model, rewrite.SYSTEM, rewrite.prompt(question, kind),
                                   self.settings.rewrite_timeout_s)
            if not (found := rewrite.variants(reply, question)):
                raise StepFailed("the model's reply held no search query")
            return f"{kind} intent: {len(found)} variants", found

        step, found = await self._step("rewrite", model, "cached hits reused: no search" if cache_hit else "", work,
                                       "the question alone is searched")
        return Rewritten(step, found or [])

    async def rerank(self, question: str, answer_model: str, hits: list[Hit]) -> Reranked:
        """The best fused hits reordered by the model's 0-10 scores, the rest behind them."""
        model = self.model(answer_model)
        pool = hits[: self.settings.rerank_candidates]

        async def work() -> tuple[str, list[Hit]]:
            reply = await complete(self.generator, model, rerank.SYSTEM, rerank.prompt(question, pool),
                                   self.settings.rerank_timeout_s)
            if not (scored := rerank.scores(reply, len(pool))):
                raise StepFailed("the model's reply held no score")
            return (f"{len(scored)} of {len(pool)} candidates scored, best {max(scored.values()):g}/10",
                    rerank.reorder(pool, scored) + hits[len(pool):])

        step, reordered = await self._step("rerank", model, "fewer than 2 candidates" if len(hits) < 2 else "", work,
                                           "fused order kept")
        return Reranked(step, hits, 0) if reordered is None else Reranked(step, reordered, len(pool))

    async def compress(self, question: str, answer_model: str, hits: list[Hit], room: int) -> Compressed:
        """Each hit's text cut to the sentences the question needs; the hits the model found nothing in
        dropped, unless that is all of them. Not needed when the hits fit `room` (the answer model's context
        budget, in characters) whole: a model with a large window reads them as they are, and a hundred
        hits would otherwise cost a hundred calls."""
        model = self.model(answer_model)

        async def work() -> tuple[str, list[Hit]]:
            replies = await asyncio.gather(*(
                complete(self.generator, model, compress.SYSTEM, compress.prompt(question, h.chunk.text),
                         self.settings.compress_timeout_s)
                for h in hits), return_exceptions=True)
            failures = [str(r) for r in replies if isinstance(r, StepFailed)]
            if unexpected := [r for r in replies if isinstance(r, BaseException) and not isinstance(r, StepFailed)]:
                raise unexpected[0]
            if len(failures) == len(replies):
                raise StepFailed(failures[0])
            texts = [compress.compressed(r, h.chunk.text) if isinstance(r, str) else None
                     for h, r in zip(hits, replies)]
            if all(t == "" for t in texts):
                raise StepFailed("the model found nothing relevant in any chunk")
            kept = [h if t is None else dataclasses.replace(h, chunk=dataclasses.replace(h.chunk, text=t))
                    for h, t in zip(hits, texts) if t != ""]
            counts = {"cut": sum(bool(t) for t in texts), "dropped": texts.count(""), "kept whole": texts.count(None)}
            counts |= {m.strip(" []:"): sum(bool(t) and t.startswith(m) for t in texts) for m in compress.MARKERS}
            note = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
            return f"{len(texts)} chunks: {note}" + (f" ({len(failures)} {failures[0]})" if failures else ""), kept

        unneeded = ("no hits" if not hits else "every hit fits the context whole"
                    if sum(len(h.chunk.text) for h in hits) <= room else "")
        step, kept = await self._step("compress", model, unneeded, work, "chunks kept whole")
        return Compressed(step, hits if kept is None else kept)

    async def use_history(self, answer_model: str, hits: list[Hit], dense_skipped: bool, threshold_layer: int,
                          turns: int) -> FromHistory:
        """Whether the answer should come from the conversation (its summary and recent turns), not from
        hits this weak: none, or none as similar as the last similarity threshold."""
        weak = not hits or (not dense_skipped and threshold_layer == 3
                            and max(h.dense_score for h in hits) < FALLBACK_SIMILARITY)
        unneeded = (f"best hit within the similarity thresholds (layer {threshold_layer})" if not weak
                    else "no earlier turns to answer from" if not turns else "")

        async def work() -> tuple[str, bool]:
            return (f"best similarity under {FALLBACK_SIMILARITY:g}: answered from the conversation's summary "
                    f"and last turns, not from the hits"), True

        # the answer's model reads the history, not the steps' own
        step, used = await self._step("history", answer_model, unneeded, work, "")
        return FromHistory(step, bool(used))
