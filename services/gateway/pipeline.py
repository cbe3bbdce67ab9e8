"""The path from question to answer, as a stream of events the gRPC servicer and the
SSE bridge both send: searching -> strategy -> generating -> thinking/content ->
citations -> done.

Every decision is in the strategy event (route, retrieval strategy and why, cache hit,
collections, filters including those read from the question, thresholds, timings,
fallbacks), so an operator can see why an answer came out as it did.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragmesh import metrics, tracing
from ragmesh.admission import Admission
from ragmesh.clients import GeneratorClient
from ragmesh.config import AnsweringSettings
from ragmesh.errors import InvalidArgument, RagmeshError, ResourceExhausted, Unavailable
from ragmesh.identity import Identity
from ragmesh.models import EXTRACTIVE
from ragmesh.request_context import identity_var, request_id_var
from ragmesh.store import CorrectionRecord
from ragmesh.text import citation_numbers
from ragmesh.types import Citation, GenEvent, Hit
from services.gateway import context, fallback, generation_params, router, small_talk
from services.gateway.answer_guard import AnswerGuard
from services.gateway.events import Done, Event, Sources
from services.gateway.history import (History, Recent, Unstored, carried_whole, held_conversation_id,
                                      held_recent, held_remembered)
from services.gateway.limits import RateLimiter, UsageLimiter
from services.gateway.memory import Memory, corrections_text
from services.gateway.models_offered import ModelCatalog, web_search_note
from services.gateway.planner import NO_RETRIEVAL, Planner
from services.gateway.reading import Reading
from services.gateway.request import AskInput
from services.gateway.scope_cache import Scopes
from services.gateway.shared_state import LocalRuns, SharedState
from services.gateway.strategy import Strategy, strategy_event, strategy_json

log = logging.getLogger(__name__)

HELD_NOTE = "the client holds the conversation: nothing of it is stored"
NO_MATCH = "I don't have any notes that match this question and these filters, so there is no data I can answer from."
STOP_WAIT_S = 5.0  # a stop waits this long at most for the answer to end (planning ends within its deadline)


@dataclass(frozen=True)
class Prepared:
    """A question `AskPipeline.prepare` accepted, with what it already holds for `run`: its
    conversation so far (turn count, last turns), its one reading and, when started, its embedding."""

    ask: AskInput
    conversation: Recent
    reading: Reading
    embedding: asyncio.Future[tuple[Any, float]] | None = None
    opens: bool = False  # a stored conversation's first turn (no earlier one)
    refusal: ResourceExhausted | None = None  # every planning slot was taken: `run` only says so

    @property
    def refused(self) -> bool:
        return self.refusal is not None


class Stopped(Exception):
    """The user pressed stop (POST /api/chat/stop or Gateway.Stop)."""


@dataclass
class Generated:
    """Generation's result, filled while its stream arrives: the answer's text, the web sources its
    grounding found, the tokens it took, the model that answered, whether the user stopped it, and when
    (ms after it started) the first token came and the first text was shown."""

    model: str
    parts: list[str] = field(default_factory=list)
    web: list[Citation] = field(default_factory=list)
    web_queries: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    stopped: bool = False
    started: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, round((time.monotonic() - self.started) * 1000, 2))


class AskPipeline:
    def __init__(self, history: History, generator: GeneratorClient, planner: Planner, memory: Memory,
                 limits: UsageLimiter, rate: RateLimiter | None = None, planning: Admission | None = None,
                 shared: SharedState | None = None, contention: Callable[[str], bool] = lambda tenant: False) -> None:
        self.history = history
        # Questions being planned (embedding + searches) at once: past it a question is refused at once
        # (RESOURCE_EXHAUSTED, Retry-After) instead of waiting behind the others until its searches time out.
        # While another tenant has work under way (`contention(tenant)`: the gateway's calls in flight), a
        # tenant plans at most half its share: its asks in a tight loop leave the cores to that work.
        self.planning = planning or Admission("gateway: retrieval", 0)
        self.contention = contention
        self.generator = generator
        self.planner = planner
        self.memory = memory
        self.limits = limits
        self.rate = rate or RateLimiter(0)
        self.models = ModelCatalog(generator, planner.default_model)
        # Running answers (and the scope cache and rate windows): in this process, or shared by replicas.
        self.shared = shared or SharedState(LocalRuns(), planner.cache, self.rate.windows)

    @property
    def settings(self) -> AnsweringSettings:
        return self.planner.settings

    @property
    def cache(self) -> Scopes:
        return self.planner.cache

    @property
    def default_model(self) -> str:
        return self.planner.default_model

    async def prepare(self, ask: AskInput, caller: Identity) -> Prepared:
        """Settles who asks (the caller itself: naming another user is refused), checks usage limits
        and that a named conversation is the asker's own, all before anything is written; fills defaults. `ask`
        arrives checked by its edge, through AskRequest (the one declaration of an Ask). A conversation
        the client holds (`ask.held`) is its turns as a stored one's would be read, under an id derived
        from them (history.held_conversation_id).

        A question every route searches for is embedded from here on (once every check but the
        conversation's has passed), while its conversation is read, so one that reuses its scope waits
        for little more than its embedding; only while at most half the planning slots are taken: nearer
        the limit a question let in now may be refused when it asks for its slot a moment later, and
        its embedding would be wasted."""
        if ask.held and ask.conversation_id:  # an edge's fault: it would be neither read nor written
            raise InvalidArgument("conversation_id", "names a stored conversation, but the client holds this one")
        who = caller.acting_for(ask.tenant, ask.user_id)
        ask.tenant, ask.user_id, ask.identity = who.tenant, who.user, who
        await self.rate.check(who.tenant, who.user)
        await self.models.check(ask.model)
        if self.limits.enabled:  # unlimited: no store read, and no trip through a thread before the answer
            await asyncio.to_thread(self.limits.check, ask.tenant, ask.user_id)
        if refusal := self._planning_refusal(ask):
            return Prepared(ask, Recent(0, []), Reading(ask.question), refusal=refusal)
        reading = self.planner.read(ask)
        embedding = self.planner.embed_early(ask, reading) if self.planning.quiet else None
        conversation = Recent(0, [])
        if ask.held:  # nothing to read: the client sent its turns; the id only names them (held_conversation_id)
            turns = ask.conversation_history
            conversation = held_recent(turns, self.settings.history_turns)
            ask.conversation_id = held_conversation_id(who.tenant, who.user,
                                                       turns[0].question if turns else ask.question)
        elif ask.conversation_id:  # another's, or unknown: the same NotFound
            try:
                if embedding is not None:
                    await asyncio.sleep(0)  # its request leaves before the read's thread takes the GIL
                conversation = await asyncio.to_thread(self.history.own_recent, who, ask.conversation_id,
                                                       self.settings.history_turns)
            except BaseException:
                _discard(embedding)
                raise
        else:
            ask.conversation_id = uuid.uuid4().hex
        return Prepared(ask, conversation, reading, embedding, opens=not (ask.held or conversation.count))

    def _planning_refusal(self, ask: AskInput) -> ResourceExhausted | None:
        """The refusal a question gets when every planning slot is taken as it is asked (most refusals
        under load): decided before its question is read, its conversation looked up or its answer
        registered, since none of that would be used. A question let in here may still be refused its
        slot in `run` (its tenant's or user's share, or the last slot taken meanwhile)."""
        if not self.planning.full:
            return None
        try:
            with self.planning.slot(ask.tenant, ask.user_id):  # refuses (and counts the refusal) when full
                return None
        except ResourceExhausted as exc:
            return exc

    async def stop(self, conversation_id: str, wait_s: float = STOP_WAIT_S) -> bool:
        """Stops a running answer and waits (at most `wait_s`) until it has ended, so what it leaves
        (its partial answer, or, stopped before any content, no question at all) is stored when this
        returns. Callers check the conversation is the caller's first. The answer may run on another
        gateway replica; Unavailable when the shared state cannot reach it (none runs on this one)."""
        return await self.shared.runs.stop(conversation_id, wait_s)

    async def run(self, prepared: Prepared) -> AsyncIterator[Event]:
        """Streams the events of one answer `prepare` accepted."""
        ask, conversation, embedding = prepared.ask, prepared.conversation, prepared.embedding
        if prepared.refusal is not None:  # the events a question refused its slot below gets, and nothing else
            yield Event("searching", True)
            yield _error_event(prepared.refusal, ask.conversation_id)
            return
        conv = ask.conversation_id
        identity_var.set(ask.identity)  # the retriever searches, and memory is written, as this user
        running = await self.shared.runs.begin(conv)
        stop = running.stop
        lookup: asyncio.Future[list[CorrectionRecord]] | None = None
        try:
            yield Event("searching", True)
            with self.planning.slot(ask.tenant, ask.user_id, contended=self.contention(ask.tenant)):  # its share
                # The user's corrections are looked up while the question is planned, not after (and not
                # for a question refused its slot).
                lookup = asyncio.ensure_future(self.memory.relevant_corrections(ask.tenant, ask.user_id,
                                                                                ask.question))
                plan = await self.planner.plan(ask, conversation, embedding, prepared.reading)
            reading = plan.reading or prepared.reading
            metrics.route_taken(plan.route)
            # Said after the plan's reason: web search the model cannot do, stop and reuse reaching this
            # replica only while the shared state is degraded, and a conversation stored nowhere.
            notes = [n for n in (web_search_note(plan.model, ask.web_search), self.shared.problem,
                                 HELD_NOTE if ask.held else "") if n]
            if plan.retrieval != NO_RETRIEVAL:
                metrics.scope_cache(plan.cache_hit)
            with tracing.span("context"):
                compressed = (await self.planner.quality.compress(
                    reading.text, plan.model, plan.hits, (await self.planner.budgets.get(plan.model)).chars)
                    if plan.searched else None)
                hits = compressed.hits if compressed else plan.hits
                ctx = await self._context(ask, plan.model, hits)
                if plan.retrieval != NO_RETRIEVAL and not ctx.blocks and not plan.unavailable and (
                        recent := await fallback.recent_notes(self.planner.retriever, ask, plan)):
                    hits = recent.hits
                    ctx = context.build(recent.hits, await self.planner.budgets.get(plan.model))
                    plan.relaxed.append(recent.note)
                    notes.append(recent.note)
                tracing.annotate(blocks=len(ctx.blocks), chars=len(ctx.text))
            if prepared.opens and plan.searched:
                await self._keep_for_held(ask)
            if plan.retrieval != NO_RETRIEVAL and not ctx.blocks and plan.unavailable:
                # Nothing arrived in time: an error, not "no notes match", and nothing is stored.
                raise Unavailable(f"retrieval: no answer in time from {', '.join(plan.unavailable)}, so "
                                  f"there is nothing to answer from; try again")
            corrections = [] if plan.route == router.DIRECT else await lookup
            strategy = strategy_event(plan, [compressed.step] if compressed else [], len(ctx.text), len(corrections),
                                      notes)
            scores = {h.chunk.chunk_id: h.score for h in hits}
            yield Event("searching", False)
            yield Event("strategy", strategy)
            with tracing.span("storing", record="question"):
                question_id = await asyncio.to_thread(self._log(ask).save_question, ask.tenant, ask.user_id, conv,
                                                      ask.question)
            async for event in self._answer(ask, reading, strategy, conversation, stop, question_id, ctx, corrections,
                                            scores, plan.question_vector):
                yield event
        except RagmeshError as exc:
            yield _error_event(exc, conv)
        except Exception:  # a fault of ours: the client gets a request id to quote, the log the details
            log.exception("ask failed", extra={"conversation_id": conv})
            yield Event("error", {"code": "INTERNAL", "message": f"internal error (request id {request_id_var.get()})"})
        finally:
            _discard(lookup)
            _discard(embedding)
            self.shared.runs.end(conv, running)

    async def _keep_for_held(self, ask: AskInput) -> None:
        """A stored conversation's first search, kept under the id a client that holds the conversation
        from its next turn on derives too (a front end that keeps the conversation sends no history with its
        first question, and an Ask without any is stored): a held follow-up then reuses it as the stored one's
        would. It takes a second place in the tenant's share of the scope cache (the same objects in this
        process, a second copy in Redis) until its TTL or the least-recently-used rule drops it. After the
        context is built: that read the cached entry last."""
        entry = await self.cache.get(ask.tenant, ask.conversation_id)
        if entry is not None:
            await self.cache.put(ask.tenant, held_conversation_id(ask.tenant, ask.user_id, ask.question), entry)

    def _log(self, ask: AskInput) -> History | Unstored:
        """Where the ask's question and answer are stored: nowhere when the client holds the conversation."""
        return Unstored() if ask.held else self.history

    async def _context(self, ask: AskInput, model: str, hits: list[Hit]) -> context.Context:
        """The context of the planned hits, within what `model` takes. A question that reuses its scope mostly
        has the very hits the scope's last context was built from: that context is used again (it is never
        changed) when it was built for the same budget."""
        if not hits:  # nothing to size: a turn that searches nothing never waits on the generator's budget
            return context.Context([], "", [])
        budget = await self.planner.budgets.get(model)
        entry = await self.cache.get(ask.tenant, ask.conversation_id)
        if (entry is not None and entry.context is not None and _same_objects(entry.context[0], hits)
                and entry.context[1].budget == budget):
            return entry.context[1]
        built = context.build(hits, budget)
        if entry is not None and _same_objects(hits, entry.hits[: len(hits)]):
            entry.context = (list(hits), built)
            await self.cache.keep_context(ask.tenant, ask.conversation_id, entry)
        return built

    # -- generation -------------------------------------------------------------------------
    async def _answer(self, ask: AskInput, reading: Reading, s: Strategy, conversation: Recent, stop: asyncio.Event,
                      question_id: str, ctx: context.Context, corrections: list[CorrectionRecord],
                      scores: dict[str, float], question_vector: np.ndarray | None) -> AsyncIterator[Event]:
        """`question_vector`: the question's embedding as asked, which its memory keeps (planner.Plan)."""
        answer = Generated(s.model)
        finished, failure = False, ""
        log = self._log(ask)
        yield Event("generating", True)
        try:
            # closed on the way out, so a client that goes cancels the generator call upstream
            async with aclosing(self._generate(ask, reading, s, conversation, stop, ctx, corrections,
                                               answer)) as events:
                async for event in events:
                    yield event
            text = answer.text
            if answer.stopped and not text:  # stopped before any content: the question goes too
                await asyncio.to_thread(log.drop_question, ask.tenant, ask.conversation_id, question_id)
                finished = True
                yield Event("citations", Sources([], [], {}))
                yield Event("done", Done(ask.conversation_id, "", answer.model, True, answer.usage, ask.held))
                return
            citations = _citations(text, ctx.blocks) + _web_citations(answer.web, len(ctx.blocks))
            meta = {
                "model": answer.model, "route": s.route, "retrieval": s.retrieval, "usage": answer.usage,
                "strategy": strategy_json(s),  # a reopened answer shows how it was made
                "unavailable": s.unavailable, "dense_skipped": s.dense_skipped,
                "chunk_ids": [h.chunk.chunk_id for h in ctx.hits_used],
                "sources": sorted({b.label for b in ctx.blocks}),
                "chunk_map": {c.ref: c.chunk_id for c in citations if c.chunk_id},
                "citations": [dataclasses.asdict(c) for c in citations], "web_queries": answer.web_queries,
                "timings": {"retrieval_ms": s.retrieval_ms,
                            "generation_ms": round((time.monotonic() - answer.started) * 1000, 2), **answer.marks},
            }
            tokens = answer.usage.get("total_tokens") or len(text.split())
            saved: list[str] = []

            def store() -> None:
                """The answer and its usage, in one trip through a worker thread."""
                saved.append(log.save_answer(ask.conversation_id, text, meta, answer.stopped))
                self.limits.record(ask.tenant, ask.user_id, tokens)

            try:
                with tracing.span("storing", record="answer"):
                    await asyncio.to_thread(store)
            finally:
                finished = bool(saved)  # stored: never stored again as failed, whatever the usage write did
            answer_id = saved[0]
            if not ask.held:  # held: no conversation memory, no running summary
                self.memory.after_turn(ask.tenant, ask.user_id, ask.conversation_id, conversation.count + 1, s.model,
                                       [(question_id, "user", ask.question), (answer_id, "assistant", text)],
                                       question_vector)
            yield Event("citations", Sources(citations, answer.web_queries, scores))
            yield Event("done", Done(ask.conversation_id, answer_id, answer.model, answer.stopped, answer.usage, ask.held))
        except RagmeshError as exc:
            failure = exc.code
            raise
        finally:
            if not finished and not failure and not answer.parts:  # the client went before any content
                log.drop_question(ask.tenant, ask.conversation_id, question_id)
            elif not finished:
                # Keep what was said: marked failed when generation failed, stopped when the client went.
                meta = {"model": answer.model, "route": s.route, "strategy": strategy_json(s),
                        **({"failed": failure} if failure else {})}
                log.save_answer(ask.conversation_id, answer.text, meta, stopped=not failure, failed=failure)

    async def _generate(self, ask: AskInput, reading: Reading, s: Strategy, conversation: Recent,
                        stop: asyncio.Event, ctx: context.Context, corrections: list[CorrectionRecord],
                        answer: Generated) -> AsyncIterator[Event]:
        """Generation: the thinking and content events shown as they arrive, the rest gathered in `answer`.
        A generator failure raises out; a stop ends it with `answer.stopped` set."""
        canned = await self._canned(ask, reading, s, ctx, conversation)
        if canned is not None:
            answer.model, text = canned
            answer.parts.append(text)
            answer.mark("first_content_ms")
            yield Event("content", text)
            return
        stream = await self._generation(ask, reading, s, conversation, ctx, corrections)
        guard = AnswerGuard({b.index for b in ctx.blocks}, enforce=bool(ctx.blocks))
        if preface := fallback.preface(s):  # the context is the recent notes, not matches: said first
            answer.parts.append(guard.feed(preface))
            yield Event("content", preface)
        with tracing.span("generation", model=s.model):
            async with aclosing(_until(stream, stop)) as events:
                try:
                    async for ev in events:
                        if ev.kind in ("content", "thinking"):
                            answer.mark("first_token_ms")
                        if ev.kind == "content":
                            answer.parts.append(ev.text)
                            if shown := guard.feed(ev.text):
                                answer.mark("first_content_ms")
                                yield Event("content", shown)
                        elif ev.kind == "thinking":
                            yield Event("thinking", ev.text)
                        elif ev.kind == "grounding":
                            answer.web += ev.citations
                            answer.web_queries += ev.queries
                        elif ev.kind == "usage":
                            answer.usage = ev.usage
                        elif ev.kind == "done":
                            answer.model = ev.model or answer.model
                except Stopped:
                    answer.stopped = True
        if not answer.stopped:
            tail, replaced = guard.finish()
            if replaced:
                answer.parts[:] = [tail]
                answer.mark("first_content_ms")
                yield Event("content", tail)

    async def _canned(self, ask: AskInput, reading: Reading, s: Strategy, ctx: context.Context,
                      conversation: Recent) -> tuple[str, str] | None:
        """(model, answer) for answers made without the generator, or None. A turn that is not a question
        is answered by a configured model from the conversation when it has one (thanks, "what else?")."""
        if s.route == router.DIRECT:
            if s.model != EXTRACTIVE and reading.small_talk in small_talk.CONVERSATIONAL and conversation.turns:
                return None
            funds = await self.planner.known_funds(ask.tenant) if small_talk.offers(reading) else []
            return "direct_response", small_talk.reply(reading, funds, ask.held)
        if s.retrieval != NO_RETRIEVAL and not ctx.blocks:
            return "no_context_response", NO_MATCH
        if s.route == router.SUMMARY and s.model == EXTRACTIVE:  # the offline backend quotes; a summary is quoted whole
            lines = [f"**{ctx.blocks[0].label}**", ""] + [f"{b.text} [{b.index}]" for b in ctx.blocks]
            return "global_summary_path", "\n\n".join(lines)
        return None

    async def _generation(self, ask: AskInput, reading: Reading, s: Strategy, conversation: Recent,
                          ctx: context.Context, corrections: list[CorrectionRecord]) -> AsyncIterator[GenEvent]:
        # The whole conversation while it fits the history budget; past it, the running summary and
        # every turn after what it covers. One the client holds: its newest turns that fit.
        budget = self.settings.history_char_budget
        if ask.held:
            remembered = held_remembered(ask.conversation_history, budget)
        else:
            remembered = carried_whole(conversation, budget) or await asyncio.to_thread(
                self.history.remembered, ask.conversation_id, conversation, budget)
        recent, summary = remembered.turns, remembered.summary
        params = generation_params.for_answer(s.route, s.collections, persona=bool(ask.persona.strip()),
                                              notes_contract=ask.notes_contract)
        system, prompt = context.build_prompt(params.prompt, reading.text, recent, summary, ctx, ask.sources,
                                              ask.persona)
        if corrections:
            system = f"{corrections_text(corrections)}\n\n{system}"
        return self.generator.generate(model=s.model, question=reading.text, blocks=ctx.blocks, history=recent,
                                       system_instruction=system, prompt=prompt, web_search=ask.web_search,
                                       temperature=params.temperature)


