"""Conversation memory is personal: the MEMORY_COLLECTION's chunks are read only for their author
(metadata MEMORY_AUTHOR), and only the platform writes them.

The gateway embeds each message with the service credential, acting for the tenant and the user,
and searches it the same way; so the reader of memory is the user the service credential acts for.
An operator's admin key (or a member's, where the retriever takes one) reads nobody's chat text,
and what it cannot read answers exactly as an unknown id does."""
from __future__ import annotations

import dataclasses

from ragmesh.errors import PermissionDenied
from ragmesh.identity import Identity
from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION, SearchFilter


def reader(who: Identity) -> str:
    """Whose conversation memory the caller may read ("" nobody's)."""
    return who.user if who.is_service else ""


def readable(collection: str, metadata: dict[str, str], reader_: str) -> bool:
    """Whether a chunk or document of `collection` with this metadata may be shown to the reader."""
    return collection != MEMORY_COLLECTION or (bool(reader_) and metadata.get(MEMORY_AUTHOR) == reader_)


def scoped(collection: str, f: SearchFilter, reader_: str) -> SearchFilter | None:
    """The filter a search of `collection` runs under: in conversation memory, narrowed to the
    reader's own messages whatever it asked for; None when the reader may read none of it."""
    if collection != MEMORY_COLLECTION:
        return f
    if not reader_:
        return None
    return dataclasses.replace(f, equals={**f.equals, MEMORY_AUTHOR: reader_})


def listable(collections: list[str]) -> list[str]:
    """The collections whose metadata values may be listed: never conversation memory, whose values
    say whose conversations exist and when."""
    return [c for c in collections if c != MEMORY_COLLECTION]


def require_writer(who: Identity, collection: str) -> None:
    """Only the platform (the gateway's service credential) writes or deletes conversation memory."""
    if collection == MEMORY_COLLECTION and not who.is_service:
        raise PermissionDenied(f"collection {MEMORY_COLLECTION!r} is conversation memory: only the platform "
                               "writes or deletes it")
