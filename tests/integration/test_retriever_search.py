"""Retriever.Search over gRPC on a hand-built collection (vectors given with Upsert), so
every expectation can be computed independently: exact filtered dense search, tenant
scope, fail-closed filters, fusion modes, variants, boosters, thresholds, parents.

The tenant of every call is the caller's key's: the chunks of tenant "acme" go in with an acme
key, the rest with the stack's admin key (tenant DEMO), and searches see only their tenant's."""
from __future__ import annotations

import grpc
import numpy as np
import pytest

from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import DEMO, Stack

DIM = 384
FUNDS = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon"]
N_DOCS = 200


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def corpus(collection: str) -> list[tuple[common_pb2.Chunk, np.ndarray | None]]:
    rng = np.random.default_rng(11)
    words = ["growth", "drawdown", "hedge", "credit", "rates", "equity", "volatility", "liquidity"]
    out = []
    for d in range(N_DOCS):
        tenant = "acme" if d % 10 == 0 else DEMO
        fund = FUNDS[d % len(FUNDS)]
        date = f"2024-{1 + d % 12:02d}-{1 + d % 28:02d}"
        for i in range(2):
            text = f"{fund} note {d} part {i} about {words[(d + i) % 8]} and {words[(d * 3 + i) % 8]}"
            meta = {"fund_name": fund}
            if d % 7 == 0:
                meta |= {"type": "transcript", "tags": "hiring, budget"}
            out.append((common_pb2.Chunk(chunk_id=f"{collection}/{tenant}/d{d}#{i}", doc_id=f"d{d}", collection=collection,
                                         text=text, metadata=meta, date=date, tenant=tenant), unit(rng)))
    parent = common_pb2.Chunk(chunk_id=f"{collection}/book#p", doc_id="book", collection=collection,
                              text="The whole chapter about zeppelins and their history.", date="2024-06-01",
                              tenant=DEMO)
    out.append((parent, None))
    for i in range(2):
        out.append((common_pb2.Chunk(chunk_id=f"{collection}/book#c{i}", doc_id="book", collection=collection,
                                     text=f"zeppelins section {i}", parent_chunk_id=f"{collection}/book#p", date="2024-06-01",
                                     tenant=DEMO),
                    unit(rng)))
    return out


@pytest.fixture(scope="module")
def stubs(stack: Stack, backend: tuple[str, str]) -> dict[str, retriever_pb2_grpc.RetrieverStub]:
    """Stubs calling as DEMO's admin, as an admin of "acme", and as the service (for the
    platform operations), with each tenant's share of the corpus upserted under its own key.
    Each search backend gets a collection of its own (both retrievers share the stack's store);
    every stub knows it as `stub.collection`."""
    name, address = backend
    collection = f"searchtest-{name}"
    channels = {DEMO: channel(address, stack.metadata),
                "acme": channel(address, bearer(stack.key("acme", "searcher", "admin"))),
                "service": channel(address, stack.service_metadata())}
    found = {name: retriever_pb2_grpc.RetrieverStub(ch) for name, ch in channels.items()}
    for stub in found.values():
        stub.collection = collection
    items = corpus(collection)
    for tenant in (DEMO, "acme"):
        mine = [(c, v) for c, v in items if c.tenant == tenant]
        requests = (retriever_pb2.UpsertRequest(chunk=c, vector=[] if v is None else v.tolist()) for c, v in mine)
        reply = found[tenant].Upsert(requests, timeout=60)
        assert (reply.documents, reply.rejected) == (len({c.doc_id for c, _ in mine}), 0), reply.errors
    assert len({c.doc_id for c, _ in items}) == N_DOCS + 1
    yield found
    for ch in channels.values():
        ch.close()


@pytest.fixture(scope="module")
def retriever(stubs) -> retriever_pb2_grpc.RetrieverStub:
    return stubs[DEMO]


def search(stub, query: str, vector: np.ndarray | None = None, **kw) -> retriever_pb2.SearchResponse:
    request = retriever_pb2.SearchRequest(query=query, collections=[stub.collection], **kw)
    if vector is not None:
        request.query_vector.extend(vector.tolist())
    return stub.Search(request, timeout=10)