def _same_objects(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _error_event(exc: RagmeshError, conversation_id: str) -> Event:
    """A refusal or failure the client is told of, as the stream's last event (and logged)."""
    log.warning("ask failed", extra={"error": str(exc), "conversation_id": conversation_id})
    return Event("error", {"code": exc.code, "message": str(exc)})


def _discard(task: asyncio.Future | None) -> None:
    """Cancels work the answer no longer needs; done, its failure is not reported twice."""
    if task is not None and not task.cancel() and not task.cancelled():
        task.exception()


async def _until(stream: AsyncIterator[GenEvent], stop: asyncio.Event) -> AsyncIterator[GenEvent]:
    """Yields from `stream` until it ends, or raises Stopped as soon as `stop` is set.

    On the way out the stream is always closed, which cancels the generator call
    upstream: a pending read is cancelled (never awaited, so this also works while
    the caller itself is being cancelled), an idle stream is closed.
    """
    waiter = asyncio.ensure_future(stop.wait())
    step: asyncio.Future | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if step not in done:
                raise Stopped
            try:
                event = step.result()
            except StopAsyncIteration:
                return
            step = None
            yield event
    finally:
        waiter.cancel()
        if step is not None and not step.done():
            step.cancel()
        else:
            await stream.aclose()


def _citations(answer: str, blocks: list) -> list[Citation]:
    by_index = {b.index: b for b in blocks}
    cited = dict.fromkeys(citation_numbers(answer))
    return [context.citation_for(by_index[i]) for i in cited if i in by_index]


def _web_citations(web: list[Citation], offset: int) -> list[Citation]:
    """Grounding sources (Google Search) numbered after the context blocks."""
    return [dataclasses.replace(c, index=offset + i) for i, c in enumerate(web, start=1)]
