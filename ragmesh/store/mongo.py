"""MongoDB backend of the Store (pymongo): Atlas, self-managed replica sets, standalone servers,
Cosmos DB for MongoDB.

Writes that touch several documents are atomic on every server kind. Chunks carry the tag `v` of
the write that made them, and readers only see chunks whose tag is their document's `current`
tag. A replacement inserts the new chunks, flips `current` (one single-document update, atomic on
any server), bumps the store version, then deletes the old chunks. On a replica set or mongos
those steps also run in one transaction; on a standalone server their order makes a crash
harmless: before the flip the old version stays visible, and the next start removes the orphans.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from datetime import datetime, timezone
from typing import Any, TypeAlias, TypeVar

import numpy as np
from bson import ObjectId
from bson.binary import Binary
from pymongo import ASCENDING, DESCENDING, IndexModel, MongoClient, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.errors import DuplicateKeyError, InvalidURI, OperationFailure, PyMongoError

from ragmesh.access import ACCESS_KEY, TENANT
from ragmesh.config import redact_uri
from ragmesh.store.records import (ApiKeyRecord, Change, CollectionStats, ConversationInfo, CorrectionRecord,
                                   MessageRecord, StoreUnavailable)
from ragmesh.types import (MEMORY_AUTHOR, MEMORY_COLLECTION, Chunk, DocumentEntry, DocumentRecord, SectionOutline,
                           StoredChunk)

T = TypeVar("T")
Session: TypeAlias = ClientSession | None
DocKey = tuple[str, str, str]  # (tenant, collection, doc_id)
Items = list[tuple[DocumentRecord, list[StoredChunk]]]

_CHUNK_FIELDS = [f.name for f in fields(Chunk)]
# A chunk of a non-current version younger than this may be a live writer's step 1, not an orphan.
ORPHAN_GRACE_S = 600.0
_OR_BATCH = 500  # clauses of one $or delete


class MongoStore:
    """Thread-safe (pymongo's client pools connections); one instance per process."""

    def __init__(
        self,
        uri: str,
        db_name: str = "ragmesh",
        *,
        server_selection_timeout_ms: int = 5000,
        connect_timeout_ms: int = 5000,
        socket_timeout_ms: int = 30000,
        transactions: bool | None = None,
        orphan_grace_s: float = ORPHAN_GRACE_S,
        client_factory: Callable[..., Any] = MongoClient,
    ) -> None:
        """Connects, checks the server answers, creates indexes and removes orphans.

        transactions=None detects them with `hello`; False forces versioned writes (Cosmos DB for
        MongoDB reports a replica set but has no transactions across collections).
        client_factory lets tests pass mongomock.MongoClient. Raises StoreUnavailable."""
        self._where = f"{redact_uri(uri)}/{db_name}"
        try:
            self._client = client_factory(
                uri,
                serverSelectionTimeoutMS=server_selection_timeout_ms,
                connectTimeoutMS=connect_timeout_ms,
                socketTimeoutMS=socket_timeout_ms,
                retryWrites=True,
                retryReads=True,
                appname="ragmesh",
            )
        except (InvalidURI, ValueError):
            # pymongo's message can quote pieces of an unescaped password: say what to fix instead.
            raise StoreUnavailable(
                f"MONGODB_URI for {redact_uri(uri)} is invalid: it must start with mongodb:// or "
                "mongodb+srv://, and a username or password must be percent-escaped (RFC 3986)"
            ) from None
        except PyMongoError as exc:  # e.g. a mongodb+srv:// name that does not resolve
            raise StoreUnavailable(f"MongoDB at {self._where}: {_failure(exc, uri)}") from None
        try:
            self._client.admin.command("ping")
            self.transactions = self._detect_transactions() if transactions is None else transactions
            db = self._client[db_name]
            self._docs, self._chunks, self._meta = db["documents"], db["chunks"], db["meta"]
            self._changes, self._options = db["changes"], db["collection_options"]
            self._access = db["collection_access"]
            self._convs, self._msgs = db["conversations"], db["messages"]
            self._summaries, self._corrections, self._usage = db["summaries"], db["corrections"], db["usage"]
            self._keys = db["api_keys"]
            self._create_indexes()
            self._remove_orphans(orphan_grace_s)
        except PyMongoError as exc:
            self._client.close()
            reason = _failure(exc, uri)
            raise StoreUnavailable(f"MongoDB at {self._where} is unavailable: {reason}") from None

    def __repr__(self) -> str:
        return f"mongodb:{self._where}"

    # -- start -----------------------------------------------------------------------------
    def _detect_transactions(self) -> bool:
        """Replica sets and mongos run multi-document transactions; a standalone server does not."""
        try:
            hello = self._client.admin.command("hello")
        except NotImplementedError:  # mongomock: no `hello`, and no sessions either
            return False
        return "setName" in hello or hello.get("msg") == "isdbgrid"

    def _create_indexes(self) -> None:
        """Idempotent: creating an index that exists with the same spec is a no-op. A database from
        before chunk ids were keys within a tenant loses its global (chunk_id, v) index first."""
        if "chunk_id" in self._chunks.index_information():
            try:
                self._chunks.drop_index("chunk_id")
            except OperationFailure:  # another replica starting at the same time dropped it first
                pass
        self._docs.create_indexes([
            IndexModel([("tenant", ASCENDING), ("collection", ASCENDING), ("doc_id", ASCENDING)],
                       unique=True, name="doc_key"),
            IndexModel([("tenant", ASCENDING), ("collection", ASCENDING), ("content_hash", ASCENDING)],
                       name="content_hash"),
        ])
        self._chunks.create_indexes([
            # Chunk ids are keys within a tenant; they repeat across versions of a document while a
            # replacement is under way.
            IndexModel([("tenant", ASCENDING), ("chunk_id", ASCENDING), ("v", ASCENDING)], unique=True,
                       name="tenant_chunk_id"),
            IndexModel([("tenant", ASCENDING), ("collection", ASCENDING), ("doc_id", ASCENDING),
                        ("v", ASCENDING)], name="doc_version"),
            IndexModel([("tenant", ASCENDING), ("collection", ASCENDING), ("date", ASCENDING)],
                       name="tenant_collection_date"),
            IndexModel([("collection", ASCENDING), ("_id", ASCENDING)], name="collection_order"),
        ])
        self._msgs.create_indexes([
            IndexModel([("conversation_id", ASCENDING), ("seq", ASCENDING)], unique=True,
                       name="conversation_seq"),
        ])
        self._corrections.create_indexes([
            IndexModel([("tenant", ASCENDING), ("user_id", ASCENDING), ("order", DESCENDING)], name="user_order"),
        ])
        self._changes.create_indexes([IndexModel([("version", ASCENDING)], name="version")])
        self._convs.create_indexes([
            IndexModel([("tenant", ASCENDING), ("user_id", ASCENDING), ("updated_at", DESCENDING)], name="owner"),
        ])
        self._corrections.create_indexes([IndexModel([("conversation_id", ASCENDING)], name="conversation")])
        self._keys.create_indexes([IndexModel([("tenant", ASCENDING), ("created_at", ASCENDING)], name="tenant")])
        self._meta.update_one({"_id": "version"}, {"$setOnInsert": {"value": 0}}, upsert=True)

    def _remove_orphans(self, grace_s: float) -> None:
        """Deletes chunks no reader can see: a version an interrupted write never flipped to or
        never deleted, or a deleted document's. One pass over the headers, one grouped pass over
        the chunks; tags are ObjectIds, so their age is known without another field."""
        current = self._current_versions({})
        cutoff = time.time() - grace_s
        groups = self._chunks.aggregate([{"$group": {"_id": {
            "tenant": "$tenant", "collection": "$collection", "doc_id": "$doc_id", "v": "$v"}}}])
        stale = [
            key for key in (g["_id"] for g in groups)
            if current.get((key["tenant"], key["collection"], key["doc_id"])) != key["v"]
            and key["v"].generation_time.timestamp() <= cutoff
        ]
        if self._delete_chunks(stale, None):
            # The interrupted write may have flipped without bumping: make indexes look again.
            self._bump(None)

    # -- helpers ---------------------------------------------------------------------------
    def _atomic(self, steps: Callable[[Session], T]) -> T:
        """Runs steps in a transaction where the server has them (retried on transient errors),
        else directly: each multi-step write orders its steps so that a crash is harmless."""
        if not self.transactions:
            return steps(None)
        with self._client.start_session() as session:
            return session.with_transaction(steps)

    def _bump(self, s: Session) -> int:
        after = self._meta.find_one_and_update(
            {"_id": "version"}, {"$inc": {"value": 1}}, upsert=True,
            return_document=ReturnDocument.AFTER, session=s,
        )
        return int(after["value"])

    def _current_versions(self, where: dict[str, Any]) -> dict[DocKey, ObjectId]:
        """Each document's visible tag, loaded once so chunk scans need no per-chunk lookup."""
        projection = {"_id": 0, "tenant": 1, "collection": 1, "doc_id": 1, "current": 1}
        return {
            (d["tenant"], d["collection"], d["doc_id"]): d["current"]
            for d in self._docs.find(where, projection)
        }

    # -- corpus ----------------------------------------------------------------------------
    def get_document(self, tenant: str, collection: str, doc_id: str) -> DocumentRecord | None:
        d = self._docs.find_one({"tenant": tenant, "collection": collection, "doc_id": doc_id})
        return None if d is None else _document(d)

    def documents(self, tenant: str, collection: str | None, limit: int = 50, offset: int = 0, *,
                  author: str | None = None, readers: frozenset[str] | None = None) -> list[DocumentEntry]:
        if limit <= 0:
            return []  # pymongo reads limit(0) as "no limit"
        where: dict[str, Any] = {"tenant": tenant} if collection is None else {"tenant": tenant,
                                                                                 "collection": collection}
        if author is not None:
            mine = [{f"metadata.{MEMORY_AUTHOR}": author}] if author else []
            where["$or"] = [{"collection": {"$ne": MEMORY_COLLECTION}}, *mine]
        if readers is not None:
            where = {"$and": [where, _readable(readers)]}
        order = [("updated_at", DESCENDING), ("collection", ASCENDING), ("doc_id", ASCENDING)]
        return [DocumentEntry(_document(d), _iso(d["updated_at"]), bool(d.get("summary")))
                for d in self._docs.find(where).sort(order).skip(offset).limit(limit)]

    def chunk(self, tenant: str, chunk_id: str) -> StoredChunk | None:
        """The current version's chunk: older versions share the id while a replacement is under way."""
        for d in self._chunks.find({"chunk_id": chunk_id, "tenant": tenant}):
            header = self._docs.find_one({"tenant": tenant, "collection": d["collection"], "doc_id": d["doc_id"]},
                                         {"current": 1})
            if header is not None and header["current"] == d["v"]:
                return _stored_chunk(d)
        return None

    def replace_document(self, doc: DocumentRecord, chunks: list[StoredChunk]) -> int:
        return self.replace_documents([(doc, chunks)])

    def replace_documents(self, items: Items) -> int:
        """One tag for the whole batch. Standalone, each document flips atomically on its own and
        a failed insert flips none; a crash among the flips leaves some documents replaced."""
        latest = {(d.tenant, d.collection, d.doc_id): (d, c) for d, c in items}  # last one wins

        def steps(s: Session) -> int:
            tag = self._insert_version(list(latest.values()), s)
            replaced = [(doc, self._flip(doc, tag, len(chunks), s)) for doc, chunks in latest.values()]
            version = self._bump(s)
            self._log_changes(version, [(d.collection, d.tenant, d.doc_id) for d, _ in latest.values()], s)
            self._delete_chunks([_version(doc, old) for doc, old in replaced if old is not None], s)
            return version

        return self._atomic(steps)

    def _insert_version(self, items: Items, s: Session) -> ObjectId:
        """Step 1: the new chunks under a fresh tag that no reader follows yet."""
        tag = ObjectId()
        chunks = [_chunk_doc(c, tag) for _, cs in items for c in cs]
        if not chunks:
            return tag
        try:
            self._chunks.insert_many(chunks, session=s)
        except PyMongoError:
            if s is None:  # invisible anyway; clean up now rather than at the next start
                self._delete_chunks([_version(doc, tag) for doc, _ in items], None)
            raise
        return tag

    def _flip(
        self, doc: DocumentRecord, tag: ObjectId, chunk_count: int, s: Session
    ) -> ObjectId | None:
        """Step 2: makes `tag` the visible version in one atomic update; returns the replaced tag."""
        before = self._docs.find_one_and_update(
            {"tenant": doc.tenant, "collection": doc.collection, "doc_id": doc.doc_id},
            {"$set": {
                "content_hash": doc.content_hash, "title": doc.title, "metadata": doc.metadata,
                "date": doc.date, "chunk_count": chunk_count, "current": tag, "updated_at": _now(),
                # The outline flips with the chunks it was made from.
                "summary": doc.summary, "sections": [asdict(s) for s in doc.sections],
            }},
            projection={"current": 1}, upsert=True, return_document=ReturnDocument.BEFORE, session=s,
        )
        return None if before is None else before["current"]

    def _delete_chunks(self, versions: list[dict[str, Any]], s: Session) -> int:
        """Deletes chunks of exactly these (tenant, collection, doc_id, v) versions, so a
        concurrent writer's chunks stay; a bounded $or at a time. Returns how many went."""
        return sum(
            self._chunks.delete_many({"$or": versions[i:i + _OR_BATCH]}, session=s).deleted_count
            for i in range(0, len(versions), _OR_BATCH)
        )

    def delete_documents(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        def steps(s: Session) -> tuple[int, int]:
            key = {"tenant": tenant, "collection": collection}
            where = {**key, "doc_id": {"$in": doc_ids}}
            found = list(self._docs.find(where, {"doc_id": 1, "current": 1}, session=s))
            if not found:
                return 0, 0
            # Headers first: a document without one is invisible, its chunks orphans until removed.
            headers = {"_id": {"$in": [d["_id"] for d in found]}}
            docs = self._docs.delete_many(headers, session=s).deleted_count
            self._log_changes(self._bump(s), [(collection, tenant, d["doc_id"]) for d in found], s)
            versions = [{**key, "doc_id": d["doc_id"], "v": d["current"]} for d in found]
            return docs, self._delete_chunks(versions, s)

        return self._atomic(steps)

    def _log_changes(self, version: int, keys: list[tuple[str, str, str]], s: Session) -> None:
        self._changes.insert_many([{"version": version, "collection": c, "tenant": t, "doc_id": d}
                                   for c, t, d in keys], session=s)

    def changes_since(self, version: int) -> list[Change]:
        cursor = self._changes.find({"version": {"$gt": version}}).sort([("version", ASCENDING), ("_id", ASCENDING)])
        return [Change(d["version"], d["collection"], d["tenant"], d["doc_id"]) for d in cursor]

    def watch_changes(self, on_change: Callable[[], None], stop: threading.Event) -> bool:
        """On a replica set, a change stream on the change log wakes the caller at once;
        elsewhere (standalone, mongomock) there is none and the caller polls."""
        if not self.transactions:
            return False
        with self._changes.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=500) as stream:
            while not stop.is_set():
                if stream.try_next() is not None:
                    on_change()
        return True

    def collection_options(self) -> dict[str, dict]:
        return {d["_id"]: d["options"] for d in self._options.find()}

    def set_collection_options(self, name: str, options: dict) -> None:
        self._options.replace_one({"_id": name}, {"options": options}, upsert=True)

    def collection_access(self, tenant: str) -> dict[str, dict]:
        return {d["collection"]: d["rule"] for d in self._access.find({"tenant": tenant})}

    def set_collection_access(self, tenant: str, collection: str, rule: dict) -> None:
        self._access.replace_one({"_id": f"{tenant}/{collection}"},
                                 {"tenant": tenant, "collection": collection, "rule": rule}, upsert=True)

    def document_chunks(self, tenant: str, collection: str, doc_id: str) -> list[StoredChunk]:
        key = {"tenant": tenant, "collection": collection, "doc_id": doc_id}
        header = self._docs.find_one(key, {"current": 1})
        if header is None:
            return []
        return [_stored_chunk(d) for d in self._chunks.find({**key, "v": header["current"]}).sort("_id", ASCENDING)]

    def iter_chunks(self, collection: str | None = None) -> Iterator[StoredChunk]:
        """Chunks of current versions in insertion (_id) order, the same on every replica.

        Current tags come from one pass over the (far fewer) headers into a dict: a $lookup would
        probe an index per chunk and needs a three-field join that mongomock lacks. A write during
        the scan may hide its document from this pass, but it bumps version(): read that first."""
        where = {} if collection is None else {"collection": collection}
        current = self._current_versions(where)
        for d in self._chunks.find(where).sort("_id", ASCENDING):
            if current.get((d["tenant"], d["collection"], d["doc_id"])) == d["v"]:
                yield _stored_chunk(d)

    def collections(self, tenant: str | None = None, readers: frozenset[str] | None = None) -> list[CollectionStats]:
        match: dict[str, Any] = {} if tenant is None else {"tenant": tenant}
        if readers is not None:
            match = {"$and": [match, _readable(readers)]}
        rows = self._docs.aggregate([
            {"$match": match},
            {"$group": {"_id": "$collection", "docs": {"$sum": 1}, "chunks": {"$sum": "$chunk_count"}}},
            {"$sort": {"_id": 1}},
        ])
        return [CollectionStats(r["_id"], documents=r["docs"], chunks=r["chunks"]) for r in rows]

    def version(self) -> int:
        return int(self._meta.find_one({"_id": "version"})["value"])

    # -- conversations ---------------------------------------------------------------------
    def ensure_conversation(self, tenant: str, user_id: str, conversation_id: str) -> None:
        now = _now()
        try:
            # Matches a missing conversation, or one add_message created without an owner.
            self._convs.update_one(
                {"_id": conversation_id, "tenant": {"$exists": False}},
                {"$set": {"tenant": tenant, "user_id": user_id, "created_at": now},
                 "$setOnInsert": {"seq": 0, "updated_at": now}},
                upsert=True,
            )
        except DuplicateKeyError:
            pass  # owned already: the first owner keeps it, as SQLite's INSERT OR IGNORE does

    def conversation_exists(self, tenant: str, conversation_id: str) -> bool:
        return self._convs.count_documents({"_id": conversation_id, "tenant": tenant}, limit=1) > 0

    def conversation_owner(self, conversation_id: str) -> tuple[str, str] | None:
        found = self._convs.find_one({"_id": conversation_id, "tenant": {"$exists": True}},
                                     {"tenant": 1, "user_id": 1})
        return (found["tenant"], found["user_id"]) if found else None

    def conversations(self, tenant: str, user_id: str | None, limit: int = 50,
                      offset: int = 0) -> list[ConversationInfo]:
        if limit <= 0:
            return []  # pymongo reads limit(0) as "no limit"
        where = {"tenant": tenant} if user_id is None else {"tenant": tenant, "user_id": user_id}
        out = []
        for c in self._convs.find(where).sort([("updated_at", DESCENDING), ("_id", DESCENDING)]).skip(offset).limit(limit):
            title = c.get("title", "")
            if not title:
                first = self._msgs.find_one({"conversation_id": c["_id"], "role": "user"}, {"content": 1},
                                            sort=[("seq", ASCENDING)])
                title = (first or {}).get("content", "")[:80]
            out.append(ConversationInfo(c["_id"], tenant, c["user_id"], _iso(c["created_at"]),
                                        _iso(c["updated_at"]), title))
        return out

    def rename_conversation(self, tenant: str, conversation_id: str, title: str) -> bool:
        found = self._convs.update_one({"_id": conversation_id, "tenant": tenant}, {"$set": {"title": title}})
        return found.matched_count > 0

    def add_message(self, conversation_id: str, role: str, content: str, meta: dict) -> str:
        """The sequence number comes from an atomic $inc on the conversation: safe with many writers."""
        now = _now()
        counter = self._convs.find_one_and_update(
            {"_id": conversation_id}, {"$inc": {"seq": 1}, "$set": {"updated_at": now}},
            projection={"seq": 1}, upsert=True, return_document=ReturnDocument.AFTER,
        )
        message_id = uuid.uuid4().hex
        self._msgs.insert_one({
            "_id": message_id, "conversation_id": conversation_id, "seq": counter["seq"],
            "role": role, "content": content, "meta": meta, "created_at": now,
        })
        return message_id

    def update_message(self, message_id: str, content: str, meta: dict) -> None:
        self._msgs.update_one({"_id": message_id}, {"$set": {"content": content, "meta": meta}})

    def delete_message(self, message_id: str) -> None:
        self._msgs.delete_one({"_id": message_id})

    def messages(self, conversation_id: str, limit: int | None = None, *, with_meta: bool = True) -> list[MessageRecord]:
        if limit is not None and limit <= 0:
            return []  # pymongo reads limit(0) as "no limit"
        cursor = self._msgs.find({"conversation_id": conversation_id},
                                 None if with_meta else {"meta": False}).sort("seq", DESCENDING)
        if limit is not None:
            cursor = cursor.limit(limit)
        rows = list(cursor)
        return [
            MessageRecord(m["_id"], conversation_id, m["role"], m["content"], m.get("meta", {}),
                          m["created_at"].strftime("%Y-%m-%dT%H:%M:%SZ"))
            for m in reversed(rows)
        ]

    def answer_count(self, conversation_id: str) -> int:
        return self._msgs.count_documents({"conversation_id": conversation_id, "role": "assistant"})

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        def steps(s: Session) -> bool:
            owned = {"_id": conversation_id, "tenant": tenant}
            if not self._convs.count_documents(owned, limit=1, session=s):
                return False
            # Messages first: a crash leaves a conversation to delete again, never stray messages
            # that a reused id would bring back (or collide with on seq).
            self._msgs.delete_many({"conversation_id": conversation_id}, session=s)
            self._summaries.delete_one({"_id": conversation_id}, session=s)
            self._corrections.delete_many({"conversation_id": conversation_id}, session=s)
            self._convs.delete_one(owned, session=s)
            return True

        return self._atomic(steps)

    def conversation_summary(self, conversation_id: str) -> str:
        found = self._summaries.find_one({"_id": conversation_id}, {"summary": 1})
        return found["summary"] if found else ""

    def set_conversation_summary(self, conversation_id: str, summary: str) -> None:
        self._summaries.replace_one({"_id": conversation_id},
                                    {"summary": summary, "updated_at": _now()}, upsert=True)

    def add_correction(self, record: CorrectionRecord) -> str:
        correction_id = record.correction_id or uuid.uuid4().hex
        self._corrections.insert_one({
            "_id": correction_id, "tenant": record.tenant, "user_id": record.user_id,
            "question": record.question, "wrong_answer": record.wrong_answer, "correction": record.correction,
            "conversation_id": record.conversation_id, "created_at": _now(),
            "order": time.time_ns(),  # created_at has millisecond ties; this keeps newest-first exact
        })
        return correction_id

    def corrections(self, tenant: str, user_id: str, limit: int = 200) -> list[CorrectionRecord]:
        if limit <= 0:
            return []
        cursor = self._corrections.find({"tenant": tenant, "user_id": user_id}).sort("order", DESCENDING).limit(limit)
        return [
            CorrectionRecord(d["_id"], tenant, user_id, d["question"], d["wrong_answer"], d["correction"],
                             d["conversation_id"], d["created_at"].strftime("%Y-%m-%dT%H:%M:%SZ"))
            for d in cursor
        ]

    def add_usage(self, tenant: str, user_id: str, month: str, messages: int, tokens: int) -> tuple[int, int]:
        found = self._usage.find_one_and_update(
            {"_id": f"{tenant}\x1f{user_id}\x1f{month}"},
            {"$inc": {"messages": messages, "tokens": tokens}},
            upsert=True, return_document=ReturnDocument.AFTER,
        )
        return int(found["messages"]), int(found["tokens"])

    def usage(self, tenant: str, user_id: str, month: str) -> tuple[int, int]:
        found = self._usage.find_one({"_id": f"{tenant}\x1f{user_id}\x1f{month}"})
        return (int(found["messages"]), int(found["tokens"])) if found else (0, 0)

    def add_api_key(self, record: ApiKeyRecord) -> None:
        doc = asdict(record)
        self._keys.insert_one({"_id": doc.pop("key_id"), **doc})

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        found = self._keys.find_one({"_id": key_id})
        return _key_record(found) if found else None

    def api_keys(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        where = {} if tenant is None else {"tenant": tenant}
        return [_key_record(d) for d in self._keys.find(where).sort([("created_at", ASCENDING), ("_id", ASCENDING)])]

    def revoke_api_key(self, key_id: str) -> bool:
        stamp = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
        return self._keys.update_one({"_id": key_id, "revoked_at": ""}, {"$set": {"revoked_at": stamp}}).modified_count > 0

    @contextmanager
    def inline_read(self) -> Iterator[bool]:
        """Never: every read is a network round trip, which must not hold up the event loop."""
        yield False

    def close(self) -> None:
        self._client.close()


def _document(d: dict[str, Any]) -> DocumentRecord:
    return DocumentRecord(
        doc_id=d["doc_id"], collection=d["collection"], tenant=d["tenant"], content_hash=d["content_hash"],
        title=d["title"], metadata=d["metadata"], date=d["date"], chunk_count=d["chunk_count"],
        summary=d.get("summary", ""),  # headers written before outlines existed have none
        sections=[SectionOutline(**s) for s in d.get("sections", [])],
    )


def _key_record(d: dict[str, Any]) -> ApiKeyRecord:
    kept = {f.name: d[f.name] for f in fields(ApiKeyRecord) if f.name not in ("key_id", "groups")}
    return ApiKeyRecord(key_id=d["_id"], groups=tuple(d.get("groups", ())), **kept)  # keys made before groups: none


def _readable(readers: frozenset[str]) -> dict[str, Any]:
    """A query over document headers: their access (ragmesh.access; none: the tenant's) names a reader."""
    field = f"metadata.{ACCESS_KEY}"
    named = {field: {"$regex": "(^| )(" + "|".join(re.escape(r) for r in sorted(readers)) + ")( |$)"}} \
        if readers else {"_id": {"$exists": False}}
    return {"$or": [named, {field: {"$exists": False}}]} if TENANT in readers else named


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _version(doc: DocumentRecord, tag: ObjectId) -> dict[str, Any]:
    return {"tenant": doc.tenant, "collection": doc.collection, "doc_id": doc.doc_id, "v": tag}


def _chunk_doc(stored: StoredChunk, tag: ObjectId) -> dict[str, Any]:
    """Vectors as BSON binary of little-endian float32: a quarter of the size of a list of doubles,
    and the exact float32 comes back."""
    vector = None if stored.vector is None else Binary(np.asarray(stored.vector, dtype="<f4").tobytes())
    return {**asdict(stored.chunk), "vector": vector, "v": tag}


def _stored_chunk(d: dict[str, Any]) -> StoredChunk:
    raw = d["vector"]
    vector = None if raw is None else np.frombuffer(raw, dtype="<f4")
    return StoredChunk(Chunk(**{name: d[name] for name in _CHUNK_FIELDS}), vector)


def _failure(exc: PyMongoError, uri: str) -> str:
    """The driver's reason, without the topology dump or anything of the URI's credentials."""
    text = str(exc).split(", Topology Description:")[0]
    userinfo = uri.partition("://")[2].rpartition("@")[0]
    for secret in (userinfo, userinfo.partition(":")[2]):
        if secret:
            text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}"
