"""The worker threads of a service's event loop (`asyncio.to_thread`: searches, chunking, store reads and
commits), taken by tenants in turn.

asyncio's default pool serves its queue first come, first served: a tenant with many calls under way
(searches of its largest partitions, say) queued its jobs ahead of another tenant's one store read, which
then waited for all of them. Here each tenant's jobs wait in a queue of their own and a free thread takes
the next job of the tenant served least recently among those with work waiting, so another tenant's
job waits for a free thread, never for the backlog. The tenant is the calling request's (the
acting tenant of a service call); work outside any request shares the turn of tenant "".

Running jobs share the cores (and the interpreter) thread by thread: a rival with six searches running
took six sevenths of the retriever from another tenant's one job, and from the event loop serving it. So
while another tenant has a job waiting or running, a tenant with BUSY (one a core) or more jobs running
starts no other: its next waits, in its turn, until one of them ends or the other tenant is done. A
tenant alone keeps every thread.

A ThreadPoolExecutor whose work queue is replaced: asyncio takes nothing else as a default executor."""
from __future__ import annotations

import asyncio
import os
import queue
import threading
import weakref
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ragmesh.request_context import identity_var

THREADS = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default pool size
BUSY = os.cpu_count() or 1  # a tenant's jobs running at once while another tenant's wait or run
FORGET_AFTER = 1024  # tenants whose last turn is remembered, at most (beyond those waiting)


def current_tenant() -> str:
    who = identity_var.get()
    return who.tenant if who is not None else ""


class TenantQueue:
    """queue.SimpleQueue's put / get / get_nowait, handing out the next item of the tenant served least
    recently among those with items waiting (one never served first, then the one waiting longest) and
    not held back (`busy` items running while another tenant is about, see the module). None (the
    executor's signal to stop a thread) is handed out only once no tenant's item waits.

    An item is running from the get that hands it out to its thread's next get (the executor's threads
    ask for their next item once they are done with the last)."""

    def __init__(self, busy: int = BUSY) -> None:
        self.busy = busy
        self._ready = threading.Condition()
        self._queues: dict[str, deque[Any]] = {}  # tenant: its items, oldest first
        self._served: dict[str, int] = {}  # tenant: the turn that last served it
        self._running: Counter[str] = Counter()  # tenant: its items running
        self._doing: dict[int, str] = {}  # thread: the tenant of the item it runs
        self._turns = 0
        self._stops = 0

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._ready:
            if item is None:
                self._stops += 1
            else:
                self._queues.setdefault(current_tenant(), deque()).append(item)
            self._ready.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self._ready:
            self._done(threading.get_ident())
            if not self._ready.wait_for(lambda: self._takeable() or (self._stops and not self._queues),
                                        timeout if block else 0):
                raise queue.Empty
            if not self._queues:
                self._stops -= 1
                return None
            tenant = min(self._takeable(), key=lambda t: self._served.get(t, -1))  # dicts keep arrival order
            waiting = self._queues[tenant]
            item = waiting.popleft()
            if not waiting:
                del self._queues[tenant]
            self._turns += 1
            self._served[tenant] = self._turns
            self._running[tenant] += 1
            self._doing[threading.get_ident()] = tenant
            if len(self._served) > FORGET_AFTER:  # only the tenants waiting need their turn remembered
                self._served = {t: n for t, n in self._served.items() if t in self._queues}
            return item

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def _done(self, thread: int) -> None:
        """The thread's last item (if it had one) has ended: its tenant may be let start another."""
        tenant = self._doing.pop(thread, None)
        if tenant is not None:
            self._running[tenant] -= 1
            if not self._running[tenant]:
                del self._running[tenant]
            self._ready.notify_all()

    def _takeable(self) -> list[str]:
        """The tenants with items waiting that may start one now."""
        return [t for t in self._queues if self._running[t] < self.busy
                or not any(other != t for other in (*self._queues, *self._running))]

    def waiting(self) -> dict[str, int]:
        """Items waiting, per tenant."""
        with self._ready:
            return {tenant: len(items) for tenant, items in self._queues.items()}

    def running(self) -> dict[str, int]:
        """Items running, per tenant."""
        with self._ready:
            return dict(self._running)


class TenantThreads(ThreadPoolExecutor):
    """A thread pool whose threads take the tenants' jobs in turn (see the module)."""

    def __init__(self, max_workers: int = THREADS, thread_name_prefix: str = "tenant-threads",
                 busy: int = BUSY) -> None:
        super().__init__(max_workers, thread_name_prefix)
        self._work_queue = TenantQueue(busy)  # type: ignore[assignment]  # read by the pool's threads

    def waiting(self) -> dict[str, int]:
        return self._work_queue.waiting()  # type: ignore[attr-defined]

    def running(self) -> dict[str, int]:
        return self._work_queue.running()  # type: ignore[attr-defined]


_installed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TenantThreads] = weakref.WeakKeyDictionary()


def install(loop: asyncio.AbstractEventLoop | None = None) -> TenantThreads:
    """The loop's default executor (asyncio.to_thread's threads) made a TenantThreads, once a loop (the
    services of a test's stack share one)."""
    loop = loop or asyncio.get_running_loop()
    if loop not in _installed:
        _installed[loop] = TenantThreads()
        loop.set_default_executor(_installed[loop])
    return _installed[loop]
