"""Whether a service takes calls: not while it warms up (a model loading, indexes rebuilding, a
database not reached yet), not once it drains on SIGTERM. A call it does not take is refused with
NotReady (UNAVAILABLE on the wire, health NOT_SERVING to match), never run half-ready into an
INTERNAL: callers retry UNAVAILABLE (ragmesh.clients) and reach it, or a replica, once it is ready."""
from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from ragmesh.errors import ResourceExhausted, Unavailable


class NotReady(Unavailable):
    """The service refused the call before running any of it: sending it again is always safe."""


class State(enum.Enum):
    WARMING = "warming up"
    SERVING = "serving"
    DRAINING = "shutting down"


class Readiness:
    """One service's state. Single event loop: no lock needed."""

    def __init__(self, service: str, state: State = State.WARMING) -> None:
        self.service = service
        self.state = state

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    def warmed(self) -> None:
        """Warm-up finished: calls are taken from now on, unless the service is draining already."""
        if self.state is State.WARMING:
            self.state = State.SERVING

    def drain(self) -> None:
        """SIGTERM: calls in flight finish, new ones are refused from now on."""
        self.state = State.DRAINING

    def check(self) -> None:
        """Raises NotReady unless the service is serving."""
        if self.state is not State.SERVING:
            raise NotReady(f"{self.service} is {self.state.value} and takes no calls now; retry")


class Watchers:
    """Health Watch streams held open, per service and per client address. Anyone may open one (load
    balancers watch without a key), and each holds memory until the client goes: 3,000 anonymous ones
    left 69 MB in the retriever. Single event loop: no lock needed."""

    def __init__(self, service: str, limit: int, per_address: int, retry_after_s: float = 1.0) -> None:
        self.service = service
        self.limit = limit  # 0 = no limit
        self.per_address = per_address  # 0 = no limit
        self.retry_after_s = retry_after_s
        self._by_address: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return self._by_address.total()

    @contextmanager
    def held(self, address: str) -> Iterator[None]:
        """Holds one stream of `address` while it runs; ResourceExhausted naming the limit past either."""
        if self.limit and self.open >= self.limit:
            raise ResourceExhausted(f"{self.service}: {self.limit} health watches open (HEALTH_WATCHES_MAX); "
                                    f"retry in {self.retry_after_s:g} s", self.retry_after_s)
        if self.per_address and self._by_address[address] >= self.per_address:
            raise ResourceExhausted(f"{self.service}: {self.per_address} health watches open from this address "
                                    f"(HEALTH_WATCHES_PER_ADDRESS); retry in {self.retry_after_s:g} s",
                                    self.retry_after_s)
        self._by_address[address] += 1
        try:
            yield
        finally:
            self._by_address[address] -= 1
            if not self._by_address[address]:
                del self._by_address[address]
