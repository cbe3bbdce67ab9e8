"""Admission control: beyond a configured number of calls in flight, new work is refused at once
with RESOURCE_EXHAUSTED and a retry delay, instead of queueing until every caller times out (which
under overload turned into answers that looked normal but had searched nothing). Each tenant, and
each user within it, holds at most a share of the slots, so one tenant holding calls open (idle
streams, slow bodies) leaves room for every other; and a tenant's client streams (uploads) at most a
smaller share, so they leave room for its own asks. A caller that knows another tenant has work under way
(the gateway's planning asks its calls in flight) holds a tenant to half its share meanwhile: max-min
fairness, so a tenant asking in a tight loop leaves the cores to another's upload, not only its slots."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

from ragmesh.errors import ResourceExhausted


def share_of(limit: int, share: float) -> int:
    """Slots a share of `limit` is (at least one); 0 (no cap of its own) without a limit, or for a
    share of 0 or of the whole."""
    if not limit or share <= 0 or share >= 1:
        return 0
    return max(1, int(limit * share))


class Admission:
    """Counters of calls in flight, in all and per tenant and user; not a queue. Single event loop:
    no lock needed."""

    def __init__(self, name: str, limit: int, retry_after_s: float = 1.0, tenant_share: float = 0.0,
                 user_share: float = 0.0, stream_share: float = 0.0) -> None:
        """`tenant_share`, `user_share`: the fraction of `limit` one tenant, one user may hold;
        `stream_share`: the fraction one tenant's client streams may hold."""
        self.name = name
        self.limit = limit  # 0 = no limit
        self.retry_after_s = retry_after_s
        self.tenant_limit = share_of(limit, tenant_share)
        self.user_limit = share_of(limit, user_share)
        self.stream_limit = share_of(limit, stream_share)
        self.in_flight = 0
        self.refused = 0
        self.by_tenant: Counter[str] = Counter()
        self.by_user: Counter[tuple[str, str]] = Counter()
        self.streams_by_tenant: Counter[str] = Counter()
        #: Told (with `full`) each time the last slot is taken or one is freed again: health follows it.
        self.on_full_change: Callable[[bool], None] | None = None

    @property
    def full(self) -> bool:
        """A call now would be refused."""
        return bool(self.limit) and self.in_flight >= self.limit

    @property
    def quiet(self) -> bool:
        """At most half the slots are taken (always, without a limit): a call let in now will most
        likely still find a slot a moment later, so work started for it early is not wasted."""
        return not self.limit or self.in_flight * 2 <= self.limit

    def _refuse(self, why: str) -> ResourceExhausted:
        self.refused += 1
        return ResourceExhausted(f"{self.name} is busy: {why}; retry in {self.retry_after_s:g} s", self.retry_after_s)

    def others_busy(self, tenant: str) -> bool:
        """Whether a tenant other than `tenant` (a named one: not the anonymous health checks) holds a slot."""
        return any(other and other != tenant for other in self.by_tenant)

    def _check(self, tenant: str, user: str, stream: bool, contended: bool) -> None:
        if self.full:
            raise self._refuse(f"{self.limit} calls in flight")
        if self.tenant_limit and self.by_tenant[tenant] >= self.tenant_limit:
            raise self._refuse(f"your tenant holds {self.tenant_limit} calls in flight, its share of the "
                               f"{self.limit} (TENANT_CALL_SHARE)")
        if contended and self.tenant_limit and self.by_tenant[tenant] >= (half := max(1, self.tenant_limit // 2)):
            raise self._refuse(f"your tenant holds {half} calls in flight, half its share of the {self.limit} "
                               f"(TENANT_CALL_SHARE) while another tenant has work")
        if self.user_limit and self.by_user[tenant, user] >= self.user_limit:
            raise self._refuse(f"you hold {self.user_limit} calls in flight, a user's share of the "
                               f"{self.limit} (USER_CALL_SHARE)")
        if stream and self.stream_limit and self.streams_by_tenant[tenant] >= self.stream_limit:
            raise self._refuse(f"your tenant holds {self.stream_limit} client streams (uploads), their share of "
                               f"the {self.limit} calls in flight (TENANT_STREAM_SHARE)")

    @contextmanager
    def slot(self, tenant: str = "", user: str = "", stream: bool = False, contended: bool = False) -> Iterator[None]:
        """Holds one slot, counted against `tenant` and `user` (and the tenant's client streams, for
        one), for the duration of a call; raises ResourceExhausted when none is free, or the tenant or
        user holds its share already (half the tenant's share when `contended`: another tenant has work)."""
        self._check(tenant, user, stream, contended)
        self.in_flight += 1
        self.by_tenant[tenant] += 1
        self.by_user[tenant, user] += 1
        if stream:
            self.streams_by_tenant[tenant] += 1
        if self.full:
            self._told()
        try:
            yield
        finally:
            self.in_flight -= 1
            _release(self.by_tenant, tenant)
            _release(self.by_user, (tenant, user))
            if stream:
                _release(self.streams_by_tenant, tenant)
            if self.limit and self.in_flight == self.limit - 1:
                self._told()

    def _told(self) -> None:
        if self.on_full_change is not None:
            self.on_full_change(self.full)


def _release(counts: Counter, key: Hashable) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]
