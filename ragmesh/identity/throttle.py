"""Failed credentials counted per client address, so nobody can guess keys at line rate.

Past `limit` failures in a sliding window an address is refused before its credential is looked
at (RESOURCE_EXHAUSTED / HTTP 429 with the wait), valid or not: a guesser learns nothing more, and
checking costs it nothing of ours. Addresses are kept in LRU order and bounded, so a flood of new
addresses cannot grow the table without limit."""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from ragmesh.errors import ResourceExhausted


class FailureThrottle:
    def __init__(self, limit: int, window_s: float = 60.0, max_peers: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit  # failures per window per address; 0 = no throttling
        self.window_s = window_s
        self.max_peers = max_peers
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, peer: str) -> deque[float]:
        now = self.clock()
        times = self._failures.pop(peer, None) or deque()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if times:
            self._failures[peer] = times  # most recently seen last
        return times

    def check(self, peer: str) -> None:
        """Raises ResourceExhausted while `peer` is over its failures."""
        if not self.limit or not peer:
            return
        times = self._recent(peer)
        if len(times) >= self.limit:
            wait = self.window_s - (self.clock() - times[0])
            raise ResourceExhausted(f"too many failed credentials from this address; retry in {max(1, round(wait))} s",
                                    wait)

    def failed(self, peer: str) -> None:
        """Counts one failed credential from `peer`."""
        if not self.limit or not peer:
            return
        times = self._recent(peer)
        times.append(self.clock())
        self._failures[peer] = times
        if len(self._failures) > self.max_peers:
            self._failures.popitem(last=False)
