"""Threads that give way: worker threads at a lower CPU priority, for the work of a tenant that has had
more than its share while another tenant has work.

The operating system shares the cores thread by thread, whatever tenant a thread works for: a rival's
model calls and searches, running beside another tenant's one upload, made that upload's own model call
run three times as long (14 -> 40 ms) without it ever waiting for a turn. A thread at a higher nice
value still gets every idle cycle, but beside a normal one it gets about a tenth of a core's time
(the kernel weighs nice 10 at 110 against nice 0's 1024).

A thread may raise its own nice value but, unprivileged, never lower it again: so the threads that
give way are a pool of their own, lowered once when each starts, and work is sent to one pool or the
other. Elsewhere than Linux (no per-thread priority) the pool's threads run at the normal priority.

Work that would spread over helper threads (a model run's intra-op pool) gives way only on the thread
that was lowered: helpers made at start run at the normal priority. So such work asks `gives_way()`
and, on a thread that gives way, stays on it (ONNX Runtime: a single-threaded session)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

NICE_STEP = 10  # how much lower than the process's other threads

_lowered = threading.local()  # `done` set on the threads lower_this_thread lowered


def thread_nice() -> int:
    """The calling thread's nice value (0 where it cannot be read)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return 0


def lower_this_thread() -> None:
    """The calling thread (and the threads it starts from now on) at NICE_STEP lower priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, thread_nice() + NICE_STEP))
    except (AttributeError, OSError):
        return  # no per-thread priority here: the work runs at the normal one
    _lowered.done = True


def gives_way() -> bool:
    """Whether the calling thread was lowered (a thread of a giving_way_pool, say)."""
    return getattr(_lowered, "done", False)


def giving_way_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """A pool whose threads run at the lower priority."""
    return ThreadPoolExecutor(threads, thread_name_prefix=name, initializer=lower_this_thread)
