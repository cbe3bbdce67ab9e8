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


def test_a_rival_with_jobs_running_on_every_core_starts_no_more_while_another_tenants_job_runs() -> None:
    """Running jobs share the cores thread by thread: the rival's six searches running beside the
    victim's one job took six sevenths of the process from it. While the victim's job runs, the rival
    (at BUSY jobs running) starts no other; they start, in turn, once the victim's has ended."""
    threads = TenantThreads(max_workers=6, busy=2)
    events: list[str] = []
    lock = threading.Lock()
    gates = {name: threading.Event() for name in (*(f"rival-{i}" for i in range(9)), "victim")}

    def job(name: str) -> None:
        with lock:
            events.append(f"start {name}")
        assert gates[name].wait(30)
        with lock:
            events.append(f"end {name}")

    def started(name: str) -> bool:
        with lock:
            return f"start {name}" in events

    def until(condition, what: str) -> None:  # noqa: ANN001 - a callable
        for _ in range(3000):
            if condition():
                return
            threading.Event().wait(0.01)
        raise AssertionError(f"never happened: {what}")

    try:
        as_tenant("rival")
        running = [threads.submit(job, f"rival-{i}") for i in range(6)]  # alone: every thread is the rival's
        until(lambda: all(started(f"rival-{i}") for i in range(6)), "the rival's six jobs running")
        as_tenant("victim")
        victim = threads.submit(job, "victim")
        gates["rival-0"].set()  # a thread comes free: the victim's job, in its turn
        until(lambda: started("victim"), "the victim's job running")
        as_tenant("rival")
        later = [threads.submit(job, f"rival-{i}") for i in range(6, 9)]
        for i in (1, 2, 3):  # three more threads come free, the rival still has two jobs running
            gates[f"rival-{i}"].set()
            running[i].result(30)
        until(lambda: sum(threads.running().values()) + sum(threads.waiting().values()) == 6,
              "the freed threads back for their next job")
        assert threads.running() == {"rival": 2, "victim": 1}
        assert not any(started(f"rival-{i}") for i in range(6, 9)), "the rival starts none beside the victim's"
        assert threads.waiting() == {"rival": 3}
        gates["victim"].set()
        victim.result(30)
        for gate in gates.values():
            gate.set()
        for future in [*running, *later]:
            future.result(30)
    finally:
        for gate in gates.values():
            gate.set()
        threads.shutdown()
    assert events.index("end victim") < min(events.index(f"start rival-{i}") for i in range(6, 9))
