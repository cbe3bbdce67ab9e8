"""Filter columns: every metadata field (plus tenant, date and doc id) dictionary-encoded into
an int32 array over chunk slots, so a filter compiles to a few vectorised comparisons.

Code -1 means the chunk has no value for the field, so it never matches a condition
on that field: filters fail closed."""
from __future__ import annotations

import numpy as np

from ragmesh.types import Chunk, SearchFilter

TENANT = "__tenant__"
DATE = "__date__"
DOC = "__doc__"
MISSING = -1


class Columns:
    def __init__(self) -> None:
        self.codes: dict[str, np.ndarray] = {}
        self.vocab: dict[str, dict[str, int]] = {}
        self.capacity = 0

    def _column(self, field: str) -> np.ndarray:
        if field not in self.codes:
            self.codes[field] = np.full(self.capacity, MISSING, dtype=np.int32)
            self.vocab[field] = {}
        return self.codes[field]

    def _code(self, field: str, value: str) -> int:
        vocab = self.vocab[field]
        code = vocab.get(value)
        if code is None:
            code = vocab[value] = len(vocab)
        return code

    def reserve(self, capacity: int) -> None:
        """Grows every column to hold `capacity` slots (amortised doubling by the caller)."""
        if capacity <= self.capacity:
            return
        for field, column in self.codes.items():
            grown = np.full(capacity, MISSING, dtype=np.int32)
            grown[: len(column)] = column
            self.codes[field] = grown
        self.capacity = capacity

    def set(self, slot: int, chunk: Chunk) -> None:
        # The chunk's own tenant, date and document come last: a metadata key named like them (from
        # a store written before such keys were refused) must not move a chunk into another tenant's view.
        values = {k: v for k, v in chunk.metadata.items() if k not in (TENANT, DATE, DOC)}
        values[TENANT] = chunk.tenant
        values[DOC] = chunk.doc_id
        if chunk.date:
            values[DATE] = chunk.date
        for field, value in values.items():
            column = self._column(field)
            column[slot] = self._code(field, str(value))

    def clear(self, slot: int) -> None:
        for column in self.codes.values():
            column[slot] = MISSING

    def _matching(self, field: str, accept) -> np.ndarray:
        """Codes of the field's values that `accept` admits."""
        return np.fromiter((c for v, c in self.vocab.get(field, {}).items() if accept(v)), dtype=np.int32)

    def _isin(self, field: str, codes: np.ndarray, size: int) -> np.ndarray:
        if field not in self.codes or len(codes) == 0:
            return np.zeros(size, dtype=bool)
        column = self.codes[field][:size]
        return column == codes[0] if len(codes) == 1 else np.isin(column, codes)

    def mask(self, f: SearchFilter, alive: np.ndarray) -> np.ndarray:
        """Slots the filter admits, among the live ones. Compiled once per request."""
        size = len(alive)
        mask = alive & self._isin(TENANT, self._matching(TENANT, lambda v: v == f.tenant), size)
        if f.start_date or f.end_date:
            field = f.date_field or DATE
            lo, hi = f.start_date or "", f.end_date or "\uffff"
            mask &= self._isin(field, self._matching(field, lambda v: lo <= v <= hi), size)
        for field, wanted in f.any_of.items():
            accepted = set(wanted)
            mask &= self._isin(field, self._matching(field, accepted.__contains__), size)
        for field, value in f.equals.items():
            mask &= self._isin(field, self._matching(field, value.__eq__), size)
        if f.doc_ids is not None:
            mask &= self._isin(DOC, self._matching(DOC, set(f.doc_ids).__contains__), size)
        return mask
