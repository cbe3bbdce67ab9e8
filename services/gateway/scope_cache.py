"""Per tenant and conversation, the scope of the last search and its hits, so a follow-up on the same
filters and topic reuses them (RAG_REUSE). Entries live for a TTL and each tenant keeps a bounded
number and size (least recently used out first). An entry's key is its search's scope's
(services/gateway/scope.py): every filter it ran under.

`Scopes` is what the planner and the pipeline use; `ScopeCache` keeps entries in this process, the
Redis one (services/gateway/shared_state) shares them between gateway replicas."""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ragmesh.text import sha256
from ragmesh.types import Hit
from services.gateway.context import Context


@dataclass
class ScopeEntry:
    key: str
    collections: list[str]
    question: str
    question_vector: np.ndarray | None
    hits: list[Hit]
    candidate_count: int
    created: float = field(default_factory=time.monotonic)
    # The last context built from these hits: (the first hits, the very objects, and the context).
    context: tuple[list[Hit], Context] | None = None
    # The key of the scope the user set on that request (Scope.asked, not what was read from its
    # question): a follow-up under another one searches (services/gateway/followup.py).
    asked: str = ""

    def sources(self) -> list[tuple[str, str]]:
        """(chunk id, SHA-256 of the text held) of every text a reuse would answer from: each hit's and
        each parent's shown with one (a context is built from these alone), once each. The retriever's
        CheckChunks says whether the asker may still read each with that text."""
        held: dict[str, str] = {}
        for hit in self.hits:
            held.setdefault(hit.chunk.chunk_id, hit.chunk.text)
            if hit.parent_text:
                held.setdefault(hit.chunk.parent_chunk_id, hit.parent_text)
        return [(chunk_id, sha256(text)) for chunk_id, text in held.items()]


HIT_OVERHEAD = 400  # bytes of a Hit and its Chunk besides their texts


def held_bytes(entry: ScopeEntry) -> int:
    """About what the entry's hits keep alive in this process (their texts and metadata, in characters),
    to bound a tenant's entries in bytes: one ask on chunks with large metadata holds megabytes."""
    return len(entry.question) + sum(
        HIT_OVERHEAD + len(h.chunk.text) + len(h.parent_text)
        + sum(len(name) + len(value) for name, value in h.chunk.metadata.items()) for h in entry.hits)


class Scopes(Protocol):
    async def get(self, tenant: str, conversation_id: str) -> ScopeEntry | None:
        """The conversation's entry, or None (none, expired, or the shared state unreachable)."""

    async def put(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        """Stores the scope of a new search; its TTL starts now."""

    async def keep_context(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        """Stores `entry.context`, set on an entry `get` or `put` had, without changing its expiry."""

    async def forget(self, tenant: str, conversation_id: str) -> None:
        """Removes the conversation's entry (a deleted conversation, sources that changed) wherever it is
        kept, once the writes already under way for it are done; ragmesh.errors.Unavailable when that
        cannot be done now."""


class ScopeCache:
    """Scopes in this process: one gateway (the default)."""

    def __init__(self, ttl_s: float = 900.0, max_entries: int = 1024, max_bytes: int = 8 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl_s
        self.max_entries = max_entries  # per tenant
        self.max_bytes = max_bytes  # per tenant, as held_bytes counts
        self.clock = clock
        self._tenants: dict[str, OrderedDict[str, ScopeEntry]] = {}
        self._sizes: dict[str, dict[str, int]] = {}

    async def get(self, tenant: str, conversation_id: str) -> ScopeEntry | None:
        entries = self._tenants.get(tenant, {})
        entry = entries.get(conversation_id)
        if entry is None:
            return None
        if self.clock() - entry.created > self.ttl:
            self._drop(tenant, conversation_id)
            return None
        entries.move_to_end(conversation_id)
        return entry

    async def put(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        entry.created = self.clock()
        entries = self._tenants.setdefault(tenant, OrderedDict())
        sizes = self._sizes.setdefault(tenant, {})
        entries[conversation_id] = entry
        entries.move_to_end(conversation_id)
        sizes[conversation_id] = held_bytes(entry)
        while entries and (len(entries) > self.max_entries or sum(sizes.values()) > self.max_bytes):
            self._drop(tenant, next(iter(entries)))

    async def keep_context(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        """Nothing to do: the entry held here is the one changed."""

    async def forget(self, tenant: str, conversation_id: str) -> None:
        self._drop(tenant, conversation_id)

    def _drop(self, tenant: str, conversation_id: str) -> None:
        self._tenants.get(tenant, {}).pop(conversation_id, None)
        self._sizes.get(tenant, {}).pop(conversation_id, None)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._tenants.values())
