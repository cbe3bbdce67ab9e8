"""The one seam for what a conversation needs between calls: running answers and stop requests,
scope-cache entries, rate windows. In this process for one gateway (the default), in Redis when
several replicas serve one deployment (REDIS_URL). Nothing here is a record (the store is): losing
it costs a stop that reaches one replica only, a new search instead of a reuse, a fresh rate window."""
from __future__ import annotations

from dataclasses import dataclass

from ragmesh.config import Settings
from services.gateway.limits import LocalWindows, RateWindows
from services.gateway.scope_cache import ScopeCache, Scopes
from services.gateway.shared_state.runs import LocalRuns, Runs


@dataclass
class SharedState:
    runs: Runs
    scopes: Scopes
    rates: RateWindows
    where: str = "this process"

    @property
    def problem(self) -> str:
        """Why sharing is degraded right now (what still works is said too), or ""."""
        return ""

    async def start(self) -> None:
        """Connects and listens for stop requests (a state that needs it)."""

    async def close(self) -> None:
        """Ends what `start` began."""


def in_process(settings: Settings) -> SharedState:
    scopes = ScopeCache(settings.scope_cache_ttl_s, settings.scope_cache_size, settings.scope_cache_bytes)
    return SharedState(LocalRuns(), scopes, LocalWindows())
