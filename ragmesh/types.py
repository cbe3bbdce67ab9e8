"""Domain objects shared by the services; `ragmesh.convert` maps them to and from protobuf."""
from __future__ import annotations

from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # only the type: ragmesh.access checks names with ragmesh.validation, which reads this module
    from ragmesh.access import Access
    from ragmesh.spool import Spooled

# Conversation memory: each message of a conversation, embedded, with its author in metadata
# (MEMORY_AUTHOR). The collection is personal: its chunks are only ever read for their author, and
# only the gateway (the service credential) writes it.
MEMORY_COLLECTION = "conversations"
MEMORY_AUTHOR = "user_id"


@dataclass(slots=True)  # a million of them live in a retriever: no per-object __dict__
class Chunk:
    chunk_id: str
    doc_id: str
    collection: str
    text: str
    metadata: dict[str, str] = field(default_factory=dict)
    date: str = ""
    tenant: str = ""
    parent_chunk_id: str = ""
    chunk_index: int = 0


@dataclass
class StoredChunk:
    """A chunk as the store keeps it: with its vector (None for parents that are not indexed)."""

    chunk: Chunk
    vector: np.ndarray | None


@dataclass
class Document:
    """What a client sends to ingest: text, or a file's bytes with its name (the retriever parses it)."""

    doc_id: str
    collection: str
    text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    date: str = ""
    tenant: str = ""
    title: str = ""
    content: bytes = b""
    filename: str = ""
    mime_type: str = ""
    summarize: bool | None = None  # None: the retriever's setting decides
    access: Access | None = None  # who may read it; None: the collection's default
    spooled: Spooled | None = None  # `content` on disk while the document waits for its parse (then empty)
    vector: np.ndarray | None = None  # its one chunk's vector, when a trusted sender already has it


@dataclass
class SectionOutline:
    """One section of a stored document: its title, concise summary and first page (0 = no pages)."""

    title: str
    summary: str = ""
    page: int = 0


@dataclass
class DocumentRecord:
    """A document's stored header: what identifies it and what its chunks were built from."""

    doc_id: str
    collection: str
    tenant: str
    content_hash: str
    title: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    date: str = ""
    chunk_count: int = 0
    summary: str = ""  # global summary made at ingest (the summary path); "" when none
    sections: list[SectionOutline] = field(default_factory=list)


@dataclass
class DocumentEntry:
    """One line of a documents list: the header, when it was last written (ISO 8601 UTC), and whether
    a summary of the whole document was made (lists may leave the summary text out)."""

    document: DocumentRecord
    updated_at: str
    summarized: bool = False


@dataclass
class ChunkContext:
    """One chunk as a citation panel shows it: its text, its parent's (the wider context), its document."""

    chunk: Chunk
    parent_text: str
    document: DocumentRecord | None


@dataclass
class SearchFilter:
    """Restricts a search. An empty filter admits every chunk of the tenant."""

    tenant: str = ""
    start_date: str = ""
    end_date: str = ""
    date_field: str = ""
    any_of: dict[str, list[str]] = field(default_factory=dict)
    equals: dict[str, str] = field(default_factory=dict)
    doc_ids: list[str] | None = None  # when set, only these documents' chunks ([] admits none)
    # Who reads (ragmesh.access.principals): only chunks whose access shares a token with it are
    # admitted. Set by the retriever from the caller's credential, never from a request; None: the
    # platform itself, no access condition.
    readers: frozenset[str] | None = None


@dataclass
class Hit:
    """A ranked chunk that explains itself: each list's rank and score, the fused score, the boosts."""

    chunk: Chunk
    score: float
    dense_rank: int = 0
    sparse_rank: int = 0
    dense_score: float = 0.0
    sparse_score: float = 0.0
    fused_score: float = 0.0
    boosts: list[str] = field(default_factory=list)
    parent_text: str = ""


@dataclass
class Citation:
    index: int
    chunk_id: str = ""
    doc_id: str = ""
    collection: str = ""
    title: str = ""
    date: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    url: str = ""
    snippet: str = ""
    ref: str = ""
    chapter: str = ""  # where in a book: empty for documents without chapters
    section: str = ""
    paragraph: int = 0


@dataclass
class ContextBlock:
    """Numbered context the generator may cite as [index]."""

    index: int
    text: str
    chunk: Chunk | None = None
    label: str = ""


@dataclass
class Turn:
    question: str
    answer: str


@dataclass
class GenEvent:
    """One event of a generated answer, as the generator's backends yield them."""

    kind: str  # thinking | content | grounding | usage | done
    text: str = ""
    citations: list[Citation] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # grounding: the web searches the model ran
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
