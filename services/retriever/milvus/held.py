"""What Milvus holds of each document: the primary keys of its rows.

A replaced document then deletes exactly the keys its old version had and the new one lacks, by
primary key, and a document seen for the first time deletes nothing. Searching for them instead
(a delete or query by expression) is what milvus-lite answers by scanning every row it holds
(its Delete servicer runs a query for any expression but `pk in [...]`), and what a Milvus server
turns into a query followed by a delete by key: a cost that grows with the collection, per write.

One Milvus collection per ragmesh collection (`<prefix><escaped name>_m`: '_m' is no escape, so it
never reads as a tenant's collection), every tenant's documents in it, keyed by a digest of tenant
and doc id (no caller text). A document's keys are 32 hex digits each, concatenated in one VARCHAR;
past PER_ROW of them they go on in further rows (`<key>.1`, `<key>.2`, ...), the first row counting
them all.

The invariant that makes a crash harmless: an entry holds at least the keys of every row of its
document in Milvus. apply() widens it (old | new) before it writes the rows, and narrows it to the
new keys only after the old rows are deleted; a crash anywhere between leaves an entry that the
next write or replay of the document reads and cleans up after.
"""
from __future__ import annotations

from pymilvus import DataType, MilvusClient

from services.retriever.backend import DocKey
from services.retriever.milvus import rows
from services.retriever.milvus.connection import Connection

SUFFIX = "_m"
KEY_CHARS = 32
PER_ROW = rows.MAX_VARCHAR // KEY_CHARS  # 2,047 keys a row
WRITE_ROWS = 256  # entries an upsert (a full one is 64 KB: 16 MB at most, below gRPC's message limit)
CALL_KEYS = 4096  # keys one point read or delete by key names
Keys = dict[DocKey, list[str]]


def name(prefix: str, collection: str) -> str:
    return f"{prefix}{rows.escaped(collection)}{SUFFIX}"


def _key(doc: DocKey, part: int = 0) -> str:
    base = rows.digest("held", *doc)
    return f"{base}.{part}" if part else base


def _parts(count: int) -> int:
    return -(-count // PER_ROW)


def create(milvus: Connection, table: str) -> None:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=48)
    schema.add_field("keys", DataType.VARCHAR, max_length=rows.MAX_VARCHAR)
    schema.add_field("count", DataType.INT64)
    schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs a vector field in every collection
    params = milvus.client.prepare_index_params()
    params.add_index("unused", index_type="FLAT", metric_type="L2")
    milvus.create_table(table, schema, params, "Strong")


def read(milvus: Connection, table: str, docs: list[DocKey]) -> Keys:
    """The keys Milvus may hold of each document (documents it holds nothing of are left out):
    one point read for all of them, one more for the few past PER_ROW keys."""
    if not docs:
        return {}
    by_key = {_key(doc): doc for doc in docs}
    first = milvus.call(milvus.client.get, table, ids=list(by_key), output_fields=["key", "keys", "count"])
    parts = {by_key[row["key"]]: _parts(int(row["count"])) for row in first}
    more = {_key(doc, p): (doc, p) for doc, n in parts.items() for p in range(1, n)}
    texts = {(by_key[row["key"]], 0): row["keys"] for row in first}
    for start in range(0, len(more), CALL_KEYS):
        ids = list(more)[start:start + CALL_KEYS]
        texts |= {more[row["key"]]: row["keys"]
                  for row in milvus.call(milvus.client.get, table, ids=ids, output_fields=["key", "keys"])}
    out: Keys = {}
    for doc, n in parts.items():
        text = "".join(texts[doc, p] for p in range(n))
        out[doc] = [text[i:i + KEY_CHARS] for i in range(0, len(text), KEY_CHARS)]
    return out


def write(milvus: Connection, table: str, entries: Keys, before: Keys) -> None:
    """Sets each document's keys (none: its entry goes); `before` is what read() gave, so rows
    past the new last one are deleted by key."""
    width = PER_ROW * KEY_CHARS
    upserts: list[dict] = []
    surplus: list[str] = []
    for doc, keys in entries.items():
        text = "".join(keys)
        n = _parts(len(keys))
        upserts += [{"key": _key(doc, p), "keys": text[p * width:(p + 1) * width], "count": len(keys),
                     "unused": [0.0, 0.0]} for p in range(n)]
        surplus += [_key(doc, p) for p in range(n, _parts(len(before.get(doc, []))))]
    for start in range(0, len(upserts), WRITE_ROWS):
        milvus.call(milvus.client.upsert, table, upserts[start:start + WRITE_ROWS])
    for start in range(0, len(surplus), CALL_KEYS):
        milvus.call(milvus.client.delete, table, ids=surplus[start:start + CALL_KEYS])
