"""Per tenant and conversation, the scope of the last search and its hits, so a
follow-up on the same filters and topic reuses them (RAG_REUSE). Bounded (LRU)
with a TTL, keyed as `{start_date}_{end_date}_{sorted(funds)}` (and `_{window}` under a time window,
`_{sorted(documents)}` with documents picked)."""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragmesh.types import Hit
from services.gateway.context import Context


def scope_key(start_date: str, end_date: str, funds: list[str], window: str = "", documents: Sequence[str] = ()) -> str:
    """Hits are reused only under the same dates, funds, time window and picked documents."""
    key = f"{start_date}_{end_date}_{sorted(funds)}" + (f"_{window}" if window else "")
    return f"{key}_{sorted(documents)}" if documents else key


@dataclass
class ScopeEntry:
    key: str
    collections: list[str]
    question: str
    question_vector: np.ndarray | None
    hits: list[Hit]
    candidate_count: int
    created: float = field(default_factory=time.monotonic)
    # The last context built from these hits: (the hits it was built from, the context).
    context: tuple[list[Hit], Context] | None = None
    # The scope the user set on that request (not what was read from its question): a follow-up
    # under another one searches (services/gateway/followup.py).
    asked: str = ""


class ScopeCache:
    def __init__(self, ttl_s: float = 900.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], ScopeEntry] = OrderedDict()

    def get(self, tenant: str, conversation_id: str) -> ScopeEntry | None:
        slot = (tenant, conversation_id)
        entry = self._entries.get(slot)
        if entry is None:
            return None
        if self.clock() - entry.created > self.ttl:
            del self._entries[slot]
            return None
        self._entries.move_to_end(slot)
        return entry

    def put(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        entry.created = self.clock()
        slot = (tenant, conversation_id)
        self._entries[slot] = entry
        self._entries.move_to_end(slot)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
