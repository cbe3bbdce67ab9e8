"""Failed credentials per client address: a guesser is refused after its allowance, others are not."""
from __future__ import annotations

import pytest

from ragmesh.errors import ResourceExhausted
from ragmesh.identity.throttle import FailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_refused_after_its_failures_until_the_window_passes() -> None:
    clock = Clock()
    throttle = FailureThrottle(3, window_s=60, clock=clock)
    for _ in range(3):
        throttle.check("10.0.0.1")
        throttle.failed("10.0.0.1")
    with pytest.raises(ResourceExhausted) as refused:
        throttle.check("10.0.0.1")
    assert 59 <= refused.value.retry_after_s <= 60
    throttle.check("10.0.0.2")  # another address is not affected
    clock.now = 60.0
    throttle.check("10.0.0.1")  # the window passed


def test_the_table_of_addresses_is_bounded() -> None:
    throttle = FailureThrottle(1, max_peers=100, clock=Clock())
    for i in range(10_000):
        throttle.failed(f"peer-{i}")
    assert len(throttle._failures) == 100
    with pytest.raises(ResourceExhausted):
        throttle.check("peer-9999")


def test_no_limit_and_no_address_mean_no_throttling() -> None:
    for throttle, peer in ((FailureThrottle(0, clock=Clock()), "a"), (FailureThrottle(1, clock=Clock()), "")):
        for _ in range(5):
            throttle.failed(peer)
        throttle.check(peer)
