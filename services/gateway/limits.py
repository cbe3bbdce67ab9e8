"""Per-user limits: monthly message and token counters in the store (usage tracking), and a
per-minute request rate counted once for all gateway replicas (in this process with one gateway, in
Redis with several: services/gateway/shared_state)."""
from __future__ import annotations

import datetime as dt
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol

from ragmesh.errors import ResourceExhausted
from ragmesh.store import AccountStore


def this_month() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m")


def seconds_to_next_month() -> float:
    now = dt.datetime.now(dt.timezone.utc)
    first = (now.replace(day=1) + dt.timedelta(days=32)).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first - now).total_seconds()


class RateWindows(Protocol):
    async def count(self, tenant: str, user_id: str, limit: int, window_s: float) -> float:
        """Counts one request in the user's sliding window unless `limit` are in it already: 0 when
        counted, else the seconds until the oldest leaves the window."""


class LocalWindows:
    """Sliding windows in this process (each user's request times). Users are kept in LRU order and
    bounded, so a flood of new identities cannot grow it without limit."""

    def __init__(self, max_users: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_users = max_users
        self.clock = clock
        self._seen: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    async def count(self, tenant: str, user_id: str, limit: int, window_s: float) -> float:
        return self.count_now(tenant, user_id, limit, window_s)

    def count_now(self, tenant: str, user_id: str, limit: int, window_s: float) -> float:
        now, key = self.clock(), (tenant, user_id)
        times = self._seen.pop(key, None) or deque()
        while times and now - times[0] >= window_s:
            times.popleft()
        self._seen[key] = times
        if len(self._seen) > self.max_users:
            self._seen.popitem(last=False)
        if len(times) >= limit:
            return window_s - (now - times[0])
        times.append(now)
        return 0.0


class RateLimiter:
    """At most `per_minute` requests per user in any 60 s, counted in `windows` (this process's by default)."""

    WINDOW_S = 60.0

    def __init__(self, per_minute: int, windows: RateWindows | None = None) -> None:
        self.per_minute = per_minute  # 0 = no limit
        self.windows = windows or LocalWindows()

    async def check(self, tenant: str, user_id: str) -> None:
        """Counts one request, or raises ResourceExhausted (HTTP 429, RESOURCE_EXHAUSTED) with the wait."""
        if not self.per_minute:
            return
        wait = await self.windows.count(tenant, user_id, self.per_minute, self.WINDOW_S)
        if wait > 0:
            raise ResourceExhausted(f"rate limit: {self.per_minute} requests a minute per user; retry in "
                                    f"{wait:.0f} s", wait)


class UsageLimiter:
    def __init__(self, store: AccountStore, max_messages: int = 0, max_tokens: int = 0) -> None:
        self.store = store
        self.max_messages = max_messages  # 0 = unlimited
        self.max_tokens = max_tokens

    @property
    def enabled(self) -> bool:
        return bool(self.max_messages or self.max_tokens)

    def check(self, tenant: str, user_id: str) -> None:
        """Raises ResourceExhausted (gRPC RESOURCE_EXHAUSTED, HTTP 429) once a limit is reached."""
        if not self.enabled:
            return
        month = this_month()
        messages, tokens = self.store.usage(tenant, user_id, month)
        who = f"user {user_id or '(anonymous)'}"
        if self.max_messages and messages >= self.max_messages:
            raise ResourceExhausted(f"usage: {who} has sent {messages} of {self.max_messages} messages allowed "
                                    f"in {month}; the limit resets next month", seconds_to_next_month())
        if self.max_tokens and tokens >= self.max_tokens:
            raise ResourceExhausted(f"usage: {who} has used {tokens} of {self.max_tokens} tokens allowed "
                                    f"in {month}; the limit resets next month", seconds_to_next_month())

    def record(self, tenant: str, user_id: str, tokens: int) -> None:
        self.store.add_usage(tenant, user_id, this_month(), 1, tokens)
