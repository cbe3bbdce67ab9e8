"""Checks shared by the gateway and the retriever, raising InvalidArgument that names the field."""
from __future__ import annotations

import datetime as dt
import re

from ragmesh.errors import InvalidArgument

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_date(field: str, value: str) -> dt.date | None:
    """None for an empty value; a date for YYYY-MM-DD; InvalidArgument otherwise."""
    if not value:
        return None
    if not _DATE.match(value):
        raise InvalidArgument(field, f"must be a date as YYYY-MM-DD, got {value!r}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(field, f"is not a calendar date: {value!r}") from None


def check_date_range(start: str, end: str, prefix: str = "") -> None:
    s = check_date(f"{prefix}start_date", start)
    e = check_date(f"{prefix}end_date", end)
    if s and e and e < s:
        raise InvalidArgument(f"{prefix}end_date", f"{end} is before start_date {start}")


def check_top_k(value: int | None, field: str = "top_k", limit: int = 200) -> None:
    if value is not None and not 1 <= value <= limit:
        raise InvalidArgument(field, f"must be between 1 and {limit}, got {value}")


def check_name(field: str, value: str) -> None:
    """Collection names: letters, digits, '_', '-', '.', up to 64 characters."""
    if not _NAME.match(value):
        raise InvalidArgument(field, f"must be 1-64 letters, digits, '_', '-' or '.', got {value!r}")
