"""Keeps this retriever's indexes in step with writes other retrievers make to the same
store (several replicas on one database). It polls the store's version counter and
replays the change log since the version it last applied: each changed document is
re-read from the store and swapped into the index (or removed), the same way a local
write is. Writes this process made itself are skipped: they are indexed already."""
from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict

from ragmesh.errors import RagmeshError
from services.retriever.ingest.commit import Committer

log = logging.getLogger(__name__)


class Follower:
    def __init__(self, committer: Committer, interval_s: float = 1.0) -> None:
        self.committer = committer
        self.store = committer.store
        self.registry = committer.registry
        self.interval_s = interval_s
        self.applied = 0

    def start_from(self, version: int) -> None:
        """The version the indexes were built or loaded at."""
        self.applied = version

    def catch_up(self) -> int:
        """Applies other writers' changes since the last call; returns the documents re-read.
        Holds the committer's lock, so no local write interleaves with a replay."""
        with self.committer.lock:
            version = self.store.version()
            if version <= self.applied:
                return 0
            own = self.committer.own_versions
            changed: OrderedDict[tuple[str, str, str], None] = OrderedDict()
            for change in self.store.changes_since(self.applied):
                if change.version not in own and change.version <= version:
                    changed[(change.collection, change.tenant, change.doc_id)] = None
            if not self.registry.follows_store:  # a shared index: the other writer has written it
                changed.clear()
            for collection, tenant, doc_id in changed:
                chunks = self.store.document_chunks(tenant, collection, doc_id)
                self.registry.apply(collection, [((tenant, doc_id), chunks)])
            self.committer.own_versions = {v for v in own if v > version}
            self.applied = version
        if changed:
            log.info("applied other writers' changes", extra={"documents": len(changed), "version": version})
        return len(changed)

    async def run(self) -> None:
        """Catches up every interval, or at once when the store pushes a change (a MongoDB change
        stream on replica sets), until cancelled; a failing store is logged, never fatal."""
        loop = asyncio.get_running_loop()
        pushed = asyncio.Event()
        stop = threading.Event()
        watcher = loop.run_in_executor(None, self._watch, lambda: loop.call_soon_threadsafe(pushed.set), stop)
        try:
            while True:
                try:
                    await asyncio.wait_for(pushed.wait(), self.interval_s)
                except asyncio.TimeoutError:
                    pass
                pushed.clear()
                try:
                    await asyncio.to_thread(self.catch_up)
                except RagmeshError as exc:
                    log.warning("could not follow the store", extra={"error": str(exc)})
        finally:
            stop.set()
            del watcher

    def _watch(self, wake, stop: threading.Event) -> None:
        try:
            if self.store.watch_changes(wake, stop):
                log.info("change stream closed")
        except Exception as exc:  # a broken stream leaves polling in charge
            log.warning("change stream failed; polling only", extra={"error": str(exc)})
