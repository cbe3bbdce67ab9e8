"""How a chunk is laid out in a Milvus collection, and back.

Every value that came from a caller and may later be matched by a filter is stored encoded,
so a filter expression only ever carries hexadecimal text between its quotes:
- `pk`, `doc`, `kv` hold 128-bit digests (tenant, doc id and chunk id; doc id; each metadata key
  and value pair, led by the row's access entries: RESTRICTED and one per reader token, see
  `access_entries`), matched for equality; a row's key names its document too, so the keys a
  document's version had (held.py) are its own, even when a chunk id moves to another document;
- `tenant` (the partition key) and `meta` (metadata as {hex(key): hex(value)}) hold UTF-8 hex,
  which keeps the code-point order of the text, so a date range on a metadata field compares
  exactly as the memory engine's string comparison does;
- `date` is the chunk's date as the integer YYYYMMDD (-1 for none), sortable and range-indexed;
- `written` is when the row's version of its document was written (ns): while a replaced
  document's old rows are still there, a search keeps only the newest version it found.
The plain values (ids, text, the original date) are stored beside them to rebuild the Chunk.
`terms` holds the chunk's searched text (searched.py: its document's title before it) as the
collection's own analyzer tokenizes it (the same tokens the memory engine indexes), and Milvus's
BM25 function turns it into the sparse vector.

Each Milvus collection holds one tenant's chunks of one ragmesh collection (see backend.py for
why): its name is the prefix, the ragmesh name escaped, `_t` and a digest of the tenant, so no
tenant text reaches Milvus as a name either.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re

import numpy as np

from pymilvus import DataType, Function, FunctionType, MilvusClient

from ragmesh import access
from ragmesh.types import Chunk

MAX_VARCHAR = 65_535  # bytes, Milvus's largest VARCHAR
MAX_PAIRS = 256  # metadata pairs a chunk may carry (the retriever accepts 160)
NO_DATE = -1
# Fields read back to rebuild a chunk (the dense vector is added when similarities are needed).
CHUNK_FIELDS = ["pk", "tenant", "chunk_id", "doc_id", "parent", "chunk_index", "date_text", "meta", "text",
                "text_chars", "written"]


def hexed(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").hex()


def unhexed(value: str) -> str:
    return bytes.fromhex(value).decode("utf-8", "surrogatepass")


def digest(*parts: str) -> str:
    """128 bits of SHA-256 over the parts (NUL-separated), as 32 hex digits."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def pair(key: str, value: str) -> str:
    return digest("kv", key, value)


def reader(token: str) -> str:
    """The `kv` entry saying that a reader token (ragmesh.access: `tenant`, `user:<u>`, `group:<g>`)
    may read the row. Its own digest kind, not pair(ACCESS_KEY, token): a caller's metadata filter
    on ACCESS_KEY matches the whole value, as in the memory engine, never a single token."""
    return digest("access", token)


# The `kv` entry of a row with an access list; a row without it (its chunk has no ACCESS_KEY, or
# was indexed before access lists, when none had one) is the whole tenant's (LEGACY).
RESTRICTED = digest("access")


def access_entries(metadata: dict[str, str]) -> list[str]:
    """RESTRICTED and each reader token's entry, for a chunk with an access list; none without."""
    value = metadata.get(access.ACCESS_KEY)
    return [] if value is None else [RESTRICTED, *sorted(reader(t) for t in access.tokens(value))]


def date_number(date: str) -> int:
    """YYYY-MM-DD as YYYYMMDD; anything else (or nothing) is NO_DATE, which no date range admits."""
    try:
        day = dt.date.fromisoformat(date)
    except ValueError:
        return NO_DATE
    return day.year * 10_000 + day.month * 100 + day.day if len(date) == 10 else NO_DATE


def _clip(text: str, limit: int = MAX_VARCHAR) -> str:
    """The longest prefix of whole characters that fits `limit` UTF-8 bytes."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def pk(chunk: Chunk) -> str:
    """A row's primary key: its tenant, document and chunk id."""
    return digest("chunk", chunk.tenant, chunk.doc_id, chunk.chunk_id)