def fund_filter(*funds: str) -> common_pb2.Filter:
    f = common_pb2.Filter()
    getattr(f, "in")["fund_name"].values.extend(funds)
    return f


def test_filtered_dense_search_is_exact_and_both_sides_obey_the_filter(retriever) -> None:
    items = [(c, v) for c, v in corpus(retriever.collection) if v is not None]
    query = items[3][1] + 0.3 * items[8][1]
    reply = search(retriever, "drawdown hedge", query, top_k=200, filter=fund_filter("Beta", "Gamma"),
                   dense_weight=1.0, sparse_weight=0.0)
    admitted = [(c, v) for c, v in items if c.metadata["fund_name"] in ("Beta", "Gamma") and c.tenant == DEMO]
    assert reply.candidate_count == len(admitted)
    expected = sorted(admitted, key=lambda cv: -float(cv[1] @ query))[:10]
    dense_top = sorted((h for h in reply.hits if h.dense_rank), key=lambda h: h.dense_rank)[:10]
    assert [h.chunk.chunk_id for h in dense_top] == [c.chunk_id for c, _ in expected]
    both = search(retriever, "drawdown hedge", query, top_k=200, filter=fund_filter("Beta", "Gamma"))
    assert any(h.sparse_rank for h in both.hits) and any(h.dense_rank for h in both.hits)
    assert {h.chunk.metadata["fund_name"] for h in both.hits} <= {"Beta", "Gamma"}


def test_tenant_scope_is_always_applied(stubs) -> None:
    demo = search(stubs[DEMO], "growth credit", top_k=200)
    acme = search(stubs["acme"], "growth credit", top_k=200)
    assert demo.hits and acme.hits
    assert all(h.chunk.tenant == DEMO for h in demo.hits)
    assert all(h.chunk.tenant == "acme" for h in acme.hits)
    # A tenant named in the filter is ignored: the key decides.
    named = search(stubs[DEMO], "growth credit", top_k=200, filter=common_pb2.Filter(tenant="acme"))
    assert [h.chunk.chunk_id for h in named.hits] == [h.chunk.chunk_id for h in demo.hits]
    from_acme = search(stubs["acme"], "growth credit", top_k=200, filter=common_pb2.Filter(tenant=DEMO))
    assert from_acme.hits and all(h.chunk.tenant == "acme" for h in from_acme.hits)


@pytest.mark.parametrize("f", [
    fund_filter("NoSuchFund"),
    common_pb2.Filter(equals={"unknown_field": "x"}),
    common_pb2.Filter(start_date="2031-01-01"),
])
def test_filters_fail_closed(retriever, f: common_pb2.Filter) -> None:
    reply = search(retriever, "growth", top_k=50, filter=f)
    assert reply.candidate_count == 0 and list(reply.hits) == []


def doc_filter(*doc_ids: str) -> common_pb2.Filter:
    f = common_pb2.Filter()
    f.doc_ids.SetInParent()
    f.doc_ids.values.extend(doc_ids)
    return f


def test_a_doc_ids_filter_admits_those_documents_of_the_callers_tenant_only(stubs, retriever) -> None:
    picked = search(retriever, "growth credit note", top_k=200, filter=doc_filter("d3", "d12", "book"))
    assert {h.chunk.doc_id for h in picked.hits} == {"d3", "d12", "book"}
    assert picked.candidate_count == 6
    # d10 is acme's: DEMO naming it finds nothing of it, acme finds its own
    docs = lambda stub, f: {h.chunk.doc_id for h in search(stub, "growth", top_k=50, filter=f).hits}  # noqa: E731
    assert docs(retriever, doc_filter("d10", "d3")) == {"d3"}
    assert docs(stubs["acme"], doc_filter("d10", "d3")) == {"d10"}
    both = doc_filter("d3", "d5", "d6")
    getattr(both, "in")["fund_name"].values.append("Alpha")  # d5's fund: the conditions hold together
    assert docs(retriever, both) == {"d5"}
    for nothing in (doc_filter(), doc_filter("no-such-doc"), doc_filter('d3" or 1==1 or doc_id == "', "d3\\", "]")):
        reply = search(retriever, "growth credit note", top_k=50, filter=nothing)
        assert reply.candidate_count == 0 and list(reply.hits) == []


