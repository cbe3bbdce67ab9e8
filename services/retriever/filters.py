"""A SearchFilter compiled once per request into a boolean mask over a collection's
chunk positions; dense and sparse search both take the same mask, so both sides
filter identically, and a filter that matches nothing yields an all-False mask."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragmesh.types import Chunk, SearchFilter
from ragmesh.validation import check_date_range


def validate(f: SearchFilter) -> None:
    check_date_range(f.start_date, f.end_date, prefix="filter.")


def compile_mask(f: SearchFilter, chunks: Sequence[Chunk], tenants: np.ndarray, dates: np.ndarray) -> np.ndarray:
    """True where the chunk passes. `tenants` and `dates` are the collection's columns."""
    mask = tenants == f.tenant  # the tenant scope is always applied
    if f.start_date or f.end_date:
        column = dates if not f.date_field else np.array(
            [c.metadata.get(f.date_field, "") for c in chunks], dtype=object
        )
        present = column != ""
        mask &= present
        if f.start_date:
            mask &= present & (column >= f.start_date)
        if f.end_date:
            mask &= present & (column <= f.end_date)
    for field, wanted in f.any_of.items():
        accepted = set(wanted)
        mask &= np.fromiter((c.metadata.get(field) in accepted for c in chunks), bool, len(chunks))
    for field, value in f.equals.items():
        mask &= np.fromiter((c.metadata.get(field) == value for c in chunks), bool, len(chunks))
    return mask
