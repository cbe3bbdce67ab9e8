"""What the store hands back besides documents and chunks (those are in ragmesh.types), API key
records included, and its one error. Both backends build these; callers read them without knowing
which backend answered."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from ragmesh.errors import Unavailable


class StoreUnavailable(Unavailable):
    """The configured store cannot be reached or its URI is invalid: report NOT_SERVING, don't crash-loop.

    The message names the store's host, never its credentials."""


@dataclass
class CollectionStats:
    name: str
    documents: int
    chunks: int


@dataclass
class MessageRecord:
    message_id: str
    conversation_id: str
    role: str  # "user" | "assistant"
    content: str
    meta: dict = field(default_factory=dict)
    created_at: str = ""


@dataclass
class ConversationInfo:
    conversation_id: str
    tenant: str
    user_id: str
    created_at: str
    updated_at: str
    title: str = ""  # the first question, shortened


@dataclass
class Change:
    """One document written (replaced or deleted) at a store version: the change log other
    retriever replicas replay to keep their indexes in step."""

    version: int
    collection: str
    tenant: str
    doc_id: str


@dataclass
class CorrectionRecord:
    """A user's statement that an answer was wrong, and what is right: the user's later prompts
    carry it, so the same mistake is not made twice."""

    correction_id: str
    tenant: str
    user_id: str
    question: str
    wrong_answer: str
    correction: str
    conversation_id: str = ""
    created_at: str = ""


@dataclass
class ApiKeyRecord:
    """What the store keeps of an API key (ragmesh.identity.keys makes them): never the key itself."""

    key_id: str
    tenant: str
    user_id: str
    role: str
    secret_hash: str
    created_at: str = ""
    expires_at: str = ""  # ISO 8601 UTC; empty = never
    revoked_at: str = ""  # empty = live
    label: str = ""
    groups: tuple[str, ...] = ()  # the holder's groups, sorted (ragmesh.identity.groups_of)

    def expired(self, now: dt.datetime | None = None) -> bool:
        if not self.expires_at:
            return False
        now = now or dt.datetime.now(dt.timezone.utc)
        return now >= dt.datetime.fromisoformat(self.expires_at.replace("Z", "+00:00"))
