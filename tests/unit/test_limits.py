"""Admission (calls in flight) and the per-user rate limit: refuse fast, say how long to wait."""
from __future__ import annotations

import asyncio

import pytest

from ragmesh.admission import Admission
from ragmesh.errors import ResourceExhausted
from services.gateway.limits import LocalWindows, RateLimiter
from ragmesh.validation import check_list, check_text


def test_admission_refuses_past_the_limit_and_frees_slots_on_exit_even_after_errors() -> None:
    gate = Admission("svc", 2, retry_after_s=3)
    with gate.slot(), gate.slot():
        with pytest.raises(ResourceExhausted) as info:
            with gate.slot():
                pass
        assert info.value.retry_after_s == 3 and "2 calls in flight" in str(info.value)
    with pytest.raises(ValueError):
        with gate.slot():
            raise ValueError("handler failed")
    assert gate.in_flight == 0 and gate.refused == 1
    unlimited = Admission("svc", 0)
    with unlimited.slot(), unlimited.slot(), unlimited.slot():
        assert unlimited.in_flight == 3 and unlimited.quiet


def test_a_tenant_and_a_user_hold_at_most_their_share_and_others_find_room() -> None:
    gate = Admission("svc", 8, tenant_share=0.25, user_share=0.125)
    told: list[bool] = []
    gate.on_full_change = told.append
    with gate.slot("a", "u1"), gate.slot("a", "u2"):
        with pytest.raises(ResourceExhausted, match="TENANT_CALL_SHARE"):
            with gate.slot("a", "u3"):
                pass
        with gate.slot("b", "v1"):
            with pytest.raises(ResourceExhausted, match="USER_CALL_SHARE"):
                with gate.slot("b", "v1"):
                    pass
            assert gate.by_tenant == {"a": 2, "b": 1} and gate.in_flight == 3
    assert gate.in_flight == 0 and not gate.by_tenant and not gate.by_user and gate.refused == 2
    assert told == []  # never full
    uploads = Admission("svc", 8, tenant_share=0.5, stream_share=0.125)
    with uploads.slot("a", "u1", stream=True):
        with pytest.raises(ResourceExhausted, match="TENANT_STREAM_SHARE"):
            with uploads.slot("a", "u2", stream=True):
                pass
        with uploads.slot("a", "u2"), uploads.slot("b", "v1", stream=True):  # its asks, another's upload
            assert uploads.streams_by_tenant == {"a": 1, "b": 1}
    assert not uploads.streams_by_tenant
    small = Admission("svc", 2, tenant_share=0.25, user_share=0.125)  # a share is at least one slot
    small.on_full_change = told.append
    with small.slot("a"), small.slot("b"):
        assert told == [True]
    assert told == [True, False]


def test_a_contended_tenant_holds_half_its_share_at_least_one_slot() -> None:
    gate = Admission("svc", 16, tenant_share=0.25)
    with gate.slot("a"), gate.slot("a", contended=True):
        with pytest.raises(ResourceExhausted, match="half its share of the 16 .* while another tenant has work"):
            with gate.slot("a", contended=True):
                pass
        with gate.slot("a"):  # not contended: the whole share
            pass
        assert gate.others_busy("b") and not gate.others_busy("a")
    with gate.slot(""):  # anonymous calls (health checks) are nobody's work
        assert not gate.others_busy("a")
    small = Admission("svc", 4, tenant_share=0.25)  # a share of one slot halves to one
    with small.slot("a", contended=True), pytest.raises(ResourceExhausted):
        with small.slot("a", contended=True):
            pass


def test_admission_is_quiet_up_to_half_its_slots() -> None:
    gate = Admission("svc", 4)
    quiet = []
    with gate.slot():
        quiet.append(gate.quiet)
        with gate.slot():
            quiet.append(gate.quiet)
            with gate.slot():
                quiet.append(gate.quiet)
    assert quiet == [True, True, False] and gate.quiet


def test_rate_limit_is_a_sliding_minute_per_user() -> None:
    now = [1000.0]
    limiter = RateLimiter(3, LocalWindows(clock=lambda: now[0]))
    check = lambda tenant, user: asyncio.run(limiter.check(tenant, user))  # noqa: E731
    for _ in range(3):
        check("t", "alice")
    with pytest.raises(ResourceExhausted) as info:
        check("t", "alice")
    assert info.value.retry_after_s == pytest.approx(60.0)
    check("t", "bob")  # another user is not held back
    check("other-tenant", "alice")
    now[0] += 30
    with pytest.raises(ResourceExhausted) as info:
        check("t", "alice")
    assert info.value.retry_after_s == pytest.approx(30.0)
    now[0] += 30.5
    check("t", "alice")  # the first three left the window


def test_rate_limit_forgets_the_least_recent_users_past_its_bound() -> None:
    windows = LocalWindows(max_users=100, clock=lambda: 0.0)
    for i in range(1000):
        assert windows.count_now("t", f"user-{i}", 1, 60.0) == 0
    assert len(windows._seen) == 100
    assert windows.count_now("t", "user-999", 1, 60.0) > 0


def test_text_and_list_checks_name_the_field() -> None:
    assert check_text("q", "fine", 10) == "fine"
    with pytest.raises(Exception, match="q: is 11 characters; the limit is 10"):
        check_text("q", "x" * 11, 10)
    with pytest.raises(Exception, match="q: is not valid Unicode"):
        check_text("q", "a\udc80", 10)
    assert check_list("funds", ["a", "b", "a", "a"], 2, 5) == ["a", "b"]
    with pytest.raises(Exception, match="funds: has 3 distinct values; the limit is 2"):
        check_list("funds", ["a", "b", "c"], 2, 5)
    with pytest.raises(Exception, match=r"funds\[1\]"):
        check_list("funds", ["a", "toolong"], 2, 5)
