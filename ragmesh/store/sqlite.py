"""SQLite backend of the Store: one file under DATA_DIR, WAL mode, every write in a transaction."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ragmesh.access import ACCESS_KEY, TENANT
from ragmesh.errors import InvalidArgument
from ragmesh.store.records import (ApiKeyRecord, Change, CollectionStats, ConversationInfo, CorrectionRecord,
                                   MessageRecord)
from ragmesh.types import (MEMORY_AUTHOR, MEMORY_COLLECTION, Chunk, DocumentEntry, DocumentRecord, SectionOutline,
                           StoredChunk)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
  tenant TEXT NOT NULL, collection TEXT NOT NULL, doc_id TEXT NOT NULL,
  content_hash TEXT NOT NULL, title TEXT NOT NULL, metadata TEXT NOT NULL,
  date TEXT NOT NULL, chunk_count INTEGER NOT NULL, updated_at REAL NOT NULL,
  PRIMARY KEY (tenant, collection, doc_id)
);
{chunks}
CREATE TABLE IF NOT EXISTS outlines (
  tenant TEXT NOT NULL, collection TEXT NOT NULL, doc_id TEXT NOT NULL,
  summary TEXT NOT NULL, sections TEXT NOT NULL,
  PRIMARY KEY (tenant, collection, doc_id)
);
CREATE TABLE IF NOT EXISTS changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, version INTEGER NOT NULL,
  collection TEXT NOT NULL, tenant TEXT NOT NULL, doc_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_version ON changes (version);
CREATE TABLE IF NOT EXISTS collection_options (name TEXT PRIMARY KEY, options TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collection_access (
  tenant TEXT NOT NULL, collection TEXT NOT NULL, rule TEXT NOT NULL, PRIMARY KEY (tenant, collection)
);
CREATE TABLE IF NOT EXISTS conversations (
  conversation_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, user_id TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
  message_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, seq INTEGER NOT NULL,
  role TEXT NOT NULL, content TEXT NOT NULL, meta TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, seq);
CREATE TABLE IF NOT EXISTS conversation_titles (conversation_id TEXT PRIMARY KEY, title TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conversation_summaries (
  conversation_id TEXT PRIMARY KEY, summary TEXT NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS corrections (
  correction_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, user_id TEXT NOT NULL, question TEXT NOT NULL,
  wrong_answer TEXT NOT NULL, correction TEXT NOT NULL, conversation_id TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS corrections_by_user ON corrections (tenant, user_id, created_at);
CREATE TABLE IF NOT EXISTS api_keys (
  key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, user_id TEXT NOT NULL, role TEXT NOT NULL,
  secret_hash TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT NOT NULL, revoked_at TEXT NOT NULL,
  label TEXT NOT NULL, {key_groups}
);
CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (tenant, user_id, updated_at);
CREATE TABLE IF NOT EXISTS usage (
  tenant TEXT NOT NULL, user_id TEXT NOT NULL, month TEXT NOT NULL,
  messages INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (tenant, user_id, month)
);
"""
# A chunk id is a key within its tenant: the same id in two tenants is two chunks. Files written
# before that had `chunk_id TEXT PRIMARY KEY` (one id space for every tenant): _migrate_chunk_keys.
_CHUNKS = """
CREATE TABLE IF NOT EXISTS {table} (
  chunk_id TEXT NOT NULL, tenant TEXT NOT NULL, collection TEXT NOT NULL,
  doc_id TEXT NOT NULL, chunk_index INTEGER NOT NULL, text TEXT NOT NULL,
  metadata TEXT NOT NULL, date TEXT NOT NULL, parent_chunk_id TEXT NOT NULL,
  vector BLOB, PRIMARY KEY (tenant, chunk_id)
);
"""
_CHUNK_INDEXES = """
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (tenant, collection, doc_id);
CREATE INDEX IF NOT EXISTS chunks_by_collection ON chunks (collection);
"""
# A key's groups, a JSON list. Files written before keys had groups lack the column: _migrate_key_groups.
_KEY_GROUPS = "group_names TEXT NOT NULL DEFAULT '[]'"
_SCHEMA = _SCHEMA.format(chunks=_CHUNKS.format(table="chunks") + _CHUNK_INDEXES, key_groups=_KEY_GROUPS)
_CHUNK_FIELDS = "chunk_id, tenant, collection, doc_id, chunk_index, text, metadata, date, parent_chunk_id, vector"


