"""Retriever bad input over gRPC (issue 11): every field a fuzzer can reach is bounded and checked.
A bad Search, Delete, GetDocument or FieldValues answers INVALID_ARGUMENT whose details start with
the field's name (never UNKNOWN or INTERNAL) and changes nothing; a bad Upsert document is rejected
and reported by name; a bad Ingest document FAILS with the field named. Nothing is written either
way (Stats, GetDocument and Search before and after). A cancelled Ingest stops early.

Calls carry the stack's admin key (tenant DEMO); Stats, a platform operation, the service token."""
from __future__ import annotations

import math
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from ragmesh.types import MEMORY_COLLECTION
from tests.auth import bearer, channel
from tests.stack import DEMO, Stack

DIM = 384
COLLECTION = "bad_input"


@pytest.fixture(scope="module")
def stub(stack: Stack) -> Iterator[retriever_pb2_grpc.RetrieverStub]:
    with channel(stack.address("retriever"), stack.metadata) as ch:
        yield retriever_pb2_grpc.RetrieverStub(ch)


@pytest.fixture(scope="module")
def service(stack: Stack) -> Iterator[retriever_pb2_grpc.RetrieverStub]:
    with channel(stack.address("retriever"), stack.service_metadata()) as ch:
        yield retriever_pb2_grpc.RetrieverStub(ch)


@pytest.fixture(scope="module")
def seeded(stub) -> str:
    """One good document in COLLECTION, so a bad write has something to leave alone."""
    chunk = common_pb2.Chunk(chunk_id="good#0", doc_id="good", collection=COLLECTION, text="the good lighthouse keeper")
    reply = stub.Upsert(iter([retriever_pb2.UpsertRequest(chunk=chunk, vector=unit(1).tolist())]), timeout=30)
    assert (reply.documents, reply.rejected) == (1, 0), reply.errors
    return "good"


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def state(service) -> tuple[dict[str, tuple[int, int]], int]:
    """Documents and chunks of every collection, and the searches served. Conversation memory is left
    out: the gateways of earlier tests write their answers into it in the background, whenever they
    get to it (no search writes it)."""
    stats = service.Stats(retriever_pb2.StatsRequest(), timeout=10)
    return {c.name: (c.documents, c.chunks) for c in stats.collections if c.name != MEMORY_COLLECTION}, stats.searches


def invalid(call, *args, **kw) -> str:
    """The details of the INVALID_ARGUMENT the call must answer."""
    with pytest.raises(grpc.RpcError) as err:
        call(*args, timeout=30, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.value.code(), err.value.details())
    details = err.value.details()
    assert len(details) < 600, "a bad value is not echoed back whole"
    return details


def many_fields(n: int) -> common_pb2.Filter:
    return common_pb2.Filter(equals={f"field{i}": "x" for i in range(n)})


def any_of(field: str, values: list[str]) -> common_pb2.Filter:
    f = common_pb2.Filter()
    getattr(f, "in")[field].values.extend(values)
    return f


