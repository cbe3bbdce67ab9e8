"""A store opened at warm-up instead of at construction, so a service whose database is
unreachable keeps running, reports NOT_SERVING and retries, instead of crashing in a loop."""
from __future__ import annotations

from typing import Any

from ragmesh.config import Settings
from ragmesh.store import Store, StoreUnavailable, open_store


class LazyStore:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._store: Store | None = None

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
        return getattr(store, name)

    def __repr__(self) -> str:
        return repr(self._store) if self._store is not None else "store (not connected)"

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
