"""Routing rules, the scope cache and request validation: the gateway's pure logic."""
import asyncio

import pytest

from ragmesh.errors import InvalidArgument
from services.gateway.request import AskInput
from services.gateway.router import DEEP, DIRECT, LOOKUP, NO_RAG, SPECIFIC, SUMMARY, route
from services.gateway.scope_cache import ScopeCache, ScopeEntry, scope_key


@pytest.mark.parametrize("question", ["Summarize that", "Can you explain the above?", "why?", "Compare them",
                                      "Tell me more", "what about the second fund"])
def test_transform_patterns_skip_retrieval_with_two_turns(question: str) -> None:
    assert route(question, 2, 0).name == NO_RAG
    assert route(question, 1, 0).name != NO_RAG


@pytest.mark.parametrize("question, turns, docs, name, k", [
    ("hello", 0, 0, DIRECT, 0),
    ("Thank you!", 3, 0, DIRECT, 0),
    ("what is your name?", 0, 0, DIRECT, 0),
    ("Summarize this document", 0, 1, SUMMARY, 0),
    ("Summarize this document", 0, 2, SPECIFIC, 5),
    ("Why did Kestrel cut Brazil?", 1, 0, DEEP, 15),
    ("What is the relationship between rates and returns?", 0, 0, DEEP, 15),
    ("Explain question 6", 0, 0, LOOKUP, 5),
    ("What is Kestrel's net exposure?", 5, 0, SPECIFIC, 5),
    ("Give me an overview of all funds", 0, 0, SPECIFIC, 10),
    ("Is the fund showing growth?", 5, 0, SPECIFIC, 5),  # 'show' is not 'how'
])
def test_routes_in_order(question: str, turns: int, docs: int, name: str, k: int) -> None:
    r = route(question, turns, docs)
    assert (r.name, r.k) == (name, k), r.reason


def test_scope_key_is_order_independent() -> None:
    assert scope_key("2024-01-01", "2024-12-31", ["B", "A"]) == "2024-01-01_2024-12-31_['A', 'B']"


def test_scope_cache_ttl_and_bound_per_tenant() -> None:
    now = [0.0]
    cache = ScopeCache(ttl_s=900, max_entries=2, clock=lambda: now[0])

    def entry(q: str) -> ScopeEntry:
        return ScopeEntry("k", ["c"], q, None, [], 0)

    async def scenario() -> None:
        await cache.put("t", "c1", entry("one"))
        now[0] = 899
        assert (await cache.get("t", "c1")).question == "one"
        now[0] = 901
        assert await cache.get("t", "c1") is None, "expired after 15 minutes"
        for conv in ("a", "b", "c"):
            await cache.put("t", conv, entry(conv))
        await cache.put("other-tenant", "x", entry("x"))
        assert await cache.get("t", "a") is None and len(cache) == 3, "two a tenant, whatever the others hold"
        assert await cache.get("other-tenant", "b") is None
        assert (await cache.get("other-tenant", "x")).question == "x"

    asyncio.run(scenario())


@pytest.mark.parametrize("fields, field", [
    ({"question": ""}, "question"),
    ({"question": "   "}, "question"),
    ({"question": "x" * 2001}, "question"),
    ({"start_date": "2024-13-01"}, "start_date"),
    ({"end_date": "01/02/2024"}, "end_date"),
    ({"start_date": "2024-05-01", "end_date": "2024-04-01"}, "end_date"),
    ({"model": "gpt-17"}, "model"),
    ({"data_sources": ["Tarot cards"]}, "data_sources"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": 201}, "top_k"),
])
def test_bad_input_names_the_field(fields: dict, field: str) -> None:
    ask = AskInput(**{"question": "What changed?", **fields})
    with pytest.raises(InvalidArgument) as err:
        ask.validate()
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
