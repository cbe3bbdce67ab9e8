"""Admission control: beyond a configured number of calls in flight, new work is refused at once
with RESOURCE_EXHAUSTED and a retry delay, instead of queueing until every caller times out (which
under overload turned into answers that looked normal but had searched nothing)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ragmesh.errors import ResourceExhausted


class Admission:
    """A counter of calls in flight; not a queue. Single event loop: no lock needed."""

    def __init__(self, name: str, limit: int, retry_after_s: float = 1.0) -> None:
        self.name = name
        self.limit = limit  # 0 = no limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.refused = 0

    @property
    def full(self) -> bool:
        """A call now would be refused."""
        return bool(self.limit) and self.in_flight >= self.limit

    @property
    def quiet(self) -> bool:
        """At most half the slots are taken (always, without a limit): a call let in now will most
        likely still find a slot a moment later, so work started for it early is not wasted."""
        return not self.limit or self.in_flight * 2 <= self.limit

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Holds one slot for the duration of a call; raises ResourceExhausted when none is free."""
        if self.full:
            self.refused += 1
            raise ResourceExhausted(f"{self.name} is busy: {self.limit} calls in flight; retry in "
                                    f"{self.retry_after_s:g} s", self.retry_after_s)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