B = retriever_pb2.Boosters
BAD_SEARCHES = [
    ("query", dict(query="x" * 4001)),
    ("query", dict(query="   ")),
    ("query_vector", dict(query_vector=[0.1] * 3)),
    ("query_vector", dict(query_vector=[0.1] * (DIM + 1))),
    ("query_vector", dict(query_vector=[math.nan] + [0.1] * (DIM - 1))),
    ("query_vector", dict(query_vector=[math.inf] + [0.1] * (DIM - 1))),
    ("fusion", dict(fusion=7)),
    ("fusion", dict(fusion=-1)),
    ("top_k", dict(top_k=0)),
    ("top_k", dict(top_k=201)),
    ("dense_weight", dict(dense_weight=math.nan)),
    ("dense_weight", dict(dense_weight=-0.5)),
    ("sparse_weight", dict(sparse_weight=math.inf)),
    ("recency_weight", dict(recency_weight=1e6)),
    ("dense_weight", dict(dense_weight=0, sparse_weight=0)),
    ("rrf_k", dict(rrf_k=0)),
    ("rrf_k", dict(rrf_k=1_000_000)),
    ("variants", dict(variants=[f"variant {i}" for i in range(9)])),
    ("variants[0]", dict(variants=["v" * 4001])),
    ("collections", dict(collections=[f"c{i}" for i in range(33)])),
    ("collections[0]", dict(collections=["no spaces allowed"])),
    ("collections[1]", dict(collections=[COLLECTION, "x" * 65])),
    ("boosters.time_window", dict(boosters=B(time_window="2d"))),
    ("boosters.half_life_days", dict(boosters=B(half_life_days=-1))),
    ("boosters.half_life_days", dict(boosters=B(half_life_days=math.nan))),
    ("boosters.decay_floor", dict(boosters=B(decay_floor=2))),
    ("boosters.recent_boost", dict(boosters=B(recent_boost=math.inf))),
    ("boosters.recent_days", dict(boosters=B(recent_days=-3))),
    ("boosters.same_conversation_boost", dict(boosters=B(same_conversation_boost=-0.2))),
    ("boosters.tag_boost", dict(boosters=B(tag_boost=1e9))),
    ("boosters.min_similarity", dict(boosters=B(min_similarity=1.5))),
    ("boosters.fallback_similarity", dict(boosters=B(fallback_similarity=-2))),
    ("boosters.now", dict(boosters=B(now="2024-02-30"))),
    ("boosters.now", dict(boosters=B(now="yesterday"))),
    ("boosters.now", dict(boosters=B(now="0001-01-02", time_window="1w"))),  # once a date underflow: INTERNAL
    ("boosters.conversation_id", dict(boosters=B(conversation_id="c" * 513))),
    ("filter.in", dict(filter=many_fields(65))),
    ("filter.in['fund_name']", dict(filter=any_of("fund_name", [f"f{i}" for i in range(1001)]))),
    ("filter.in['fund_name'][1]", dict(filter=any_of("fund_name", ["ok", "v" * 1001]))),
    ("filter.in key", dict(filter=any_of("k" * 257, ["x"]))),
    ("filter.equals key", dict(filter=common_pb2.Filter(equals={"": "x"}))),
    ("filter.equals['fund_name']", dict(filter=common_pb2.Filter(equals={"fund_name": "v" * 1001}))),
    ("filter.start_date", dict(filter=common_pb2.Filter(start_date="2024-13-01"))),
    ("filter.end_date", dict(filter=common_pb2.Filter(start_date="2024-05-01", end_date="2024-04-01"))),
    ("filter.date_field", dict(filter=common_pb2.Filter(start_date="2024-01-01", date_field="d" * 257))),
]


@pytest.mark.parametrize("field, fields", BAD_SEARCHES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_SEARCHES)])
def test_a_bad_search_is_invalid_argument_naming_the_field(stub, service, seeded, field: str, fields: dict) -> None:
    request = retriever_pb2.SearchRequest(**({"query": "lighthouse"} | fields))
    before = state(service)
    details = invalid(stub.Search, request)
    assert details.startswith(field), details
    assert state(service) == before, "a refused search is not run (nor counted)"


def test_the_limits_still_admit_what_they_name(stub, seeded) -> None:
    """The edges themselves are accepted."""
    reply = stub.Search(retriever_pb2.SearchRequest(
        query="lighthouse " + "x" * (4000 - 11), variants=[f"keeper {i}" for i in range(8)] + ["keeper 0", ""],
        collections=[COLLECTION] * 40 + [f"c{i}" for i in range(31)], query_vector=unit(1).tolist(), top_k=200,
        dense_weight=100, rrf_k=10_000,
        boosters=B(min_similarity=-1, fallback_similarity=1, decay_floor=1, now="2024-02-29", half_life_days=36_500),
        filter=any_of("fund_name", [f"f{i}" for i in range(1000)]),
    ), timeout=30)
    assert reply.candidate_count == 0  # no chunk has a fund_name: the filter still applies
    hits = stub.Search(retriever_pb2.SearchRequest(query="lighthouse keeper", collections=[COLLECTION],
                                                   query_vector=unit(1).tolist()), timeout=30).hits
    assert hits[0].chunk.doc_id == "good"


