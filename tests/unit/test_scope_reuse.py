"""A cached scope is reused only when the retriever says every text it holds is still current (the asker
may read it, with that text): the planner's reuse decision with a fake retriever, and the in-process
scope cache's forget."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from ragmesh import config
from ragmesh.clients import SearchResult
from ragmesh.errors import Unavailable
from ragmesh.models import EXTRACTIVE
from ragmesh.text import sha256
from ragmesh.types import Chunk, Hit, Turn
from services.gateway.history import Recent
from services.gateway.planner import RAG_NEW_QUERY, RAG_REUSE, Planner
from services.gateway.request import AskInput
from services.gateway.scope_cache import ScopeCache, ScopeEntry

TENANT, CONVERSATION = "t", "c1"
FIRST = "What did Kestrel do with its Brazil exposure?"
FOLLOW_UP = "What did Kestrel say about the Brazil exposure cut?"


def _hit(chunk_id: str, text: str, parent: tuple[str, str] = ("", "")) -> Hit:
    return Hit(Chunk(chunk_id, chunk_id.split("#")[0], "meeting_notes", text, parent_chunk_id=parent[0]), 1.0,
               parent_text=parent[1])


OLD = [_hit("n1#0", "Kestrel cut its Brazil exposure by half.", ("n1#p", "The whole Kestrel note.")),
       _hit("n1#1", "Kestrel kept its Mexico exposure.", ("n1#p", "The whole Kestrel note."))]
NEW = [_hit("n2#0", "Kestrel said the Brazil exposure cut was about rates.")]


class FakeRetriever:
    """Searches find NEW; CheckChunks answers `current` (or raises it, or never answers)."""

    def __init__(self, current: list[bool] | Exception | None) -> None:
        self.current = current
        self.checked: list[list[tuple[str, str]]] = []
        self.searches = 0
        self.down = False  # searches fail

    async def check_chunks(self, chunks: Sequence[tuple[str, str]]) -> list[bool]:
        self.checked.append(list(chunks))
        if isinstance(self.current, Exception):
            raise self.current
        if self.current is None:
            await asyncio.Event().wait()
        return list(self.current)

    async def search(self, *args, **kwargs) -> SearchResult:
        self.searches += 1
        if self.down:
            raise Unavailable("retriever: UNAVAILABLE: restarting")
        return SearchResult(list(NEW), len(NEW), {})


class FakeEmbedder:
    async def embed(self, texts: list[str], kind: str, timeout: float) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)  # every question the same topic


def _planner(retriever: FakeRetriever, cache: ScopeCache) -> Planner:
    settings = config.load().replace(quality_rewrite=False, quality_rerank=False, quality_compress=False,
                                     quality_history=False, scope_llm_check=False, retrieval_timeout_s=0.4)

    async def no_funds(tenant: str) -> list[str]:
        return []

    return Planner(retriever, None, FakeEmbedder(), cache, no_funds, settings, EXTRACTIVE, {})


def _follow_up(current: list[bool] | Exception | None, search_fails: bool = False) -> tuple:
    """The follow-up planned over a cached scope of OLD: (plan, retriever, the entry cached after it)."""
    retriever, cache = FakeRetriever(current), ScopeCache()
    planner = _planner(retriever, cache)

    async def scenario():
        first = await planner.plan(AskInput(FIRST, tenant=TENANT, conversation_id=CONVERSATION), Recent(0, []))
        assert first.retrieval == RAG_NEW_QUERY
        (await cache.get(TENANT, CONVERSATION)).hits = list(OLD)  # what the first search found
        retriever.searches, retriever.down = 0, search_fails
        plan = await planner.plan(AskInput(FOLLOW_UP, tenant=TENANT, conversation_id=CONVERSATION),
                                  Recent(1, [Turn(FIRST, "Kestrel cut its Brazil exposure by half [1].")]))
        return plan, await cache.get(TENANT, CONVERSATION)

    plan, entry = asyncio.run(scenario())
    return plan, retriever, entry


def test_a_scope_whose_sources_are_current_is_reused_after_one_check_of_each_text() -> None:
    plan, retriever, entry = _follow_up([True, True, True])
    assert plan.retrieval == RAG_REUSE and plan.cache_hit, plan.reason
    assert retriever.searches == 0 and [h.chunk.chunk_id for h in plan.hits] == ["n1#0", "n1#1"]
    assert retriever.checked == [[("n1#0", sha256(OLD[0].chunk.text)), ("n1#p", sha256("The whole Kestrel note.")),
                                  ("n1#1", sha256(OLD[1].chunk.text))]], "each hit and each parent once"


def test_a_scope_with_a_source_deleted_revoked_or_replaced_is_dropped_and_searched_anew() -> None:
    plan, retriever, entry = _follow_up([True, False, True])
    assert plan.retrieval == RAG_NEW_QUERY and not plan.cache_hit
    assert "the cached sources changed (1 of 3" in plan.reason, plan.reason
    assert retriever.searches > 0 and {h.chunk.chunk_id for h in plan.hits} == {"n2#0"}
    assert {h.chunk.chunk_id for h in entry.hits} == {"n2#0"}, "the stale entry is replaced by the new search's"


def test_a_stale_scope_is_dropped_even_when_the_new_search_fails() -> None:
    plan, _, entry = _follow_up([False, True, True], search_fails=True)
    assert plan.retrieval == RAG_NEW_QUERY and "the cached sources changed" in plan.reason
    assert entry is None, "no later question finds the stale entry"


@pytest.mark.parametrize("current, said", [
    (Unavailable("retriever: UNAVAILABLE: connection refused"), "retriever: UNAVAILABLE: connection refused"),
    (None, "no answer in time"),
])
def test_a_scope_the_retriever_cannot_check_is_not_reused(current, said: str) -> None:
    plan, retriever, _ = _follow_up(current)
    assert plan.retrieval == RAG_NEW_QUERY and retriever.searches > 0
    assert f"the cached sources could not be checked ({said}" in plan.reason, plan.reason


def test_forget_removes_the_conversations_entry_only() -> None:
    cache = ScopeCache()

    async def scenario() -> None:
        for tenant, conversation in ((TENANT, CONVERSATION), (TENANT, "c2"), ("other", CONVERSATION)):
            await cache.put(tenant, conversation, ScopeEntry("k", ["c"], conversation, None, list(OLD), 2))
        await cache.forget(TENANT, CONVERSATION)
        await cache.forget(TENANT, "never-cached")
        await cache.forget("no-such-tenant", CONVERSATION)
        assert await cache.get(TENANT, CONVERSATION) is None
        assert await cache.get(TENANT, "c2") is not None and await cache.get("other", CONVERSATION) is not None
        assert len(cache) == 2

    asyncio.run(scenario())
