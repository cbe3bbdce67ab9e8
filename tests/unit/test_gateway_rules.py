"""The scope cache and request validation: the gateway's pure logic (routing: tests/unit/test_router.py)."""
import asyncio

import pytest

from ragmesh.errors import InvalidArgument
from services.gateway.request import AskRequest
from services.gateway.scope_cache import ScopeCache, ScopeEntry, scope_key


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
    ({"data_sources": ["Tarot cards"]}, "data_sources[0]"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": 201}, "top_k"),
])
def test_bad_input_names_the_field(fields: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        AskRequest.checked({"question": "What changed?", **fields})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
