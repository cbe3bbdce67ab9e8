"""The one place documents are written: to the store, then into the search index, as one
step with respect to the Follower that replays other replicas' writes, so a replay can
never land an older version of a document over a newer local write."""
from __future__ import annotations

import threading
from collections import defaultdict

from ragmesh.store import CorpusStore
from ragmesh.types import DocumentRecord, StoredChunk
from services.retriever.backend import SearchBackend


class Committer:
    def __init__(self, store: CorpusStore, registry: SearchBackend) -> None:
        self.store = store
        self.registry = registry
        self.lock = threading.Lock()
        self.own_versions: set[int] = set()  # written here: the follower skips them

    def replace(self, items: list[tuple[DocumentRecord, list[StoredChunk]]]) -> int:
        """Stores the documents (one atomic write) and indexes them; returns the store version."""
        by_collection: dict[str, list] = defaultdict(list)
        for record, chunks in items:
            by_collection[record.collection].append(((record.tenant, record.doc_id), chunks))
        with self.lock:
            version = self.store.replace_documents(items)
            for collection, changes in by_collection.items():
                self.registry.apply(collection, changes)
            self.own_versions.add(version)
        return version

    def delete(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        """Deletes report no version, so the follower replays them once; deleting again is a no-op."""
        with self.lock:
            removed = self.store.delete_documents(tenant, collection, doc_ids)
            self.registry.apply(collection, [((tenant, d), []) for d in doc_ids])
        return removed
