"""A SearchFilter as a Milvus boolean expression with the memory engine's meaning.

Caller values and field names never become expression text: milvus-lite has no filter
templates (`filter_params`), so each one is turned into hexadecimal (a digest or its UTF-8
hex, see rows.py) or an integer before it is written between quotes. Nothing a caller sends
can close a quote, open a bracket or add an operator. A condition on a field a chunk lacks is
false, so filters fail closed as in the memory engine.

Who reads (`SearchFilter.readers`, the caller's principals) is one more condition on the indexed
`kv` array, ANDed with the rest, so no other part of a filter widens it: a row is admitted when its
access entries name one of the principals, or when it has none at all (written before access
lists: the tenant's, so admitted to whoever reads as the tenant; every caller's principals do)."""
from __future__ import annotations

import datetime as dt

from ragmesh import access
from ragmesh.types import SearchFilter
from services.retriever.milvus.rows import RESTRICTED, date_number, digest, hexed, pair, reader

NOTHING = 'pk == ""'  # no row has an empty primary key


def _hex_literal(value: str) -> str:
    if value.strip("0123456789abcdef"):
        raise ValueError("only hexadecimal text goes between an expression's quotes")
    return f'"{value}"'


def _hex_list(values: list[str]) -> str:
    return "[" + ", ".join(_hex_literal(v) for v in values) + "]"


def _day(date: str, fallback: int) -> int:
    if not date:
        return fallback
    dt.date.fromisoformat(date)  # raises ValueError: a filter is validated before it gets here
    return date_number(date)


def expression(f: SearchFilter) -> str:
    """The whole filter; the tenant is always part of it (as in the memory engine, "" is a tenant:
    the one of chunks stored without, by in-process callers such as the benchmarks)."""
    parts = [f"tenant == {_hex_literal(hexed(f.tenant))}"]
    if f.readers is not None:
        parts.append(readable(f.readers))
    if f.start_date or f.end_date:
        if f.date_field:
            path = f"meta[{_hex_literal(hexed(f.date_field))}]"
            parts.append(f"{path} >= {_hex_literal(hexed(f.start_date))}")
            if f.end_date:
                parts.append(f"{path} <= {_hex_literal(hexed(f.end_date))}")
        else:
            parts.append(f"date >= {max(0, _day(f.start_date, 0))}")
            parts.append(f"date <= {_day(f.end_date, 99_991_231)}")
    for key, values in f.any_of.items():
        wanted = sorted({pair(key, v) for v in values})
        parts.append(f"ARRAY_CONTAINS_ANY(kv, {_hex_list(wanted)})" if wanted else NOTHING)
    for key, value in f.equals.items():
        parts.append(f"ARRAY_CONTAINS(kv, {_hex_literal(pair(key, value))})")
    if f.doc_ids is not None:
        parts.append(_doc_in(f.doc_ids) if f.doc_ids else NOTHING)
    return " and ".join(parts)


def readable(readers: frozenset[str] | None) -> str:
    """The condition that admits what `readers` may read (ragmesh.access.admits); "" (none) for
    None, the platform. An empty set reads nothing, as in ragmesh.access."""
    if readers is None:
        return ""
    either = [f"ARRAY_CONTAINS_ANY(kv, {_hex_list(sorted(reader(r) for r in readers))})"] if readers else []
    if access.TENANT in readers:
        either.append(f"not ARRAY_CONTAINS(kv, {_hex_literal(RESTRICTED)})")
    return f"({' or '.join(either)})" if either else NOTHING


def _doc_in(doc_ids: list[str]) -> str:
    return f"doc in {_hex_list(sorted({digest('doc', d) for d in doc_ids}))}"


def has_field(tenant: str, field_name: str, readers: frozenset[str] | None = None) -> str:
    """The tenant's rows that `readers` may read whose metadata has the field (every string is >=
    the empty one)."""
    parts = [f"tenant == {_hex_literal(hexed(tenant))}", readable(readers),
             f'meta[{_hex_literal(hexed(field_name))}] >= ""']
    return " and ".join(p for p in parts if p)
