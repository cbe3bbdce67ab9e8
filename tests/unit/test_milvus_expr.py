"""Milvus filter expressions: no caller text ever becomes expression text, whatever it holds;
encoded values keep the order and identity the memory engine compares them by."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmesh import access
from ragmesh.access import Access
from ragmesh.types import Chunk, SearchFilter
from services.retriever.milvus import expr, rows

# Any text a caller may send (lone surrogates are refused before a filter gets here).
text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)
HEX = re.compile(r'"[0-9a-f]*"')


def shape(expression: str) -> str:
    """The expression with every quoted literal blanked and every number as N."""
    return re.sub(r"\b\d+\b", "N", HEX.sub('""', expression))


def plain(f: SearchFilter) -> SearchFilter:
    """The same filter with harmless names and values in every place."""
    return SearchFilter(
        tenant="t", start_date=f.start_date, end_date=f.end_date, date_field="d" if f.date_field else "",
        any_of={f"k{i}": [f"v{j}" for j in range(len(set(vs)))] for i, vs in enumerate(f.any_of.values())},
        equals={f"e{i}": "v" for i, _ in enumerate(f.equals)},
        doc_ids=None if f.doc_ids is None else [f"d{i}" for i in range(len(set(f.doc_ids)))],
        readers=None if f.readers is None else frozenset(
            [f"user:r{i}" for i in range(len(f.readers - {access.TENANT}))] + list(f.readers & {access.TENANT})),
    )


@settings(max_examples=200, deadline=None)
@given(tenant=text, date_field=text, keys=st.lists(text, max_size=3, unique=True), values=st.lists(text, max_size=3),
       equals=st.dictionaries(text, text, max_size=3), dated=st.booleans(),
       doc_ids=st.none() | st.lists(text, max_size=3),
       readers=st.none() | st.frozensets(text | st.just(access.TENANT), max_size=4))
def test_caller_text_only_ever_appears_as_hex(tenant, date_field, keys, values, equals, dated, doc_ids,
                                              readers) -> None:
    f = SearchFilter(tenant=tenant, start_date="2024-01-01" if dated else "", end_date="2024-12-31" if dated else "",
                     date_field=date_field if dated else "", any_of={k: values for k in keys}, equals=equals,
                     doc_ids=doc_ids, readers=readers)
    built = expr.expression(f)
    # Outside quotes only the fixed vocabulary; inside them only hex digits.
    outside = HEX.sub("", built)
    assert re.fullmatch(r'[A-Za-z_\[\]()=<>, 0-9]*', outside), built
    assert '"' not in outside
    assert shape(built) == shape(expr.expression(plain(f)))


@pytest.mark.parametrize("hostile", ['" or 1==1 or "', "\\", "'", "] or [", '"]) or pk != "" or ([',
                                     "\u00e9\U0001f600", "a\nb"])
def test_hostile_text_in_every_place(hostile: str) -> None:
    """Reader names are validated before they become principals; the expression holds their digests all the same."""
    f = SearchFilter(tenant=hostile, start_date="2024-01-01", date_field=hostile, any_of={hostile: [hostile]},
                     equals={hostile: hostile}, doc_ids=[hostile], readers=frozenset((hostile, "user:" + hostile)))
    built = expr.expression(f)
    assert hostile not in built and "1==1" not in built and 'pk != ""' not in built
    assert shape(built) == shape(expr.expression(replace(f, readers=frozenset(("user:a", "user:b")))))
    assert expr.has_field(hostile, hostile).count('"') == 6
    assert expr.has_field(hostile, hostile, f.readers).count('"') == 10


def test_readers_are_one_condition_anded_with_the_rest() -> None:
    """None: the platform, no condition; else an ANDed group matching the readers' tokens, and
    rows without an access list only for those who read as the tenant; no tokens: nothing."""
    assert "kv" not in expr.expression(SearchFilter(tenant="t"))
    assert expr.readable(None) == ""
    bob = expr.readable(frozenset((access.TENANT, "user:bob")))
    tokens = sorted(rows.reader(t) for t in (access.TENANT, "user:bob"))
    assert bob == (f'(ARRAY_CONTAINS_ANY(kv, ["{tokens[0]}", "{tokens[1]}"]) '
                   f'or not ARRAY_CONTAINS(kv, "{rows.RESTRICTED}"))')
    assert expr.expression(SearchFilter(tenant="t", readers=frozenset((access.TENANT, "user:bob")),
                                        doc_ids=["d"])).split(" and ")[1] == bob
    assert "not" not in expr.readable(frozenset(("user:bob",)))
    assert expr.readable(frozenset()) == expr.NOTHING


def test_a_row_names_its_readers_first_and_only_when_it_has_an_access_list() -> None:
    value = Access(owner="alice", users=("bob",), groups=("risk",)).encode()
    row = rows.to_row(Chunk(chunk_id="c", doc_id="d", collection="x", text="t",
                            metadata={access.ACCESS_KEY: value, "team": "a"}), np.zeros(2), [], 0)
    readers = sorted(rows.reader(t) for t in ("user:alice", "user:bob", "group:risk"))
    assert row["kv"] == [rows.RESTRICTED, *readers, rows.pair(access.ACCESS_KEY, value), rows.pair("team", "a")]
    legacy = rows.to_row(Chunk(chunk_id="c", doc_id="d", collection="x", text="t", metadata={"team": "a"}),
                         np.zeros(2), [], 0)
    assert legacy["kv"] == [rows.pair("team", "a")]
    assert rows.to_chunk(row, "x").metadata == {access.ACCESS_KEY: value, "team": "a"}


def test_the_tenant_is_always_a_condition_and_an_empty_value_list_admits_nothing() -> None:
    assert expr.expression(SearchFilter()) == 'tenant == ""'
    assert expr.NOTHING in expr.expression(SearchFilter(tenant="t", any_of={"fund": []}))
    assert expr.NOTHING in expr.expression(SearchFilter(tenant="t", doc_ids=[]))
    assert "doc in" not in expr.expression(SearchFilter(tenant="t", doc_ids=None))


@given(st.lists(text, min_size=2, max_size=2))
def test_hex_keeps_the_order_of_text(pair: list[str]) -> None:
    a, b = pair
    assert (rows.hexed(a) < rows.hexed(b)) == (a < b)
    assert rows.unhexed(rows.hexed(a)) == a


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}", fullmatch=True), text)
def test_collection_names_map_one_to_one_and_hold_no_tenant_text(name: str, tenant: str) -> None:
    """Any tenant text: the name is Milvus's alphabet, within its 255 characters, and says which
    ragmesh collection and which tenant (by digest) it holds."""
    encoded = rows.milvus_name("p" * rows.MAX_PREFIX, name, tenant)
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,254}", encoded)
    assert rows.parse("p" * rows.MAX_PREFIX, encoded) == (name, rows.tenant_key(tenant))
    assert rows.milvus_name("ragmesh_", name, tenant) != rows.milvus_name("ragmesh_", name, tenant + "x")


def test_the_state_collection_is_no_ragmesh_collection_and_a_shared_one_is_known() -> None:
    assert rows.parse("ragmesh_", "ragmesh__state") is None
    assert rows.parse("ragmesh_", "other_thing") is None
    assert rows.parse("ragmesh_", "ragmesh_docs_2dv1") == ("docs-v1", rows.SHARED)


def test_dates_become_sortable_numbers() -> None:
    assert rows.date_number("2024-03-07") == 20240307
    assert rows.date_number("") == rows.date_number("March") == rows.date_number("20240307") == rows.NO_DATE
    f = SearchFilter(tenant="t", start_date="2024-01-01")
    assert "date >= 20240101" in expr.expression(f) and "date <= 99991231" in expr.expression(f)
