"""The path from question to answer, as a stream of events the gRPC servicer and
the SSE bridge both send: searching -> strategy -> generating -> thinking/content
-> citations -> done.

Every decision (route, reason, cache hit, collections, filter, timings) goes out
in the strategy event so an operator can see why an answer came out as it did.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragmesh.clients import EmbedderClient, GeneratorClient, RetrieverClient
from ragmesh.errors import RagmeshError
from ragmesh.types import ContextBlock, GenEvent, Hit, SearchFilter, Turn
from services.gateway import context
from services.gateway.history import History
from services.gateway.request import AskInput
from services.gateway.router import NO_RAG, classify_intent
from services.gateway.scope_cache import ScopeCache, ScopeEntry, scope_key

log = logging.getLogger(__name__)

RAG_REUSE = "RAG_REUSE"
RAG_NEW_QUERY = "RAG_NEW_QUERY"
_MARKER = re.compile(r"\[(\d+)\]")


@dataclass
class Event:
    kind: str  # searching | strategy | generating | thinking | content | citations | done | error
    value: Any


@dataclass
class Strategy:
    route: str
    reason: str
    conversation_id: str
    collections: list[str]
    filter: SearchFilter
    cache_key: str
    cache_hit: bool = False
    k: int = 0
    candidate_count: int = 0
    chunks: int = 0
    retrieval_ms: float = 0.0
    dense_skipped: bool = False
    hits: list[Hit] = field(default_factory=list, repr=False)


class Stopped(Exception):
    """The user pressed stop (POST /api/chat/stop or Gateway.Stop)."""


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    if a is None or b is None:
        return None
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class AskPipeline:
    def __init__(
        self,
        history: History,
        retriever: RetrieverClient,
        generator: GeneratorClient,
        embedder: EmbedderClient,
        cache: ScopeCache,
        default_model: str,
        context_top_k: int = 8,
        history_turns: int = 3,
        same_topic_threshold: float = 0.5,
    ) -> None:
        self.history = history
        self.retriever = retriever
        self.generator = generator
        self.embedder = embedder
        self.cache = cache
        self.default_model = default_model
        self.context_top_k = context_top_k
        self.history_turns = history_turns
        self.same_topic_threshold = same_topic_threshold
        self._running: dict[str, asyncio.Event] = {}

    def prepare(self, ask: AskInput) -> AskInput:
        """Validates (raising InvalidArgument before anything is written) and fills defaults."""
        ask.validate()
        ask.conversation_id = ask.conversation_id or uuid.uuid4().hex
        ask.model = ask.model or self.default_model
        return ask

    def stop(self, conversation_id: str) -> bool:
        event = self._running.get(conversation_id)
        if event is None:
            return False
        event.set()
        return True

    async def run(self, ask: AskInput) -> AsyncIterator[Event]:
        """Streams the events of one answer; `prepare` must have accepted `ask`."""
        conv = ask.conversation_id
        stop = self._running.setdefault(conv, asyncio.Event())
        stop.clear()
        try:
            yield Event("searching", True)
            turns = await asyncio.to_thread(self.history.turns, conv)
            strategy = await self._strategy(ask, turns)
            yield Event("searching", False)
            yield Event("strategy", strategy)
            await asyncio.to_thread(self.history.save_question, ask.tenant, ask.user_id, conv, ask.question)
            async for event in self._answer(ask, strategy, turns[-self.history_turns :], stop):
                yield event
        except RagmeshError as exc:
            log.warning("ask failed", extra={"error": str(exc), "conversation_id": conv})
            yield Event("error", {"code": exc.code, "message": str(exc)})
        finally:
            self._running.pop(conv, None)

    # -- strategy and retrieval -------------------------------------------------------------
    async def _strategy(self, ask: AskInput, turns: list[Turn]) -> Strategy:
        search_filter = SearchFilter(
            tenant=ask.tenant, start_date=ask.start_date, end_date=ask.end_date,
            any_of={"fund_name": sorted(ask.selected_funds)} if ask.selected_funds else {},
        )
        key = scope_key(ask.start_date, ask.end_date, ask.selected_funds)
        s = Strategy("", "", ask.conversation_id, ask.collections, search_filter, key,
                     k=ask.top_k or self.context_top_k)
        intent, reason = classify_intent(ask.question, len(turns))
        if intent == NO_RAG:
            s.route, s.reason = NO_RAG, reason
            return s
        started = time.perf_counter()
        vector = await self._embed_question(ask.question)
        cached = self.cache.get(ask.tenant, ask.conversation_id)
        if cached is None:
            s.route, s.reason = RAG_NEW_QUERY, "no cached scope for this conversation"
        elif cached.key != key or cached.collections != s.collections:
            s.route, s.reason = RAG_NEW_QUERY, f"filters changed ({cached.key} -> {key})"
        else:
            similarity = cosine(cached.question_vector, vector)
            if similarity is not None and similarity >= self.same_topic_threshold:
                s.route, s.cache_hit = RAG_REUSE, True
                s.reason = f"same filters and topic (similarity {similarity:.2f})"
                s.hits, s.candidate_count = cached.hits, cached.candidate_count
            else:
                shown = "unknown" if similarity is None else f"{similarity:.2f}"
                s.route, s.reason = RAG_NEW_QUERY, f"same filters, different topic (similarity {shown})"
        if s.route == RAG_NEW_QUERY:
            result = await self.retriever.search(ask.question, s.collections, search_filter, s.k, vector=vector)
            s.hits, s.candidate_count, s.dense_skipped = result.hits, result.candidate_count, result.dense_skipped
            self.cache.put(ask.tenant, ask.conversation_id,
                           ScopeEntry(key, s.collections, ask.question, vector, s.hits, s.candidate_count))
        s.hits = s.hits[: s.k]
        s.chunks = len(s.hits)
        s.retrieval_ms = (time.perf_counter() - started) * 1000
        log.info("retrieval", extra={"route": s.route, "chunks": s.chunks, "retrieval_ms": round(s.retrieval_ms, 1),
                                     "candidates": s.candidate_count, "cache_hit": s.cache_hit})
        return s

    async def _embed_question(self, question: str) -> np.ndarray | None:
        """The question's vector, for the topic check and the dense search; None if the embedder is down."""
        try:
            return (await self.embedder.embed([question], "QUERY"))[0]
        except RagmeshError as exc:
            log.warning("embedder unavailable for the question", extra={"error": str(exc)})
            return None

    # -- generation -------------------------------------------------------------------------
    async def _answer(
        self, ask: AskInput, s: Strategy, turns: list[Turn], stop: asyncio.Event
    ) -> AsyncIterator[Event]:
        blocks = context.blocks_from_hits(s.hits)
        prompt = context.build_prompt(ask.question, turns, blocks, s.hits, ask.sources)
        parts: list[str] = []
        model, usage, stopped, finished = ask.model, {}, False, False
        yield Event("generating", True)
        try:
            stream = self.generator.generate(
                model=ask.model, question=ask.question, blocks=blocks, history=turns,
                system_instruction=context.SYSTEM_INSTRUCTION, prompt=prompt, web_search=ask.web_search,
            )
            async with aclosing(_until(stream, stop)) as events:
                try:
                    async for ev in events:
                        if ev.kind in ("thinking", "content"):
                            if ev.kind == "content":
                                parts.append(ev.text)
                            yield Event(ev.kind, ev.text)
                        elif ev.kind == "usage":
                            usage = ev.usage
                        elif ev.kind == "done":
                            model = ev.model or model
                except Stopped:
                    stopped = True
            answer = "".join(parts)
            citations = _citations(answer, blocks)
            meta = {
                "model": model, "route": s.route, "usage": usage,
                "chunk_ids": [h.chunk.chunk_id for h in s.hits],
                "citations": {c.ref: c.chunk_id for c in citations},
            }
            message_id = await asyncio.to_thread(self.history.save_answer, ask.conversation_id, answer, meta, stopped)
            finished = True
            yield Event("citations", citations)
            yield Event("done", {"conversation_id": ask.conversation_id, "message_id": message_id,
                                 "model": model, "stopped": stopped, "usage": usage})
        finally:
            if not finished:
                # Client gone or failure mid-answer: keep what was said, marked as stopped.
                self.history.save_answer(ask.conversation_id, "".join(parts), {"model": model, "route": s.route},
                                         stopped=True)


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


def _citations(answer: str, blocks: list[ContextBlock]) -> list:
    by_index = {b.index: b for b in blocks}
    cited = dict.fromkeys(int(m) for m in _MARKER.findall(answer))
    return [context.citation_for(by_index[i]) for i in cited if i in by_index]
