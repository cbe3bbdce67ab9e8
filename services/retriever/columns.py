"""Filter columns: every metadata field (plus tenant, date and doc id) dictionary-encoded into
an int32 array over chunk slots, so a filter compiles to a few vectorised comparisons.

Code -1 means the chunk has no value for the field, so it never matches a condition
on that field: filters fail closed.

Who may read a chunk is a column too (ACCESS_KEY, its document's encoded access), always set: a
chunk without the key was written before access lists and is coded as the LEGACY value (the whole
tenant's), never as missing. Each reader token lists the access codes that hold it, so the codes a
caller's readers admit are the union of their tokens' lists: a table over codes, kept per set of
readers and extended by the codes added since (codes only grow). A search pays one gather over
the column, never a loop over a collection's many access values."""
from __future__ import annotations

import threading
from array import array

import numpy as np

from ragmesh import access
from ragmesh.access import ACCESS_KEY, Principals
from ragmesh.types import Chunk, SearchFilter

TENANT = "__tenant__"
DATE = "__date__"
DOC = "__doc__"
RESERVED = (TENANT, DATE, DOC, ACCESS_KEY)  # the engine's own columns: not metadata a caller lists
MISSING = -1
LEGACY_VALUE = access.LEGACY.encode()  # the access of a chunk written before access lists
READERS_MEMO = 256  # sets of readers whose admitted codes a partition keeps (one byte per access value each)


class Columns:
    def __init__(self) -> None:
        self.codes: dict[str, np.ndarray] = {}
        self.vocab: dict[str, dict[str, int]] = {}
        self.capacity = 0
        self._derived()

    def _derived(self) -> None:
        """State rebuilt from the vocabulary, never pickled: per reader token the access codes holding
        it (ascending), and per set of readers a table over access codes (plus a last False entry,
        which MISSING, -1, reads)."""
        self._holding: dict[str, array] = {}
        for value, code in self.vocab.get(ACCESS_KEY, {}).items():
            self._index_access(value, code)
        self._admitted: dict[Principals, np.ndarray] = {}
        self._memo_lock = threading.Lock()

    def _index_access(self, value: str, code: int) -> None:
        for token in access.tokens(value):
            self._holding.setdefault(token, array("i")).append(code)

    def __getstate__(self) -> dict:
        return {"codes": self.codes, "vocab": self.vocab, "capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._derived()

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
            if field == ACCESS_KEY:
                self._index_access(value, code)
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
        values.setdefault(ACCESS_KEY, LEGACY_VALUE)
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

    def admitted_codes(self, readers: Principals) -> np.ndarray:
        """Per access code, whether `readers` may read it (indexed by the column itself: its last
        entry, False, is what MISSING reads). Readers run side by side under the read lock, while
        the vocabulary stands still: the memo's lock only keeps its bookkeeping whole."""
        n = len(self.vocab.get(ACCESS_KEY, ()))
        table = self._admitted.get(readers)
        if table is not None and len(table) == n + 1:
            return table
        known = 0 if table is None else len(table) - 1
        grown = np.zeros(n + 1, dtype=bool)
        if known:
            grown[:known] = table[:known]
        for token in readers:
            holding = self._holding.get(token)
            if holding is not None:
                codes = np.array(holding, dtype=np.int32)  # a copy: the array grows under the next write
                grown[codes[np.searchsorted(codes, known):]] = True
        with self._memo_lock:
            if readers not in self._admitted and len(self._admitted) >= READERS_MEMO:
                del self._admitted[next(iter(self._admitted))]  # the oldest set of readers
            self._admitted[readers] = grown
        return grown

    def readable(self, readers: Principals | None, size: int) -> np.ndarray:
        """Slots (live or not) `readers` may read; None reads all."""
        if readers is None:
            return np.ones(size, dtype=bool)
        if ACCESS_KEY not in self.codes:
            return np.zeros(size, dtype=bool)
        return self.admitted_codes(readers)[self.codes[ACCESS_KEY][:size]]

    def values(self, field: str, mask: np.ndarray) -> set[str]:
        """Distinct values of a metadata field over the slots of `mask` (none of the engine's own columns)."""
        if field in RESERVED or field not in self.codes:
            return set()
        codes = np.unique(self.codes[field][: len(mask)][mask])
        names = list(self.vocab[field])
        return {names[c] for c in codes.tolist() if c != MISSING}

    def mask(self, f: SearchFilter, alive: np.ndarray) -> np.ndarray:
        """Slots the filter admits, among the live ones. Compiled once per request."""
        size = len(alive)
        mask = alive & self._isin(TENANT, self._matching(TENANT, lambda v: v == f.tenant), size)
        if f.readers is not None:
            mask &= self.readable(f.readers, size)
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