def _readable(readers: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """SQL over a `documents d` row: its access (ragmesh.access; none: the tenant's) names a reader."""
    if not readers:
        return "0", ()
    value = f"(' ' || coalesce(json_extract(d.metadata, '$.\"{ACCESS_KEY}\"'), '{TENANT}') || ' ')"
    return "(" + " OR ".join(f"instr({value}, ?) > 0" for _ in readers) + ")", tuple(f" {r} " for r in sorted(readers))


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


_CHUNK_COLUMNS = (
    "SELECT chunk_id, tenant, collection, doc_id, chunk_index, text, metadata, date, parent_chunk_id, vector, rowid "
    "FROM chunks"
)


_KEY_COLUMNS = "key_id, tenant, user_id, role, secret_hash, created_at, expires_at, revoked_at, label, group_names"


def _key_row(r: ApiKeyRecord) -> tuple:
    return (r.key_id, r.tenant, r.user_id, r.role, r.secret_hash, r.created_at, r.expires_at, r.revoked_at, r.label,
            json.dumps(list(r.groups)))


def _key_record(row: tuple) -> ApiKeyRecord:
    return ApiKeyRecord(*row[:-1], groups=tuple(json.loads(row[-1])))


def _stored_chunk(r: tuple) -> StoredChunk:
    chunk = Chunk(
        chunk_id=r[0], tenant=r[1], collection=r[2], doc_id=r[3], chunk_index=r[4],
        text=r[5], metadata=json.loads(r[6]), date=r[7], parent_chunk_id=r[8],
    )
    return StoredChunk(chunk, None if r[9] is None else np.frombuffer(r[9], dtype="<f4"))


class SqliteStore:
    """Thread-safe: one connection, one lock; the services call it from worker threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._lock = threading.RLock()
        with self._lock:
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('version', '0')")
            self._migrate_chunk_keys()
            self._migrate_key_groups()

    def __repr__(self) -> str:
        return f"sqlite:{self.path}"

    @contextmanager
    def inline_read(self) -> Iterator[bool]:
        """The lock, if no other thread holds it (WAL: another process's write does not block a read)."""
        free = self._lock.acquire(blocking=False)
        try:
            yield free
        finally:
            if free:
                self._lock.release()

    def _migrate_chunk_keys(self) -> None:
        """A file whose chunk ids were one space for every tenant gets them keyed by (tenant, chunk_id):
        the rows are copied (rowids kept, so the order iter_chunks reads is the same) in one transaction."""
        if self._chunks_keyed(self._db):
            return
        with self._tx() as db:
            if self._chunks_keyed(db):  # another process opening the file migrated it meanwhile
                return
            db.execute(_CHUNKS.format(table="chunks_keyed"))
            db.execute(f"INSERT INTO chunks_keyed (rowid, {_CHUNK_FIELDS}) SELECT rowid, {_CHUNK_FIELDS} FROM chunks")
            db.execute("DROP TABLE chunks")
            db.execute("ALTER TABLE chunks_keyed RENAME TO chunks")
            for statement in filter(str.strip, _CHUNK_INDEXES.split(";")):
                db.execute(statement)

    def _migrate_key_groups(self) -> None:
        """A file whose keys had no groups gets the column; its keys keep working, with no groups."""
        if self._key_groups_column(self._db):
            return
        with self._tx() as db:
            if not self._key_groups_column(db):  # another process opening the file may have added it
                db.execute(f"ALTER TABLE api_keys ADD COLUMN {_KEY_GROUPS}")

    @staticmethod
    def _key_groups_column(db: sqlite3.Connection) -> bool:
        return any(row[1] == "group_names" for row in db.execute("PRAGMA table_info(api_keys)"))

    @staticmethod
    def _chunks_keyed(db: sqlite3.Connection) -> bool:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chunks'").fetchone()
        return "PRIMARY KEY (tenant, chunk_id)" in sql

    # -- helpers ---------------------------------------------------------------------------
    def _tx(self) -> "_Transaction":
        return _Transaction(self._db, self._lock)

    def _bump_version(self) -> int:
        self._db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'version'")
        return int(self._db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0])

    # -- corpus ----------------------------------------------------------------------------
    def get_document(self, tenant: str, collection: str, doc_id: str) -> DocumentRecord | None:
        rows = self._documents("d.tenant = ? AND d.collection = ? AND d.doc_id = ?", (tenant, collection, doc_id))
        return rows[0].document if rows else None

    def documents(self, tenant: str, collection: str | None, limit: int = 50, offset: int = 0, *,
                  author: str | None = None, readers: frozenset[str] | None = None) -> list[DocumentEntry]:
        args: tuple[str, ...]
        where, args = ("d.tenant = ?", (tenant,)) if collection is None else \
            ("d.tenant = ? AND d.collection = ?", (tenant, collection))
        if author is not None:
            where += f" AND (d.collection != ? OR (? != '' AND json_extract(d.metadata, '$.{MEMORY_AUTHOR}') = ?))"
            args += (MEMORY_COLLECTION, author, author)
        if readers is not None:
            condition, more = _readable(readers)
            where, args = f"{where} AND {condition}", args + more
        return self._documents(f"{where} ORDER BY d.updated_at DESC, d.collection, d.doc_id LIMIT ? OFFSET ?",
                               (*args, limit, offset))

    def _documents(self, where: str, args: tuple) -> list[DocumentEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT d.tenant, d.collection, d.doc_id, d.content_hash, d.title, d.metadata, d.date, d.chunk_count, "
                "o.summary, o.sections, d.updated_at "
                f"FROM documents d LEFT JOIN outlines o USING (tenant, collection, doc_id) WHERE {where}", args,
            ).fetchall()
        return [DocumentEntry(DocumentRecord(
            tenant=r[0], collection=r[1], doc_id=r[2], content_hash=r[3], title=r[4], metadata=json.loads(r[5]),
            date=r[6], chunk_count=r[7], summary=r[8] or "",
            sections=[SectionOutline(**s) for s in json.loads(r[9] or "[]")],
        ), _iso(r[10]), bool(r[8])) for r in rows]

    def chunk(self, tenant: str, chunk_id: str) -> StoredChunk | None:
        with self._lock:
            row = self._db.execute(f"{_CHUNK_COLUMNS} WHERE tenant = ? AND chunk_id = ?", (tenant, chunk_id)).fetchone()
        return None if row is None else _stored_chunk(row)

    def replace_document(self, doc: DocumentRecord, chunks: list[StoredChunk]) -> int:
        return self.replace_documents([(doc, chunks)])

    def replace_documents(self, items: list[tuple[DocumentRecord, list[StoredChunk]]]) -> int:
        try:
            return self._replace_documents(items)
        except sqlite3.IntegrityError:  # within the tenant: another tenant's ids are never in the way
            raise InvalidArgument("chunk_id", "a chunk id is already used by another document") from None

    def _replace_documents(self, items: list[tuple[DocumentRecord, list[StoredChunk]]]) -> int:
        with self._tx() as db:
            for doc, chunks in items:
                db.execute(
                    "DELETE FROM chunks WHERE tenant = ? AND collection = ? AND doc_id = ?",
                    (doc.tenant, doc.collection, doc.doc_id),
                )
                db.executemany(
                    "INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            s.chunk.chunk_id, s.chunk.tenant, s.chunk.collection, s.chunk.doc_id,
                            s.chunk.chunk_index, s.chunk.text, json.dumps(s.chunk.metadata),
                            s.chunk.date, s.chunk.parent_chunk_id,
                            None if s.vector is None else np.asarray(s.vector, dtype="<f4").tobytes(),
                        )
                        for s in chunks
                    ],
                )
                db.execute(
                    "INSERT OR REPLACE INTO documents VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        doc.tenant, doc.collection, doc.doc_id, doc.content_hash, doc.title,
                        json.dumps(doc.metadata), doc.date, len(chunks), time.time(),
                    ),
                )
                key = (doc.tenant, doc.collection, doc.doc_id)
                if doc.summary or doc.sections:
                    sections = json.dumps([asdict(s) for s in doc.sections])
                    db.execute("INSERT OR REPLACE INTO outlines VALUES (?,?,?,?,?)", (*key, doc.summary, sections))
                else:  # a replacement without an outline must not keep the old version's
                    db.execute("DELETE FROM outlines WHERE tenant = ? AND collection = ? AND doc_id = ?", key)
            version = self._bump_version()
            self._log_changes(db, version, [(d.collection, d.tenant, d.doc_id) for d, _ in items])
            return version

    def delete_documents(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        with self._tx() as db:
            docs = chunks = 0
            for doc_id in doc_ids:
                key = (tenant, collection, doc_id)
                chunks += db.execute(
                    "DELETE FROM chunks WHERE tenant = ? AND collection = ? AND doc_id = ?", key
                ).rowcount
                docs += db.execute(
                    "DELETE FROM documents WHERE tenant = ? AND collection = ? AND doc_id = ?", key
                ).rowcount
                db.execute("DELETE FROM outlines WHERE tenant = ? AND collection = ? AND doc_id = ?", key)
            if docs or chunks:
                self._log_changes(db, self._bump_version(), [(collection, tenant, d) for d in doc_ids])
            return docs, chunks

    @staticmethod
    def _log_changes(db: sqlite3.Connection, version: int, keys: list[tuple[str, str, str]]) -> None:
        db.executemany("INSERT INTO changes (version, collection, tenant, doc_id) VALUES (?,?,?,?)",
                       [(version, *k) for k in keys])

    def changes_since(self, version: int) -> list[Change]:
        with self._lock:
            rows = self._db.execute(
                "SELECT version, collection, tenant, doc_id FROM changes WHERE version > ? ORDER BY seq", (version,)
            ).fetchall()
        return [Change(*r) for r in rows]

    def watch_changes(self, on_change, stop: threading.Event) -> bool:
        return False  # SQLite pushes nothing: replicas poll version()

    def collection_options(self) -> dict[str, dict]:
        with self._lock:
            rows = self._db.execute("SELECT name, options FROM collection_options").fetchall()
        return {name: json.loads(options) for name, options in rows}

    def set_collection_options(self, name: str, options: dict) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO collection_options VALUES (?, ?)", (name, json.dumps(options)))

    def collection_access(self, tenant: str) -> dict[str, dict]:
        with self._lock:
            rows = self._db.execute("SELECT collection, rule FROM collection_access WHERE tenant = ?",
                                    (tenant,)).fetchall()
        return {name: json.loads(rule) for name, rule in rows}

    def set_collection_access(self, tenant: str, collection: str, rule: dict) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO collection_access VALUES (?, ?, ?)", (tenant, collection, json.dumps(rule)))

    def document_chunks(self, tenant: str, collection: str, doc_id: str) -> list[StoredChunk]:
        sql = f"{_CHUNK_COLUMNS} WHERE tenant = ? AND collection = ? AND doc_id = ? ORDER BY rowid"
        with self._lock:
            rows = self._db.execute(sql, (tenant, collection, doc_id)).fetchall()
        return [_stored_chunk(r) for r in rows]

    def iter_chunks(self, collection: str | None = None, page: int = 4096) -> Iterator[StoredChunk]:
        """Pages through the chunks by rowid, so a rebuild at 1M chunks never holds every row
        at once. A write between pages may show a document half-replaced; such writes bump
        version(), which the caller reads first and replays from."""
        scope, args = ("", ()) if collection is None else ("AND collection = ?", (collection,))
        sql = f"{_CHUNK_COLUMNS} WHERE rowid > ? {scope} ORDER BY rowid LIMIT {int(page)}"
        last = 0
        while True:
            with self._lock:
                rows = self._db.execute(sql, (last, *args)).fetchall()
            yield from (_stored_chunk(r) for r in rows)
            if len(rows) < page:
                return
            last = rows[-1][-1]

    def collections(self, tenant: str | None = None, readers: frozenset[str] | None = None) -> list[CollectionStats]:
        scope, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        if readers is not None:
            condition, more = _readable(readers)
            scope, args = f"{scope} AND {condition}" if scope else f"WHERE {condition}", args + more
        with self._lock:
            rows = self._db.execute(
                f"SELECT collection, COUNT(*), SUM(chunk_count) FROM documents d {scope} "
                "GROUP BY collection ORDER BY collection", args
            ).fetchall()
        return [CollectionStats(name=r[0], documents=r[1], chunks=r[2] or 0) for r in rows]

    def version(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0])

    # -- conversations ---------------------------------------------------------------------
    def ensure_conversation(self, tenant: str, user_id: str, conversation_id: str) -> None:
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO conversations VALUES (?,?,?,?,?)",
                (conversation_id, tenant, user_id, now, now),
            )

    def conversation_exists(self, tenant: str, conversation_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM conversations WHERE tenant = ? AND conversation_id = ?",
                (tenant, conversation_id),
            ).fetchone()
        return row is not None

    def conversation_owner(self, conversation_id: str) -> tuple[str, str] | None:
        with self._lock:
            row = self._db.execute("SELECT tenant, user_id FROM conversations WHERE conversation_id = ?",
                                   (conversation_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def conversations(self, tenant: str, user_id: str | None, limit: int = 50,
                      offset: int = 0) -> list[ConversationInfo]:
        mine, args = ("AND c.user_id = ?", (tenant, user_id)) if user_id is not None else ("", (tenant,))
        with self._lock:
            rows = self._db.execute(
                "SELECT c.conversation_id, c.user_id, c.created_at, c.updated_at, t.title, "
                "(SELECT content FROM messages m WHERE m.conversation_id = c.conversation_id AND m.role = 'user' "
                " ORDER BY seq LIMIT 1) FROM conversations c LEFT JOIN conversation_titles t USING (conversation_id) "
                f"WHERE c.tenant = ? {mine} ORDER BY c.updated_at DESC, c.rowid DESC LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        return [ConversationInfo(r[0], tenant, r[1], _iso(r[2]), _iso(r[3]), r[4] or (r[5] or "")[:80]) for r in rows]

    def rename_conversation(self, tenant: str, conversation_id: str, title: str) -> bool:
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM conversations WHERE tenant = ? AND conversation_id = ?",
                              (tenant, conversation_id)).fetchone():
                return False
            if title:
                db.execute("INSERT OR REPLACE INTO conversation_titles VALUES (?, ?)", (conversation_id, title))
            else:
                db.execute("DELETE FROM conversation_titles WHERE conversation_id = ?", (conversation_id,))
            return True

    def add_message(self, conversation_id: str, role: str, content: str, meta: dict) -> str:
        message_id = uuid.uuid4().hex
        now = time.time()
        with self._tx() as db:
            seq = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()[0]
            db.execute(
                "INSERT INTO messages VALUES (?,?,?,?,?,?,?)",
                (message_id, conversation_id, seq, role, content, json.dumps(meta), now),
            )
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE conversation_id = ?",
                (now, conversation_id),
            )
        return message_id

    def update_message(self, message_id: str, content: str, meta: dict) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE messages SET content = ?, meta = ? WHERE message_id = ?",
                (content, json.dumps(meta), message_id),
            )

    def delete_message(self, message_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM messages WHERE message_id = ?", (message_id,))

    def messages(self, conversation_id: str, limit: int | None = None, *, with_meta: bool = True) -> list[MessageRecord]:
        meta = "meta" if with_meta else "'{}'"
        sql = (
            f"SELECT message_id, role, content, {meta}, created_at FROM messages "
            "WHERE conversation_id = ? ORDER BY seq DESC"
        )
        args: tuple = (conversation_id,)
        if limit is not None:
            sql += " LIMIT ?"
            args += (limit,)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [
            MessageRecord(r[0], conversation_id, r[1], r[2], json.loads(r[3]), _iso(r[4]))
            for r in reversed(rows)
        ]

    def answer_count(self, conversation_id: str) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ? AND role = 'assistant'",
                                    (conversation_id,)).fetchone()[0]

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        with self._tx() as db:
            found = db.execute(
                "DELETE FROM conversations WHERE tenant = ? AND conversation_id = ?",
                (tenant, conversation_id),
            ).rowcount
            if found:
                for table in ("messages", "conversation_summaries", "conversation_titles", "corrections"):
                    db.execute(f"DELETE FROM {table} WHERE conversation_id = ?", (conversation_id,))
            return bool(found)

    def conversation_summary(self, conversation_id: str) -> str:
        with self._lock:
            row = self._db.execute(
                "SELECT summary FROM conversation_summaries WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
        return row[0] if row else ""

    def set_conversation_summary(self, conversation_id: str, summary: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO conversation_summaries VALUES (?,?,?)",
                       (conversation_id, summary, time.time()))

    def add_correction(self, record: CorrectionRecord) -> str:
        correction_id = record.correction_id or uuid.uuid4().hex
        with self._tx() as db:
            db.execute(
                "INSERT INTO corrections VALUES (?,?,?,?,?,?,?,?)",
                (correction_id, record.tenant, record.user_id, record.question, record.wrong_answer,
                 record.correction, record.conversation_id, time.time()),
            )
        return correction_id

    def corrections(self, tenant: str, user_id: str, limit: int = 200) -> list[CorrectionRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT correction_id, question, wrong_answer, correction, conversation_id, created_at "
                "FROM corrections WHERE tenant = ? AND user_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
                (tenant, user_id, limit),
            ).fetchall()
        return [CorrectionRecord(r[0], tenant, user_id, r[1], r[2], r[3], r[4], _iso(r[5])) for r in rows]

    def add_usage(self, tenant: str, user_id: str, month: str, messages: int, tokens: int) -> tuple[int, int]:
        with self._tx() as db:
            db.execute(
                "INSERT INTO usage VALUES (?,?,?,?,?) ON CONFLICT (tenant, user_id, month) DO UPDATE SET "
                "messages = messages + excluded.messages, tokens = tokens + excluded.tokens",
                (tenant, user_id, month, messages, tokens),
            )
            row = db.execute("SELECT messages, tokens FROM usage WHERE tenant = ? AND user_id = ? AND month = ?",
                             (tenant, user_id, month)).fetchone()
        return int(row[0]), int(row[1])

    def usage(self, tenant: str, user_id: str, month: str) -> tuple[int, int]:
        with self._lock:
            row = self._db.execute("SELECT messages, tokens FROM usage WHERE tenant = ? AND user_id = ? AND month = ?",
                                   (tenant, user_id, month)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def add_api_key(self, record: ApiKeyRecord) -> None:
        with self._tx() as db:
            db.execute(f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", _key_row(record))

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return _key_record(row) if row else None

    def api_keys(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        scope, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        with self._lock:
            rows = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys {scope} ORDER BY created_at, rowid",
                                    args).fetchall()
        return [_key_record(r) for r in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._tx() as db:
            return db.execute("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at = ''",
                              (_iso(time.time()), key_id)).rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT under the store's lock; ROLLBACK on any error."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock) -> None:
        self.db = db
        self.lock = lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.lock.release()