def test_a_megabyte_query_is_refused_at_once(stub, seeded) -> None:
    started = time.perf_counter()
    details = invalid(stub.Search, retriever_pb2.SearchRequest(query="lighthouse " * 100_000))
    assert details.startswith("query: is 1,100,000 characters; the limit is 4,000"), details
    assert time.perf_counter() - started < 1.0  # was 3.2 s of analysis and embedding


def chunk_request(doc_id: str, vector: list[float] | None = None, i: int = 0, **chunk: object) -> retriever_pb2.UpsertRequest:
    fields = dict(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, collection=COLLECTION, text=f"{doc_id} text {i}") | chunk
    return retriever_pb2.UpsertRequest(chunk=common_pb2.Chunk(**fields),
                                       vector=unit(i + 2).tolist() if vector is None else vector)


def test_bad_upsert_documents_are_rejected_by_name_and_nothing_of_them_is_written(stub, service, seeded) -> None:
    nan = unit(5).tolist()
    nan[7] = math.nan
    inf = unit(6).tolist()
    inf[0] = -math.inf
    bad = {
        "u-short": ("vector", [chunk_request("u-short", [0.1, 0.2])]),
        "u-nan": ("vector", [chunk_request("u-nan", i=0), chunk_request("u-nan", nan, i=1)]),
        "u-inf": ("vector", [chunk_request("u-inf", inf)]),
        "u-reserved": ("chunk.metadata", [chunk_request("u-reserved", metadata={"__tenant__": "acme"})]),
        "u-keys": ("chunk.metadata", [chunk_request("u-keys", metadata={f"k{i}": "v" for i in range(161)})]),
        "u-key": ("chunk.metadata", [chunk_request("u-key", metadata={"k" * 257: "v"})]),
        "u-value": ("chunk.metadata", [chunk_request("u-value", metadata={"k": "v" * 4001})]),
        "u-text": ("chunk.text", [chunk_request("u-text", text="word " * 20_001)]),
        "u-date": ("chunk.date", [chunk_request("u-date", date="2024-02-30")]),
        "u-id": ("chunk.chunk_id", [chunk_request("u-id", chunk_id="c" * 1025)]),
        "u-parent": ("chunk.parent_chunk_id", [chunk_request("u-parent", parent_chunk_id="p" * 1025)]),
        "u-collection": ("chunk.collection", [chunk_request("u-collection", collection="not a name")]),
    }
    long_id = "d" * 513
    before = state(service)
    reply = stub.Upsert(iter([r for _, requests in bad.values() for r in requests]
                             + [chunk_request(long_id), chunk_request("u-fine")]), timeout=60)
    assert (reply.documents, reply.rejected) == (1, len(bad) + 1), reply.errors
    errors = {e.split(": ", 1)[0]: e.split(": ", 1)[1] for e in reply.errors}
    for doc_id, (field, _) in bad.items():
        assert errors[doc_id].startswith(field), (doc_id, errors[doc_id])
    assert errors["d" * 40 + "..."].startswith("chunk.doc_id: is 513 characters; the limit is 512")
    after = state(service)[0]
    assert after[COLLECTION] == (before[0][COLLECTION][0] + 1, before[0][COLLECTION][1] + 1)  # u-fine alone
    for doc_id in bad:
        with pytest.raises(grpc.RpcError) as err:
            stub.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id=doc_id), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_reserved_metadata_key_cannot_move_a_chunk_into_another_tenant(stack: Stack, stub, seeded) -> None:
    """A JSON record's "__tenant__" field is dropped (the index's own column keeps the caller's tenant)."""
    record = b'{"id": "r-reserved", "text": "the quartermaster ledger of the northern fort", "__tenant__": "acme"}'
    progress = list(stub.Ingest(iter([retriever_pb2.Document(collection=COLLECTION, filename="r.json", content=record,
                                                             summarize=False)]), timeout=60))
    assert retriever_pb2.IngestStage.Name(progress[-1].stage) == "INDEXED", progress[-1]
    with channel(stack.address("retriever"), bearer(stack.key("acme", "prober", "admin"))) as ch:
        acme = retriever_pb2_grpc.RetrieverStub(ch).Search(
            retriever_pb2.SearchRequest(query="quartermaster ledger northern fort", collections=[COLLECTION]), timeout=10)
    assert list(acme.hits) == []
    mine = stub.Search(retriever_pb2.SearchRequest(query="quartermaster ledger", collections=[COLLECTION]), timeout=10)
    assert mine.hits[0].chunk.doc_id == "r-reserved" and "__tenant__" not in mine.hits[0].chunk.metadata