@pytest.mark.parametrize("f, field", [
    (doc_filter(""), "filter.doc_ids[0]"),
    (doc_filter("d1", "x" * 513), "filter.doc_ids[1]"),
    (doc_filter(*[f"d{i}" for i in range(1001)]), "filter.doc_ids"),
])
def test_bad_doc_ids_are_invalid_arguments(retriever, f: common_pb2.Filter, field: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        search(retriever, "growth", top_k=5, filter=f)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info.value.details().startswith(field)


def test_a_tenant_without_documents_finds_nothing(stack: Stack, backend, retriever) -> None:
    with channel(backend[1], bearer(stack.key("nobody", "someone", "admin"))) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        stub.collection = retriever.collection
        reply = search(stub, "growth", top_k=50, filter=fund_filter("Alpha"))
    assert reply.candidate_count == 0 and list(reply.hits) == []


def test_hits_explain_their_ranks_and_linear_fusion_scores_in_unit_range(retriever) -> None:
    rrf = search(retriever, "volatility liquidity", top_k=20)
    top = rrf.hits[0]
    assert top.dense_rank or top.sparse_rank
    assert top.fused_score == pytest.approx(top.score)
    linear = search(retriever, "volatility liquidity", top_k=20, fusion=retriever_pb2.FUSION_LINEAR)
    assert all(0.0 <= h.score <= 1.0 for h in linear.hits)
    assert [h.chunk.chunk_id for h in linear.hits] != [h.chunk.chunk_id for h in rrf.hits]


def test_a_variant_brings_in_what_only_it_matches(retriever) -> None:
    plain = search(retriever, "zeppelins", top_k=5, dense_weight=0.0)
    assert {h.chunk.doc_id for h in plain.hits} == {"book"}
    with_variant = search(retriever, "unrelatedword", top_k=5, dense_weight=0.0, variants=["zeppelins"])
    assert {h.chunk.doc_id for h in with_variant.hits} == {"book"}


def test_parent_text_is_returned_once(retriever) -> None:
    reply = search(retriever, "zeppelins section", top_k=5, dense_weight=0.0,
                   boosters=retriever_pb2.Boosters(expand_parents=True))
    book = [h for h in reply.hits if h.chunk.doc_id == "book"]
    assert len(book) == 2
    assert [bool(h.parent_text) for h in book] == [True, False]
    assert "whole chapter" in book[0].parent_text


def test_boosters_time_window_and_threshold_layers(retriever) -> None:
    recent = search(retriever, "growth", top_k=200, boosters=retriever_pb2.Boosters(time_window="1w", now="2024-12-10"))
    assert recent.hits and all("2024-12-03" <= h.chunk.date <= "2024-12-10" for h in recent.hits)
    boosted = search(retriever, "budget hiring growth", top_k=50,
                     boosters=retriever_pb2.Boosters(tag_boost=0.25, half_life_days=30, now="2024-12-31"))
    assert any(b.startswith("tags x1.50") for h in boosted.hits for b in h.boosts)
    assert all(any(b.startswith("recency x") for b in h.boosts) for h in boosted.hits)
    strict = search(retriever, "growth", top_k=10, boosters=retriever_pb2.Boosters(min_similarity=0.99, fallback_similarity=0.98))
    assert strict.threshold_layer == 3 and len(strict.hits) == 10


def test_upsert_rejects_bad_documents_and_keeps_the_rest(retriever) -> None:
    good = common_pb2.Chunk(chunk_id=f"{retriever.collection}/ok#0", doc_id="ok", collection=retriever.collection, text="fine")
    bad = common_pb2.Chunk(chunk_id=f"{retriever.collection}/bad#0", doc_id="bad", collection=retriever.collection, text="short vector")
    reply = retriever.Upsert(iter([
        retriever_pb2.UpsertRequest(chunk=bad, vector=[0.1, 0.2]),
        retriever_pb2.UpsertRequest(chunk=good, vector=[0.0] * DIM),
    ]), timeout=10)
    assert (reply.documents, reply.rejected) == (1, 1)
    assert reply.errors[0].startswith("bad: vector:") and "384" in reply.errors[0]


def test_a_collection_can_switch_to_hnsw_and_back(retriever, stubs, backend) -> None:
    """ConfigureCollection is a platform operation (collections are shared by every tenant): the service calls it."""
    service = stubs["service"]
    items = [(c, v) for c, v in corpus(retriever.collection) if v is not None and c.tenant == DEMO]
    chunk, vector = items[17]

    def top(**kw) -> str:
        return search(retriever, "", vector, top_k=5, dense_weight=1.0, sparse_weight=0.0, **kw).hits[0].chunk.chunk_id

    assert top() == chunk.chunk_id
    info = service.ConfigureCollection(retriever_pb2.ConfigureCollectionRequest(name=retriever.collection, dense_index="hnsw"),
                                       timeout=60)
    assert info.dense_index == "hnsw" and info.indexed_chunks == info.chunks - 1  # the parent is stored, not indexed
    assert top() == chunk.chunk_id, "HNSW finds a vector's own chunk"
    for kind in ("diskann", "ivf") if backend[0] == "milvus" else ("diskann",):  # ivf: the memory engine's own
        with pytest.raises(grpc.RpcError) as err:
            service.ConfigureCollection(retriever_pb2.ConfigureCollectionRequest(name=retriever.collection,
                                                                                 dense_index=kind), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("dense_index")
    if backend[0] == "memory":  # below its training size an ivf collection is scanned exactly
        info = service.ConfigureCollection(retriever_pb2.ConfigureCollectionRequest(name=retriever.collection,
                                                                                    dense_index="ivf"), timeout=60)
        assert info.dense_index == "ivf" and top() == chunk.chunk_id
    flat = service.ConfigureCollection(retriever_pb2.ConfigureCollectionRequest(name=retriever.collection, dense_index="flat"),
                                       timeout=60)
    assert flat.dense_index == "flat" and top() == chunk.chunk_id


def ingest(stub, *docs: retriever_pb2.Document) -> dict[str, str]:
    return {p.doc_id: retriever_pb2.IngestStage.Name(p.stage) for p in stub.Ingest(iter(docs), timeout=120)
            if p.stage in (retriever_pb2.INDEXED, retriever_pb2.FAILED, retriever_pb2.UNCHANGED)}


def notes(doc_id: str, collection: str, marker: str, paragraphs: int, **kw) -> retriever_pb2.Document:
    text = "\n\n".join(f"The {marker} note {i} sets out the quarry lantern rules for every keeper of the"
                       f" north gate, with the hours and the duties of each watch in turn." for i in range(paragraphs))
    return retriever_pb2.Document(doc_id=doc_id, collection=collection, text=text, summarize=False, **kw)


def test_ingest_replaces_a_document_whole(retriever) -> None:
    """After INDEXED a search sees exactly the new version: its chunks, none the old one had beyond them."""
    collection = f"{retriever.collection}-ingest"
    assert ingest(retriever, notes("swap", collection, "alphaversion", 24)) == {"swap": "INDEXED"}
    first = search_in(retriever, collection, "quarry lantern rules")
    assert len(first.hits) > 2 and all("alphaversion" in h.chunk.text for h in first.hits)
    assert ingest(retriever, notes("swap", collection, "betaversion", 3)) == {"swap": "INDEXED"}
    second = search_in(retriever, collection, "quarry lantern rules")
    assert second.hits and all("betaversion" in h.chunk.text for h in second.hits)
    assert len(second.hits) < len(first.hits) and second.candidate_count == len(second.hits)


def test_delete_by_id_and_by_filter_removes_only_the_callers_documents(stubs) -> None:
    demo, acme = stubs[DEMO], stubs["acme"]
    collection = f"{demo.collection}-delete"
    docs = [notes(f"del-{i}", collection, f"batch{i}", 1, metadata={"batch": "x" if i % 2 else "y"}) for i in range(4)]
    assert set(ingest(demo, *docs).values()) == {"INDEXED"}
    assert set(ingest(acme, *docs).values()) == {"INDEXED"}  # the same ids in another tenant
    gone = demo.Delete(retriever_pb2.DeleteRequest(collection=collection, filter=common_pb2.Filter(equals={"batch": "x"})),
                       timeout=30)
    assert (gone.documents, gone.chunks) == (2, 2)
    assert demo.Delete(retriever_pb2.DeleteRequest(collection=collection, doc_ids=["del-0"]), timeout=30).documents == 1
    assert [h.chunk.doc_id for h in search_in(demo, collection, "quarry lantern rules").hits] == ["del-2"]
    assert sorted(h.chunk.doc_id for h in search_in(acme, collection, "quarry lantern rules").hits) == [
        "del-0", "del-1", "del-2", "del-3"]


def test_field_values_are_the_callers_tenants(stubs) -> None:
    def values(stub) -> list[str]:
        request = retriever_pb2.FieldValuesRequest(field="fund_name", collections=[stub.collection])
        return list(stub.FieldValues(request, timeout=30).values)

    assert values(stubs[DEMO]) == sorted(FUNDS)
    assert values(stubs["acme"]) == ["Alpha"]  # acme holds the documents d % 10 == 0, all Alpha's


# Strings an attacker would put in a filter's field names and values, to close a quote or a
# bracket and add a condition of their own.
HOSTILE = [
    '"', "'", "\\", '\\"', '" or 1==1 or "', "' or 1==1 or '", 'x") or (1==1',
    '] or true or [', 'a"]) or ARRAY_CONTAINS(kv, "', "tenant", 'tenant == "acme"', "\u00e9\u6f22\U0001f600",
    "line\nbreak", "\\u0022 or 1==1", "' || true || '", "%s{0}$meta",
]


def test_no_filter_field_or_value_widens_a_search(retriever) -> None:
    """Hostile text in every place a filter takes one finds nothing (no chunk has such fields),
    where an expression it could alter would find everything."""
    for text in HOSTILE:
        for f in (common_pb2.Filter(equals={text: text}), common_pb2.Filter(equals={"fund_name": text}),
                  common_pb2.Filter(start_date="2024-01-01", date_field=text),
                  common_pb2.Filter(start_date="2024-01-01", end_date="2024-12-31", date_field=text)):
            reply = search(retriever, "growth", top_k=50, filter=f)
            assert (reply.candidate_count, list(reply.hits)) == (0, []), (text, f)
        f = common_pb2.Filter()
        getattr(f, "in")[text].values.extend([text, "Alpha"])
        getattr(f, "in")["fund_name"].values.extend([text])
        reply = search(retriever, "growth", top_k=50, filter=f)
        assert (reply.candidate_count, list(reply.hits)) == (0, []), text


def test_hostile_fields_and_values_match_exactly_themselves(stubs) -> None:
    """A chunk whose metadata is hostile text is found by exactly that text, and only it."""
    demo = stubs[DEMO]
    collection = f"{demo.collection}-hostile"
    rng = np.random.default_rng(5)
    requests = [retriever_pb2.UpsertRequest(
        chunk=common_pb2.Chunk(chunk_id=f"{collection}/h{i}", doc_id=f"h{i}", collection=collection, text=f"hostile note {i}",
                               metadata={text: text, "other": "plain"}, date="2024-05-05"),
        vector=unit(rng).tolist()) for i, text in enumerate(HOSTILE)]
    assert demo.Upsert(iter(requests), timeout=60).documents == len(HOSTILE)
    for i, text in enumerate(HOSTILE):
        f = common_pb2.Filter(equals={text: text})
        getattr(f, "in")[text].values.extend([text, '" or 1==1 or "'])
        assert [h.chunk.doc_id for h in search_in(demo, collection, "hostile note", filter=f).hits] == [f"h{i}"], text
        # a named date field compares the field's text: the hostile value sorts among dates as text does
        dated = common_pb2.Filter(date_field=text, start_date="1000-01-01")
        found = [h.chunk.doc_id for h in search_in(demo, collection, "hostile note", filter=dated).hits]
        assert found == ([f"h{i}"] if text >= "1000-01-01" else []), text
    assert not search_in(stubs["acme"], collection, "hostile note").hits


def search_in(stub, collection: str, query: str, **kw) -> retriever_pb2.SearchResponse:
    return stub.Search(retriever_pb2.SearchRequest(query=query, collections=[collection], top_k=100, **kw), timeout=30)
