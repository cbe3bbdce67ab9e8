"""Who may write a document, who reads it once written, and who may change that: the retriever's
rules over ragmesh.access, one place for the servicer and the ingest pipeline.

- Reading: a caller reads a document whose access names its user, one of its credential's groups,
  or the whole tenant (`readers`). Admins are no exception for text: an HR file shared with nobody
  stays closed to them too. What admins have besides is management (`lister`): they list every
  document's header (title, owner, access) and may re-assign, re-share and delete any document, so a
  leaver's documents are never stranded.
- Writing: a collection's rule (`CollectionRule`) says whether members may upload into it and what a
  document's access is when its upload names none. Built in: `documents` takes members' uploads,
  readable by the uploader only; every other collection takes admins' uploads, readable by the whole
  tenant. Admins change the rule per tenant (SetCollectionAccess). Only admins make a document
  readable by the whole tenant or give it another owner.
- A member's document ids are namespaced `<user>:<doc_id>`, so two members' uploads never collide and
  no upload can tell a member that a colleague's private document exists.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ragmesh import access, text
from ragmesh.access import Access
from ragmesh.errors import InvalidArgument, NotFound, PermissionDenied
from ragmesh.identity import Identity
from ragmesh.store import DocumentStore
from ragmesh.types import MEMORY_COLLECTION, Chunk, DocumentRecord, StoredChunk
from ragmesh.validation import shown
from services.retriever import personal

OPEN_TO_MEMBERS = "documents"  # the built-in collection members upload into


@dataclass(frozen=True)
class CollectionRule:
    """Whether members may upload into a collection, and a document's access when its upload names
    none (the uploader becomes its owner)."""

    collection: str
    members_upload: bool
    default_access: Access

    def to_dict(self) -> dict:
        return {"members_upload": self.members_upload, "default_access": self.default_access.encode()}


def built_in(collection: str) -> CollectionRule:
    """`documents` and conversation memory (which only the platform writes, for its author: see
    personal.py) are their writer's; every other collection is the tenant's, written by admins."""
    if collection in (OPEN_TO_MEMBERS, MEMORY_COLLECTION):
        return CollectionRule(collection, True, Access())
    return CollectionRule(collection, False, Access(tenant=True))


def rules(store: DocumentStore, tenant: str) -> dict[str, CollectionRule]:
    """The tenant's rules its admins set (collections not named here keep their built-in rule)."""
    return {name: CollectionRule(name, bool(r["members_upload"]), access.decode(r["default_access"]))
            for name, r in store.collection_access(tenant).items()}


def rule(store: DocumentStore, tenant: str, collection: str) -> CollectionRule:
    return rules(store, tenant).get(collection) or built_in(collection)


def readers(who: Identity) -> frozenset[str] | None:
    """Whose reading the caller does: its principals (None: the platform)."""
    return access.principals(who)


def lister(who: Identity) -> frozenset[str] | None:
    """What the caller's document lists and counts show: every document for admins and the platform
    (management, headers only), else what it may read."""
    return None if access.privileged(who) else access.principals(who)


def readable(who: Identity, metadata: dict[str, str]) -> bool:
    return access.readable(metadata, readers(who))


def visible(who: Identity, collection: str, metadata: dict[str, str]) -> bool:
    """Whether the caller may read a chunk or document: its access, and conversation memory's author."""
    return personal.readable(collection, metadata, personal.reader(who)) and readable(who, metadata)


def current(store: DocumentStore, who: Identity, refs: list[tuple[str, str]]) -> list[bool]:
    """For each (chunk_id, SHA-256 of the text a cache holds): the caller may still read that chunk, with
    that text. What a scope cache checks before it answers from what it kept."""
    tenant = who.require_tenant()
    found = [store.chunk(tenant, chunk_id) for chunk_id, _ in refs]
    return [f is not None and visible(who, f.chunk.collection, f.chunk.metadata) and text.sha256(f.chunk.text) == digest
            for f, (_, digest) in zip(found, refs)]


def require_bulk_writer(who: Identity) -> None:
    """Upsert writes chunks as they come, with no access list (the whole tenant's, as before access
    lists): an admin's or the platform's bulk load, never a user's upload relayed by the gateway."""
    if not access.privileged(who):
        raise PermissionDenied("Upsert writes documents the whole tenant reads: it needs an admin key")


