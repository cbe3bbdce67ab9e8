"""Checks shared by the gateway and the retriever, raising InvalidArgument that names the field."""
from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ragmesh.errors import InvalidArgument
from ragmesh.types import MEMORY_COLLECTION

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_NAME = re.compile(COLLECTION_NAME)
PRINCIPAL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"  # a tenant, user or group name
_PRINCIPAL = re.compile(PRINCIPAL_NAME)
# Python's str.isspace() characters, as a regex class's contents: "blank" is what str.strip() empties,
# which ECMA's \s is not quite. A text matching NOT_BLANK has a character that is not one of them.
WHITESPACE = r"\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{WHITESPACE}]"
# What a pattern means, for the error that names a field whose value does not match it.
PATTERN_MEANINGS: dict[str, str] = {
    COLLECTION_NAME: "1-64 letters, digits, '_', '-' or '.'",
    NOT_BLANK: "not blank",
    PRINCIPAL_NAME: "1-128 letters, digits or . _ @ -, starting with a letter or digit",
}
MAX_TOP_K = 200


def shown(value: str, limit: int = 40) -> str:
    """A value quoted for an error message, cut short: a megabyte of bad input is not echoed back."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value):,} characters)"


def check_date(field: str, value: str) -> dt.date | None:
    """None for an empty value; a date for YYYY-MM-DD; InvalidArgument otherwise."""
    if not value:
        return None
    if not _DATE.match(value):
        raise InvalidArgument(field, f"must be a date as YYYY-MM-DD, got {shown(value)}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(field, f"is not a calendar date: {value!r}") from None


def check_date_range(start: str, end: str, prefix: str = "") -> None:
    s = check_date(f"{prefix}start_date", start)
    e = check_date(f"{prefix}end_date", end)
    if s and e and e < s:
        raise InvalidArgument(f"{prefix}end_date", f"{end} is before start_date {start}")


def check_top_k(value: int | None, field: str = "top_k", limit: int = MAX_TOP_K) -> None:
    if value is not None and not 1 <= value <= limit:
        raise InvalidArgument(field, f"must be between 1 and {limit}, got {value}")


def check_name(field: str, value: str) -> None:
    """Collection names: letters, digits, '_', '-', '.', up to 64 characters."""
    if not _NAME.match(value):
        raise InvalidArgument(field, f"must be 1-64 letters, digits, '_', '-' or '.', got {shown(value)}")


def check_writable(field: str, collection: str) -> None:
    """A collection a client may ingest into: a valid name, and not conversation memory, which only
    Ask writes (the gateway writes it with the service credential, which the retriever cannot tell
    from the gateway forwarding a client's documents)."""
    check_name(field, collection)
    if collection == MEMORY_COLLECTION:
        raise InvalidArgument(field, f"{collection!r} is the conversation memory: only Ask writes it")


# Bounds on what a caller may send the retriever: every string, list and number is
# checked before anything runs, so a bad input is an InvalidArgument naming the field.
MAX_QUERY_CHARS = 4_000          # a search's query, and each of its variants
MAX_VARIANTS = 8                 # distinct query variants per search
MAX_COLLECTIONS = 32             # distinct collection names per search / field-values call
MAX_FILTER_FIELDS = 64           # fields named by a filter's `in` and `equals` together
MAX_FILTER_VALUES = 1_000        # values of one `in` field
MAX_FILTER_VALUE_CHARS = 1_000   # each filter value
MAX_FIELD_CHARS = 256            # a metadata key or a filter's field name
MAX_METADATA_KEYS = 64           # metadata a client sends with a document
MAX_CHUNK_METADATA_KEYS = 160    # a chunk's: the client's 64, a JSON record's 64, the pipeline's own
MAX_METADATA_VALUE_CHARS = 4_000
# All of a document's metadata (keys and values, UTF-8): what every search hit, context, citation and cached
# scope carries of it. 64 keys of 4,000 characters would be 256 KB a chunk, 12.8 MB for a top_k of 50.
MAX_METADATA_BYTES = 16_384
MAX_CHUNK_METADATA_BYTES = 32_768  # a chunk's (Upsert): the client's and what the pipeline adds
MAX_ID_CHARS = 512               # doc_id, conversation_id
MAX_CHUNK_ID_CHARS = 1_024       # chunk_id, parent_chunk_id ("tenant/collection/doc_id#n")
MAX_TITLE_CHARS = 1_000
MAX_FILENAME_CHARS = 255
MAX_MIME_TYPE_CHARS = 255
MAX_DOC_IDS = 1_000              # doc_ids of one Delete
RESERVED_PREFIX = "__"           # the retriever's own filter columns (__tenant__, __date__, __doc__)


def valid_name(value: object) -> bool:
    """Whether `value` is one tenant, user or group name (a string, not a list, of the allowed characters)."""
    return isinstance(value, str) and _PRINCIPAL.fullmatch(value) is not None  # fullmatch: "$" would let "\n" in


def check_text(field: str, value: str, max_chars: int, required: bool = False) -> str:
    """A string a client sent: at most max_chars, valid Unicode (a lone surrogate cannot be stored
    or sent on), and not blank when required."""
    if len(value) > max_chars:
        raise InvalidArgument(field, f"is {len(value):,} characters; the limit is {max_chars:,}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(field, f"is not valid Unicode (character {exc.start}: a lone surrogate)") from None
    if required and not value.strip():
        raise InvalidArgument(field, "must not be empty")
    return value


def check_list(field: str, values: list[str], max_items: int, max_chars: int) -> list[str]:
    """Each value checked; repeats dropped (order kept); at most max_items distinct values."""
    unique = list(dict.fromkeys(values))
    if len(unique) > max_items:
        raise InvalidArgument(field, f"has {len(unique):,} distinct values; the limit is {max_items:,}")
    for i, v in enumerate(unique):
        check_text(f"{field}[{i}]", v, max_chars)
    return unique


def check_names(field: str, names: list[str], max_items: int = MAX_COLLECTIONS) -> list[str]:
    """Collection names: each checked with check_name, repeats dropped, at most max_items."""
    unique = list(dict.fromkeys(names))
    if len(unique) > max_items:
        raise InvalidArgument(field, f"has {len(unique):,} distinct names; the limit is {max_items:,}")
    for i, name in enumerate(unique):
        check_name(f"{field}[{i}]", name)
    return unique


def check_number(field: str, value: float | int | None, low: float, high: float) -> None:
    """A finite number in [low, high] (None: not given)."""
    if value is None:
        return
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidArgument(field, f"must be a number from {low:g} to {high:g}, got {value!r}")


UNIT_TOLERANCE = 1e-3  # how far a given vector's length may be from 1 (float32 rounding, not another scale)


def check_unit_vector(field: str, vector: np.ndarray, dimensions: int) -> None:
    """A vector as the embedder gives them: `dimensions` finite numbers of length 1 (else a vector of
    another model or scale would be searched beside the embedder's as if it were one of them)."""
    if vector.ndim != 1 or len(vector) != dimensions:
        raise InvalidArgument(field, f"has {vector.size:,} dimensions; the index has {dimensions}")
    if not np.isfinite(vector).all():
        raise InvalidArgument(field, "must hold finite numbers (no NaN or infinity)")
    if abs(float(np.linalg.norm(vector)) - 1.0) > UNIT_TOLERANCE:
        raise InvalidArgument(field, "must have length 1, as the embedder's vectors have")


MAX_PAGE = 200                   # items of one page of a list
MAX_OFFSET = 1_000_000           # items a page may skip


def check_page(limit: int, offset: int) -> None:
    """A page of a list: 1..MAX_PAGE items, after skipping 0..MAX_OFFSET."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument("limit", f"must be 1..{MAX_PAGE}, got {limit}")
    if not 0 <= offset <= MAX_OFFSET:
        raise InvalidArgument("offset", f"must be 0..{MAX_OFFSET:,}, got {offset}")


def check_field_name(field: str, value: str) -> str:
    """A metadata key or a filter's field name: 1 to MAX_FIELD_CHARS characters."""
    return check_text(field, value, MAX_FIELD_CHARS, required=True)


def check_metadata(field: str, metadata: dict[str, str], max_keys: int = MAX_METADATA_KEYS,
                   max_bytes: int = MAX_METADATA_BYTES) -> None:
    """Metadata to be stored: at most max_keys keys of 1-256 characters (not starting with "__",
    which names the retriever's own columns), values of at most 4,000 characters, max_bytes in all."""
    if len(metadata) > max_keys:
        raise InvalidArgument(field, f"has {len(metadata):,} keys; the limit is {max_keys:,}")
    for key, value in metadata.items():
        check_field_name(f"{field} key {shown(key)}", key)
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument(f"{field}[{key!r}]", f"keys starting with {RESERVED_PREFIX!r} are reserved")
        check_text(f"{field}[{key!r}]", value, MAX_METADATA_VALUE_CHARS)
    size = sum(len(key.encode()) + len(value.encode()) for key, value in metadata.items())
    if size > max_bytes:
        raise InvalidArgument(field, f"is {size:,} bytes (keys and values, UTF-8); the limit is {max_bytes:,}")


def field_path(loc: Sequence[str | int]) -> str:
    """A pydantic error location as the gateway's checks name a field: `documents[0].title`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "body"


def error_message(error: Mapping[str, Any]) -> str:
    """One pydantic error in the words of the checks above (limits with their figures, patterns with
    what they mean), else pydantic's own."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "string_too_long":
        return f"is {len(value):,} characters; the limit is {ctx['max_length']:,}"
    if kind == "too_long":
        return f"has {len(value):,} items; the limit is {ctx['max_length']:,}"
    if kind == "string_pattern_mismatch":
        return f"must be {PATTERN_MEANINGS.get(ctx['pattern'], 'of the pattern ' + ctx['pattern'])}, got {shown(value)}"
    if kind == "string_unicode":
        return "is not valid Unicode (a lone surrogate)"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}, got {shown(value) if isinstance(value, str) else repr(value)[:40]}"
    if kind == "missing":
        return "is required"
    return error["msg"]


def invalid_argument(errors: Sequence[Mapping[str, Any]], skip: int = 0) -> InvalidArgument:
    """The first of a pydantic validation's errors as an InvalidArgument naming its field (`skip`
    drops leading location parts, such as FastAPI's "body")."""
    first = errors[0] if errors else {"type": "", "loc": (), "msg": "invalid request"}
    return InvalidArgument(field_path(first["loc"][skip:]), error_message(first))
