import numpy as np

from ragmesh.types import Chunk, SearchFilter
from services.retriever.columns import Columns

CHUNKS = [
    Chunk("a", "d1", "c", "x", {"fund_name": "Kestrel", "report_date": "2024-03-31"}, "2024-03-14", ""),
    Chunk("b", "d2", "c", "x", {"fund_name": "Northwind"}, "2025-01-22", ""),
    Chunk("c", "d3", "c", "x", {"fund_name": "Kestrel"}, "", ""),
    Chunk("d", "d4", "c", "x", {"fund_name": "Kestrel"}, "2024-06-01", "acme"),
]


def mask(f: SearchFilter, alive: list[bool] | None = None) -> list[bool]:
    columns = Columns()
    columns.reserve(8)
    for slot, chunk in enumerate(CHUNKS):
        columns.set(slot, chunk)
    return columns.mask(f, np.array(alive or [True] * len(CHUNKS))).tolist()


def test_tenant_scope_is_always_applied() -> None:
    assert mask(SearchFilter()) == [True, True, True, False]
    assert mask(SearchFilter(tenant="acme")) == [False, False, False, True]


def test_date_range_is_inclusive_and_excludes_undated_chunks() -> None:
    assert mask(SearchFilter(start_date="2024-03-14", end_date="2025-01-22")) == [True, True, False, False]
    assert mask(SearchFilter(start_date="2025-01-01")) == [False, True, False, False]


def test_date_field_reads_metadata() -> None:
    f = SearchFilter(start_date="2024-03-31", end_date="2024-03-31", date_field="report_date")
    assert mask(f) == [True, False, False, False]


def test_in_and_equality_filters() -> None:
    assert mask(SearchFilter(any_of={"fund_name": ["Kestrel"]})) == [True, False, True, False]
    assert mask(SearchFilter(equals={"fund_name": "Northwind"})) == [False, True, False, False]


def test_doc_ids_admit_those_documents_of_the_tenant_and_an_empty_list_none() -> None:
    assert mask(SearchFilter(doc_ids=["d1", "d3", "d4"])) == [True, False, True, False]
    assert mask(SearchFilter(doc_ids=["d3"], any_of={"fund_name": ["Kestrel"]})) == [False, False, True, False]
    assert mask(SearchFilter(doc_ids=[])) == [False] * 4
    assert mask(SearchFilter(doc_ids=None)) == mask(SearchFilter())


def test_a_metadata_key_named_like_the_doc_column_cannot_move_a_chunk() -> None:
    columns = Columns()
    columns.reserve(1)
    columns.set(0, Chunk("a", "d1", "c", "x", {"__doc__": "d9"}, "", ""))
    assert columns.mask(SearchFilter(doc_ids=["d9"]), np.array([True])).tolist() == [False]


def test_a_filter_that_matches_nothing_fails_closed() -> None:
    assert mask(SearchFilter(any_of={"fund_name": []})) == [False] * 4
    assert mask(SearchFilter(any_of={"unknown_field": ["x"]})) == [False] * 4
    assert mask(SearchFilter(start_date="2030-01-01")) == [False] * 4


def test_dead_slots_never_match() -> None:
    assert mask(SearchFilter(any_of={"fund_name": ["Kestrel"]}), [False, True, True, True]) == [False, False, True, False]


def test_cleared_slots_lose_their_values() -> None:
    columns = Columns()
    columns.reserve(4)
    for slot, chunk in enumerate(CHUNKS):
        columns.set(slot, chunk)
    columns.clear(0)
    assert columns.mask(SearchFilter(), np.ones(4, bool)).tolist() == [False, True, True, False]
