"""A service's worker threads taken by tenants in turn: a tenant with a backlog of jobs queued (its many
searches) no longer holds back another tenant's one job, which used to wait for the whole backlog in
asyncio's first-come, first-served pool. What is asserted is the order the jobs run in, never time."""
from __future__ import annotations

import asyncio
import threading

from ragmesh.identity import Identity
from ragmesh.request_context import identity_var
from ragmesh.tenant_threads import TenantThreads, install

BACKLOG = 5


def as_tenant(tenant: str) -> None:
    identity_var.set(Identity(tenant, "someone", "member", "api_key"))


def test_another_tenants_job_runs_next_not_after_a_rivals_backlog() -> None:
    threads = TenantThreads(max_workers=1)
    ran: list[str] = []
    first_running, go = threading.Event(), threading.Event()

    def job(name: str) -> None:
        if name == "rival-0":
            first_running.set()
            assert go.wait(30)
        ran.append(name)

    try:
        as_tenant("rival")
        rival = [threads.submit(job, f"rival-{i}") for i in range(BACKLOG)]
        assert first_running.wait(30)
        as_tenant("victim")
        victim = threads.submit(job, "victim")
        assert threads.waiting() == {"rival": BACKLOG - 1, "victim": 1}
        go.set()
        for future in [*rival, victim]:
            future.result(30)
    finally:
        threads.shutdown()
    assert ran == ["rival-0", "victim", *(f"rival-{i}" for i in range(1, BACKLOG))]


def test_tenants_with_backlogs_alternate_and_shutdown_runs_what_was_queued() -> None:
    threads = TenantThreads(max_workers=1)
    ran: list[str] = []
    go = threading.Event()
    identity_var.set(None)  # work outside any request: tenant ""
    threads.submit(go.wait, 30)
    for tenant in ("a", "b"):
        as_tenant(tenant)
        for i in range(3):
            threads.submit(ran.append, f"{tenant}{i}")
    go.set()
    threads.shutdown(wait=True)
    assert ran == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_to_thread_on_a_loop_goes_through_the_tenants_turns() -> None:
    async def main() -> tuple[TenantThreads, str]:
        threads = install()
        assert install() is threads  # once a loop
        as_tenant("acme")
        name = await asyncio.to_thread(lambda: threading.current_thread().name)
        return threads, name

    loop = asyncio.new_event_loop()
    try:
        threads, name = loop.run_until_complete(main())
    finally:
        loop.close()
    assert name.startswith("tenant-threads")
    threads.shutdown()
