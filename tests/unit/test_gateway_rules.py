"""The scope cache and request validation: the gateway's pure logic (routing: tests/unit/test_router.py)."""
import asyncio

import pytest

from ragmesh.errors import InvalidArgument
from services.gateway.request import AskRequest
from ragmesh.types import Chunk, Hit
from services.gateway.scope_cache import ScopeCache, ScopeEntry, held_bytes


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


def test_scope_cache_bounds_each_tenant_in_bytes() -> None:
    """An ask on chunks with 64 metadata keys of 4,000 characters holds ~13 MB with top_k 50: a tenant's
    entries are bounded in bytes as well as in number, the least recently used out first."""
    metadata = {f"k{i:02}": "x" * 4000 for i in range(64)}
    cache = ScopeCache(ttl_s=900, max_entries=1024, max_bytes=30 << 20)

    def heavy(q: str) -> ScopeEntry:
        return ScopeEntry("k", ["c"], q, None, [Hit(Chunk(f"c{i}", "d", "c", "text", metadata), 1.0)
                                                for i in range(50)], 50)

    async def scenario() -> None:
        for conv in ("a", "b", "c"):
            await cache.put("t", conv, heavy(conv))
        assert [await cache.get("t", c) is not None for c in ("a", "b", "c")] == [False, True, True]
        await cache.put("other", "x", heavy("x"))
        assert (await cache.get("t", "c")) is not None, "one tenant's bytes are its own"
        assert held_bytes(heavy("y")) > 12_800_000

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
