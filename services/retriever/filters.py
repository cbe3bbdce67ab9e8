"""Checks on a search filter before it is compiled (see columns.Columns.mask)."""
from __future__ import annotations

from ragmesh.types import SearchFilter
from ragmesh.validation import check_date_range


def validate(f: SearchFilter) -> None:
    check_date_range(f.start_date, f.end_date, prefix="filter.")
