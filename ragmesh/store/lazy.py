"""A store opened at warm-up instead of at construction, so a service whose database is
unreachable keeps running, reports NOT_SERVING and retries, instead of crashing in a loop.

Every service reaches its store through this, so it is also where each store call is timed
(ragmesh_store_latency_seconds{operation})."""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ragmesh import metrics
from ragmesh.config import Settings
from ragmesh.store import Store, StoreUnavailable, open_store

# Not timed: generators (the call returns before the work) and the change watcher (blocks for long).
_UNTIMED = frozenset({"iter_chunks", "watch_changes", "close"})


class LazyStore:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._store: Store | None = None
        self._timed: dict[str, Callable[..., Any]] = {}

    def connect(self) -> None:
        """Opens the configured store (idempotent); raises StoreUnavailable when it cannot."""
        if self._store is None:
            self._store = open_store(self._settings)

    @property
    def connected(self) -> bool:
        return self._store is not None

    def __getattr__(self, name: str) -> Any:
        store = self.__dict__.get("_store")
        if store is None:
            raise StoreUnavailable("the store is not connected yet (the service is warming up)")
        found = getattr(store, name)
        if name in _UNTIMED or name.startswith("_") or not callable(found):
            return found
        timed = self._timed.get(name)
        if timed is None:
            timed = self._timed[name] = _timed(store, name)
        return timed

    @contextmanager
    def inline_read(self) -> Iterator[bool]:
        """False until connected (connecting is slow: it belongs in a worker thread)."""
        if self._store is None:
            yield False
        else:
            with self._store.inline_read() as now:
                yield now

    def __repr__(self) -> str:
        return repr(self._store) if self._store is not None else "store (not connected)"

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _timed(store: Store, name: str) -> Callable[..., Any]:
    method, observe = getattr(store, name), metrics.store_timer(name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            observe(time.perf_counter() - started)

    return call
