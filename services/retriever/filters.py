"""Checks on a search filter before it is compiled (see columns.Columns.mask)."""
from __future__ import annotations

from ragmesh.errors import InvalidArgument
from ragmesh.types import SearchFilter
from ragmesh.validation import (
    MAX_FILTER_FIELDS, MAX_FILTER_VALUE_CHARS, MAX_FILTER_VALUES, MAX_ID_CHARS, check_date_range, check_field_name,
    check_text, shown,
)


def validate(f: SearchFilter, prefix: str = "filter.") -> None:
    """Dates as YYYY-MM-DD in order; at most 64 fields, each named in 1-256 characters; at most
    1,000 values per `in` field, each value at most 1,000 characters; at most 1,000 doc_ids, each
    a document id (1-512 characters)."""
    check_date_range(f.start_date, f.end_date, prefix=prefix)
    if f.date_field:
        check_field_name(f"{prefix}date_field", f.date_field)
    fields = len(f.any_of) + len(f.equals)
    if fields > MAX_FILTER_FIELDS:
        raise InvalidArgument(f"{prefix}in", f"the filter names {fields:,} fields (in and equals together); "
                                             f"the limit is {MAX_FILTER_FIELDS}")
    for name, values in f.any_of.items():
        check_field_name(f"{prefix}in key {shown(name)}", name)
        if len(values) > MAX_FILTER_VALUES:
            raise InvalidArgument(f"{prefix}in[{name!r}]",
                                  f"has {len(values):,} values; the limit is {MAX_FILTER_VALUES:,}")
        for i, value in enumerate(values):
            check_text(f"{prefix}in[{name!r}][{i}]", value, MAX_FILTER_VALUE_CHARS)
    for name, value in f.equals.items():
        check_field_name(f"{prefix}equals key {shown(name)}", name)
        check_text(f"{prefix}equals[{name!r}]", value, MAX_FILTER_VALUE_CHARS)
    if f.doc_ids is not None:
        if len(f.doc_ids) > MAX_FILTER_VALUES:
            raise InvalidArgument(f"{prefix}doc_ids", f"has {len(f.doc_ids):,} values; the limit is {MAX_FILTER_VALUES:,}")
        for i, doc_id in enumerate(f.doc_ids):
            check_text(f"{prefix}doc_ids[{i}]", doc_id, MAX_ID_CHARS, required=True)