def test_bad_ingest_documents_fail_by_name_and_write_nothing(stub, service, seeded) -> None:
    def doc(doc_id: str, **kw: object) -> retriever_pb2.Document:
        return retriever_pb2.Document(**({"doc_id": doc_id, "collection": COLLECTION,
                                          "text": f"{doc_id} is about the harbour master.", "summarize": False} | kw))

    bad = {
        "i-keys": ("metadata: has 65 keys; the limit is 64", doc("i-keys", metadata={f"k{i}": "v" for i in range(65)})),
        "i-key": ("metadata key", doc("i-key", metadata={"k" * 257: "v"})),
        "i-value": ("metadata['k']: is 4,001 characters", doc("i-value", metadata={"k": "v" * 4001})),
        # each value allowed, five of them past the bytes every hit, context and citation would carry
        "i-bytes": ("metadata: is 20,010 bytes (keys and values, UTF-8); the limit is 16,384",
                    doc("i-bytes", metadata={f"k{i}": "v" * 4000 for i in range(5)})),
        "i-reserved": ("metadata['__tenant__']: keys starting with '__' are reserved",
                       doc("i-reserved", metadata={"__tenant__": "acme"})),
        "i-title": ("title: is 1,001 characters", doc("i-title", title="t" * 1001)),
        "i-date": ("date: is not a calendar date", doc("i-date", date="2024-02-30")),
        "i-date2": ("date: must be a date as YYYY-MM-DD", doc("i-date2", date="30/01/2024")),
        "i-mime": ("mime_type: is 256 characters", doc("i-mime", mime_type="m" * 256)),
        "i-collection": ("collection:", doc("i-collection", collection="bad name")),
        "d" * 512: ("doc_id: is 513 characters", doc("d" * 513)),
        "n" * 300: ("filename: is 300 characters", retriever_pb2.Document(collection=COLLECTION, filename="n" * 300,
                                                                         content=b"hello")),
    }
    before = state(service)
    progress = list(stub.Ingest(iter([d for _, d in bad.values()] + [doc("i-fine")]), timeout=120))
    last = {p.doc_id: p for p in progress}
    for doc_id, (error, _) in bad.items():
        p = last[doc_id]
        assert retriever_pb2.IngestStage.Name(p.stage) == "FAILED" and p.error.startswith(error), (doc_id[:20], p.error)
        assert len(p.error) < 600
    assert retriever_pb2.IngestStage.Name(last["i-fine"].stage) == "INDEXED"
    after = state(service)[0]
    assert after[COLLECTION][0] == before[0][COLLECTION][0] + 1  # i-fine alone
    hits = stub.Search(retriever_pb2.SearchRequest(query="harbour master", collections=[COLLECTION], top_k=200,
                                                   dense_weight=0), timeout=10).hits
    assert {h.chunk.doc_id for h in hits} == {"i-fine"}  # the only one with those words