def set_rule(store: DocumentStore, who: Identity, new: CollectionRule) -> CollectionRule:
    if not access.privileged(who):
        raise PermissionDenied("SetCollectionAccess needs an admin key")
    if new.collection == MEMORY_COLLECTION:
        raise InvalidArgument("collection", f"{MEMORY_COLLECTION!r} is conversation memory: personal, written by "
                                            "the platform only")
    if new.default_access.owner:
        raise InvalidArgument("default_access.owner", "must be empty: a document's owner is its uploader")
    store.set_collection_access(who.require_tenant(), new.collection, new.to_dict())
    return new


@dataclass(frozen=True)
class Uploader:
    """What one caller's upload into one collection may do, decided before anything is parsed."""

    who: Identity
    rule: CollectionRule

    @property
    def manages_all(self) -> bool:
        return access.privileged(self.who)

    def check(self, asked: Access | None) -> None:
        """Before parsing: may the caller upload here, with the access it asked for (its owner is
        checked against a replaced version later)."""
        if not (self.manages_all or self.rule.members_upload):
            raise PermissionDenied(f"collection {self.rule.collection!r} takes uploads from admins only; its admins "
                                   "can open it to members (SetCollectionAccess)")
        if asked is not None and asked.tenant and not self.manages_all:
            raise PermissionDenied("access.tenant: only an admin makes a document readable by the whole tenant")

    @property
    def id_prefix(self) -> str:
        """Conversation memory's ids are the platform's own (personal.py keeps it its author's)."""
        return "" if self.manages_all or self.rule.collection == MEMORY_COLLECTION else f"{self.who.user}:"

    def doc_id(self, doc_id: str) -> str:
        """A member's ids live under its own name: `<user>:<doc_id>`."""
        prefix = self.id_prefix
        return doc_id if doc_id.startswith(prefix) else prefix + doc_id

    def access(self, asked: Access | None, existing: DocumentRecord | None) -> Access:
        """What the document is written with: what the upload asked for, else what a replaced version
        had, else the collection's default; the uploader owns a new document."""
        if asked is not None:
            checked_change(self.who, access.of_metadata(existing.metadata) if existing else None, asked)
            return asked.with_owner(asked.owner or (access.of_metadata(existing.metadata).owner if existing
                                                    else self.who.user))
        if existing is not None:
            return access.of_metadata(existing.metadata)
        default = self.rule.default_access.with_owner(self.who.user)
        # the platform uploading for nobody into a collection whose default names nobody: the tenant's
        return default if default.owner or default.shared_beyond_owner() else Access(tenant=True)

    def may_replace(self, existing: DocumentRecord) -> bool:
        return access.may_manage(self.who, access.of_metadata(existing.metadata))


def checked_change(who: Identity, current: Access | None, new: Access) -> None:
    """PermissionDenied unless the caller may give a document this access: only admins (and the
    platform) open it to the whole tenant or name an owner other than the current one."""
    privileged = access.privileged(who)
    if new.tenant and not privileged:
        raise PermissionDenied("access.tenant: only an admin makes a document readable by the whole tenant")
    owner = current.owner if current is not None else who.user
    if new.owner and new.owner != owner and not privileged:
        raise PermissionDenied("access.owner: only an admin gives a document another owner")


def require_manager(who: Identity, record: DocumentRecord | None, doc_id: str, collection: str) -> Access:
    """The document's access when the caller may change, replace or delete it. A document it may not
    read answers as an unknown one (admins manage every document); one it reads but does not own is
    PermissionDenied."""
    current = access.of_metadata(record.metadata) if record is not None else None
    if record is None or current is None or not (readable(who, record.metadata) or access.privileged(who)):
        raise NotFound(f"document {shown(doc_id)} not found in collection {collection!r}")
    if not access.may_manage(who, current):
        raise PermissionDenied(f"document {shown(doc_id)}: only its uploader or an admin may change or delete it")
    return current


def restamped(record: DocumentRecord, chunks: list[StoredChunk],
              new: Access) -> tuple[DocumentRecord, list[StoredChunk]]:
    """The document and its chunks carrying `new` (vectors kept: nothing is embedded again)."""
    value = new.encode()
    stamped = dataclasses.replace(record, metadata={**record.metadata, access.ACCESS_KEY: value})
    return stamped, [StoredChunk(_stamped(c.chunk, value), c.vector) for c in chunks]


def _stamped(chunk: Chunk, value: str) -> Chunk:
    return dataclasses.replace(chunk, metadata={**chunk.metadata, access.ACCESS_KEY: value})
