"""The quality steps as the planner and the pipeline run them: each reads and updates the
Strategy, and adds a QualityStep to it (shown in the strategy event) saying what it did, why it
was skipped, or why it fell back to the unimproved path."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragmesh import tracing
from ragmesh.clients import GeneratorClient
from ragmesh.config import AnsweringSettings
from ragmesh.models import EXTRACTIVE
from services.gateway.quality import compress, rerank, rewrite
from services.gateway.quality.model import StepFailed, complete
from services.gateway.router import FALLBACK_SIMILARITY

if TYPE_CHECKING:
    from services.gateway.strategy import Strategy

DONE, SKIPPED, FALLBACK = "done", "skipped", "fallback"
NO_MODEL = "no model configured"


@dataclass(frozen=True)
class QualityStep:
    step: str  # rewrite | rerank | compress | history
    status: str  # done | skipped | fallback
    ms: float
    detail: str


class QualityStack:
    def __init__(self, generator: GeneratorClient, settings: AnsweringSettings) -> None:
        """`settings`: the gateway's, which turn each step on (QUALITY_*) and bound its time."""
        self.generator = generator
        self.settings = settings

    async def _step(self, s: Strategy, name: str, unneeded: str, work: Callable[[], Awaitable[str]],
                    fallback: str, model: str = "") -> None:
        """Runs `work` unless the step is off, has no model (`model`, else the steps') or is not needed;
        records how it went."""
        started = time.perf_counter()
        status, detail = SKIPPED, (
            f"turned off (QUALITY_{name.upper()}=false)" if not getattr(self.settings, f"quality_{name}")
            else NO_MODEL if (model or self._model(s)) == EXTRACTIVE else unneeded)
        if not detail:
            with tracing.span("quality", step=name):
                try:
                    status, detail = DONE, await work()
                except StepFailed as exc:
                    status, detail = FALLBACK, f"{exc}: {fallback}"
                tracing.annotate(status=status)
        s.quality.append(QualityStep(name, status, round((time.perf_counter() - started) * 1000, 2), detail))

    def _model(self, s: Strategy) -> str:
        return self.settings.quality_model or s.model

    async def _ask(self, s: Strategy, system: str, prompt: str, timeout: float) -> str:
        return await complete(self.generator, self._model(s), system, prompt, timeout)

    async def rewrite(self, question: str, s: Strategy) -> None:
        """Sets s.variants, the more search queries the retriever fuses with the question."""
        async def work() -> str:
            kind = rewrite.intent(question)
            reply = await self._ask(s, rewrite.SYSTEM, rewrite.prompt(question, kind), self.settings.rewrite_timeout_s)
            if not (found := rewrite.variants(reply, question)):
                raise StepFailed("the model's reply held no search query")
            s.variants = found
            return f"{kind} intent: {len(found)} variants"

        await self._step(s, "rewrite", "cached hits reused: no search" if s.cache_hit else "", work,
                         "the question alone is searched")

    async def rerank(self, question: str, s: Strategy) -> None:
        """Reorders the best fused hits of s.hits by the model's 0-10 scores; sets s.rerank_count."""
        async def work() -> str:
            pool = s.hits[: self.settings.rerank_candidates]
            reply = await self._ask(s, rerank.SYSTEM, rerank.prompt(question, pool), self.settings.rerank_timeout_s)
            if not (scored := rerank.scores(reply, len(pool))):
                raise StepFailed("the model's reply held no score")
            s.hits, s.rerank_count = rerank.reorder(pool, scored) + s.hits[len(pool):], len(pool)
            return f"{len(scored)} of {len(pool)} candidates scored, best {max(scored.values()):g}/10"

        await self._step(s, "rerank", "fewer than 2 candidates" if len(s.hits) < 2 else "", work,
                         "fused order kept")

    async def compress(self, question: str, s: Strategy) -> None:
        """Replaces the text of each hit in s.hits by the sentences the question needs; drops the
        hits the model found nothing in, unless that is all of them."""
        if not s.quality:  # no search was planned (direct, summary and follow-up routes): nothing to report
            return
        async def work() -> str:
            replies = await asyncio.gather(*(
                self._ask(s, compress.SYSTEM, compress.prompt(question, h.chunk.text), self.settings.compress_timeout_s)
                for h in s.hits), return_exceptions=True)
            failures = [str(r) for r in replies if isinstance(r, StepFailed)]
            if unexpected := [r for r in replies if isinstance(r, BaseException) and not isinstance(r, StepFailed)]:
                raise unexpected[0]
            if len(failures) == len(replies):
                raise StepFailed(failures[0])
            texts = [compress.compressed(r, h.chunk.text) if isinstance(r, str) else None
                     for h, r in zip(s.hits, replies)]
            if all(t == "" for t in texts):
                raise StepFailed("the model found nothing relevant in any chunk")
            s.hits = [h if t is None else dataclasses.replace(h, chunk=dataclasses.replace(h.chunk, text=t))
                      for h, t in zip(s.hits, texts) if t != ""]
            counts = {"cut": sum(bool(t) for t in texts), "dropped": texts.count(""), "kept whole": texts.count(None)}
            counts |= {m.strip(" []:"): sum(bool(t) and t.startswith(m) for t in texts) for m in compress.MARKERS}
            note = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
            return f"{len(texts)} chunks: {note}" + (f" ({len(failures)} {failures[0]})" if failures else "")

        await self._step(s, "compress", "" if s.hits else "no hits", work, "chunks kept whole")

    async def use_history(self, s: Strategy, turns: int) -> bool:
        """True when the answer should come from the conversation (its summary and recent turns), not
        from hits this weak: none, or none as similar as the last similarity threshold."""
        weak = not s.hits or (not s.dense_skipped and s.threshold_layer == 3
                              and max(h.dense_score for h in s.hits) < FALLBACK_SIMILARITY)
        unneeded = (f"best hit within the similarity thresholds (layer {s.threshold_layer})" if not weak
                    else "no earlier turns to answer from" if not turns else "")
        used = False

        async def work() -> str:
            nonlocal used
            used = True
            return (f"best similarity under {FALLBACK_SIMILARITY:g}: answered from the conversation's summary "
                    f"and last turns, not from the hits")

        await self._step(s, "history", unneeded, work, "", model=s.model)  # the answer's model reads the history
        return used