@pytest.mark.parametrize("field, request_", [
    ("collection", retriever_pb2.DeleteRequest(collection="bad name", doc_ids=["good"])),
    ("doc_ids", retriever_pb2.DeleteRequest(collection=COLLECTION, doc_ids=[f"d{i}" for i in range(1001)])),
    ("doc_ids[1]", retriever_pb2.DeleteRequest(collection=COLLECTION, doc_ids=["good", "d" * 513])),
    ("doc_ids[1]", retriever_pb2.DeleteRequest(collection=COLLECTION, doc_ids=["good", ""])),
    ("filter.equals key", retriever_pb2.DeleteRequest(collection=COLLECTION,
                                                      filter=common_pb2.Filter(equals={"k" * 257: "x"}))),
    ("filter.in", retriever_pb2.DeleteRequest(collection=COLLECTION, filter=many_fields(65))),
    ("filter.start_date", retriever_pb2.DeleteRequest(collection=COLLECTION,
                                                      filter=common_pb2.Filter(start_date="2024-02-30"))),
])
def test_a_bad_delete_deletes_nothing(stub, service, seeded, field: str, request_) -> None:
    before = state(service)[0]
    assert invalid(stub.Delete, request_).startswith(field)
    assert state(service)[0] == before
    assert stub.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="good"), timeout=10).doc_id


@pytest.mark.parametrize("field, request_", [
    ("collection", retriever_pb2.GetDocumentRequest(collection="", doc_id="good")),
    ("collection", retriever_pb2.GetDocumentRequest(collection="../etc", doc_id="good")),
    ("doc_id", retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="")),
    ("doc_id", retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="d" * 513)),
])
def test_a_bad_get_document(stub, field: str, request_) -> None:
    assert invalid(stub.GetDocument, request_).startswith(field)


@pytest.mark.parametrize("field, request_", [
    ("field", retriever_pb2.FieldValuesRequest(field="")),
    ("field", retriever_pb2.FieldValuesRequest(field="f" * 257)),
    ("collections", retriever_pb2.FieldValuesRequest(field="fund_name", collections=[f"c{i}" for i in range(33)])),
    ("collections[0]", retriever_pb2.FieldValuesRequest(field="fund_name", collections=["bad name"])),
])
def test_bad_field_values(stub, field: str, request_) -> None:
    assert invalid(stub.FieldValues, request_).startswith(field)


def test_field_values_still_answer(stub) -> None:
    values = stub.FieldValues(retriever_pb2.FieldValuesRequest(field="fund_name", collections=["meeting_notes"] * 40),
                              timeout=10).values
    assert values  # the demo corpus's funds


def test_a_cancelled_ingest_stops_early(stack: Stack, stub, service) -> None:
    """The client goes away after the first document is indexed: the rest are neither parsed nor embedded."""
    collection = "bad_input_cancel"
    sent = 400
    text = " ".join(f"Sentence {i} tells of the river pilot's log and the tides at the estuary mouth." for i in range(12))
    documents = (retriever_pb2.Document(doc_id=f"cancel-{n}", collection=collection, text=f"{n}: {text}",
                                        summarize=False) for n in range(sent))
    call = stub.Ingest(documents, timeout=300)
    for p in call:
        if retriever_pb2.IngestStage.Name(p.stage) == "INDEXED":
            break
    call.cancel()

    def stored() -> int:
        return dict((c.name, c.documents) for c in service.Stats(retriever_pb2.StatsRequest(), timeout=10).collections
                    ).get(collection, 0)

    time.sleep(1.0)
    settled = stored()
    time.sleep(2.0)  # had the ingest gone on, dozens more documents would land meanwhile
    assert stored() == settled
    assert 1 <= settled < sent // 4, settled
    # The retriever is fine afterwards: the same stream from another call goes in.
    reply = list(stub.Ingest(iter([retriever_pb2.Document(doc_id="after-cancel", collection=collection, text=text,
                                                          summarize=False)]), timeout=60))
    assert retriever_pb2.IngestStage.Name(reply[-1].stage) == "INDEXED"
    app = stack.app("retriever")
    assert app.store.get_document(DEMO, collection, "after-cancel") is not None