def to_row(chunk: Chunk, vector: np.ndarray, terms: list[str], written: int) -> dict:
    return {
        "pk": pk(chunk),
        "tenant": hexed(chunk.tenant),
        "doc": digest("doc", chunk.doc_id),
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "parent": chunk.parent_chunk_id,
        "chunk_index": chunk.chunk_index,
        "date": date_number(chunk.date),
        "date_text": _clip(chunk.date, 1024),
        # Access first, never cut: ragmesh.access's limits leave room for the retriever's 160 metadata pairs.
        "kv": (access_entries(chunk.metadata) + [pair(k, v) for k, v in chunk.metadata.items()])[:MAX_PAIRS],
        "meta": {hexed(k): hexed(v) for k, v in chunk.metadata.items()},
        "text": _clip(chunk.text),
        "text_chars": len(chunk.text),
        # BM25 sees the first 64 KB of a chunk's terms (chunks are 400-800 characters by default).
        "terms": _clip(" ".join(terms)),
        "dense": np.asarray(vector, dtype=np.float32).tolist(),
        "written": written,
    }


def size(row: dict) -> int:
    """About the bytes a row takes on the wire (its long parts: texts, terms, vector, metadata)."""
    return (len(row["text"]) + len(row["terms"]) + len(row["chunk_id"]) + len(row["doc_id"]) + 4 * len(row["dense"])
            + sum(len(k) + len(v) for k, v in row["meta"].items()) + 34 * len(row["kv"]) + 256)


def to_chunk(row: dict, collection: str) -> Chunk:
    """The chunk a row holds; its text is cut short when it passed 64 KB (row['text_chars'] says)."""
    return Chunk(
        chunk_id=row["chunk_id"], doc_id=row["doc_id"], collection=collection, text=row["text"],
        metadata={unhexed(k): unhexed(v) for k, v in (row["meta"] or {}).items()}, date=row["date_text"],
        tenant=unhexed(row["tenant"]), parent_chunk_id=row["parent"], chunk_index=int(row["chunk_index"]),
    )


def schema(dimensions: int):
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=32)
    s.add_field("tenant", DataType.VARCHAR, max_length=1024)
    s.add_field("doc", DataType.VARCHAR, max_length=32)
    s.add_field("chunk_id", DataType.VARCHAR, max_length=4096)
    s.add_field("doc_id", DataType.VARCHAR, max_length=4096)
    s.add_field("parent", DataType.VARCHAR, max_length=4096)
    s.add_field("chunk_index", DataType.INT64)
    s.add_field("date", DataType.INT64)
    s.add_field("date_text", DataType.VARCHAR, max_length=1024)
    s.add_field("kv", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=MAX_PAIRS, max_length=32)
    s.add_field("meta", DataType.JSON)
    s.add_field("text", DataType.VARCHAR, max_length=MAX_VARCHAR)
    s.add_field("text_chars", DataType.INT64)
    # The terms are ours, space-separated [a-z0-9]+ tokens: the standard tokenizer splits them as they are.
    s.add_field("terms", DataType.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True,
                analyzer_params={"tokenizer": "standard"})
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_field("dense", DataType.FLOAT_VECTOR, dim=dimensions)
    s.add_field("written", DataType.INT64)
    s.add_function(Function(name="terms_bm25", function_type=FunctionType.BM25,
                            input_field_names=["terms"], output_field_names=["sparse"]))
    return s


# -- collection names: prefix + the ragmesh name with every character but [A-Za-z0-9] as _xx, then
# `_t` + a digest of the tenant ('_t' is no escape, so the split is unambiguous). A name without
# the tenant part is a collection of the layout before per-tenant collections, shared by tenants.
_ESCAPE = re.compile(r"[^A-Za-z0-9]")
_ENCODED = r"(?:[A-Za-z0-9]|_[0-9a-f]{2})+"
_TABLE = re.compile(rf"(?P<name>{_ENCODED})(?:_t(?P<tenant>[0-9a-f]{{32}}))?")
SHARED = ""  # tenant key of a collection in the shared layout (no digest is empty)
# Milvus's longest collection name (proxy.maxNameLength) less the longest a ragmesh name (64
# characters, the first one plain) and the tenant part take.
MAX_PREFIX = 255 - (1 + 63 * 3) - 34


def tenant_key(tenant: str) -> str:
    return digest("tenant", tenant)


def escaped(name: str) -> str:
    return _ESCAPE.sub(lambda m: f'_{ord(m.group()):02x}', name)


def milvus_name(prefix: str, name: str, tenant: str) -> str:
    """The Milvus collection holding the tenant's chunks of the ragmesh collection `name`."""
    return f"{prefix}{escaped(name)}_t{tenant_key(tenant)}"


def parse(prefix: str, milvus: str) -> tuple[str, str] | None:
    """(ragmesh collection, tenant key) of a Milvus collection of ours (SHARED for one in the
    shared layout); None for one that is not ours."""
    encoded = milvus.removeprefix(prefix)
    found = _TABLE.fullmatch(encoded)
    if encoded == milvus and prefix or not found:
        return None
    name = re.sub(r"_([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), found["name"])
    return name, found["tenant"] or SHARED
