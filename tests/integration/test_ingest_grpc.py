"""Retriever.Ingest, Delete and GetDocument over gRPC against the stack's retriever (real
embedder and extractive generator): files of every format in one stream, per-file errors that
leave the rest going, pages and parents in search results, summaries readable with GetDocument,
delete by filter, and a replacement that searches never see half-done. Calls carry the stack's admin
key, so everything lands in (and is read from) its tenant, DEMO."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import grpc
import pytest

from ragmesh import convert
from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from tests.auth import channel
from tests.stack import DEMO, Stack
from tests.unit.test_ingest_chunking import paragraphs
from tests.unit.test_ingest_parsers import (
    FACTSHEET, TRANSCRIPT, docx_bytes, meeting_note, pdf_bytes, pptx_bytes, sentence,
)

COLLECTION = "ingest_grpc"


@pytest.fixture(scope="module")
def stub(stack: Stack) -> Iterator[retriever_pb2_grpc.RetrieverStub]:
    with channel(stack.address("retriever"), stack.metadata) as ch:
        yield retriever_pb2_grpc.RetrieverStub(ch)


def file_doc(name: str, content: bytes, **kw: object) -> retriever_pb2.Document:
    return retriever_pb2.Document(collection=COLLECTION, filename=name, content=content, **kw)


def ingest(stub, *docs: retriever_pb2.Document) -> dict[str, retriever_pb2.IngestProgress]:
    """The last progress of each document."""
    return {p.doc_id: p for p in stub.Ingest(iter(docs), timeout=120)}


def stage(p: retriever_pb2.IngestProgress) -> str:
    return retriever_pb2.IngestStage.Name(p.stage)


def search(stub, query: str, collection: str = COLLECTION, **kw: object) -> list[retriever_pb2.Hit]:
    return list(stub.Search(retriever_pb2.SearchRequest(query=query, collections=[collection], **kw), timeout=10).hits)


@pytest.fixture(scope="module")
def loaded(stub) -> dict[str, retriever_pb2.IngestProgress]:
    pdf = pdf_bytes([" ".join(sentence(f"zeppelin hangar page{n}", i) for i in range(5)) for n in (1, 2, 3)])
    book = "\n\n".join(f"Chapter {c}\n\n" + paragraphs(8, 5, c) for c in range(1, 4))
    records = "\n".join(json.dumps(r) for r in (meeting_note("mn-ingest-1"), FACTSHEET))
    return ingest(
        stub,
        file_doc("hangar.pdf", pdf, metadata={"team": "ops"}),
        file_doc("plan.docx", docx_bytes([("h", "Scope"), ("p", "The plan covers the orchard irrigation.")])),
        file_doc("deck.pptx", pptx_bytes([("Kickoff", "Goals for the glacier survey."), ("Budget", "Costs.")])),
        file_doc("page.html", b"<h1>Lighthouse</h1><p>The lighthouse keeper logs the fog horn.</p>"),
        file_doc("corpus.jsonl", records.encode()),
        file_doc("call.json", json.dumps(TRANSCRIPT).encode()),
        file_doc("locked.pdf", pdf_bytes(["Secret."], password="pw")),
        file_doc("notes.xyz", b"what is this"),
        retriever_pb2.Document(doc_id="tales", collection=COLLECTION, text=book, title="Village Tales", summarize=True),
    )


def test_every_format_goes_in_and_bad_files_fail_alone(loaded) -> None:
    assert {d: stage(p) for d, p in loaded.items()} == {
        "hangar.pdf": "INDEXED", "plan.docx": "INDEXED", "deck.pptx": "INDEXED", "page.html": "INDEXED",
        "mn-ingest-1": "INDEXED", FACTSHEET["factsheet_id"]: "INDEXED", "t-1": "INDEXED",
        "locked.pdf": "FAILED", "notes.xyz": "FAILED", "tales": "INDEXED",
    }
    assert loaded["locked.pdf"].error.startswith("locked.pdf: is an encrypted PDF")
    assert loaded["notes.xyz"].error.startswith("notes.xyz: is an unsupported file type '.xyz'")
    assert loaded["tales"].doc_type == "BOOK" and loaded["tales"].summarized
    assert loaded["mn-ingest-1"].filename == loaded[FACTSHEET["factsheet_id"]].filename == "corpus.jsonl"


def test_search_hits_carry_pages_sections_and_metadata(stub, loaded) -> None:
    hits = search(stub, "zeppelin hangar page2")
    pdf = [h for h in hits if h.chunk.doc_id == "hangar.pdf"]
    assert pdf and all(h.chunk.metadata["team"] == "ops" and h.chunk.metadata["filetype"] == "pdf" for h in pdf)
    assert all(h.chunk.metadata["page"] in ("1", "2", "3") for h in pdf)
    slide = search(stub, "glacier survey")[0].chunk
    assert (slide.doc_id, slide.metadata["section"], slide.metadata["page"]) == ("deck.pptx", "Kickoff", "1")
    transcript = search(stub, "launch moved to May")[0].chunk
    assert transcript.metadata["type"] == "transcript" and transcript.metadata["tags"] == "launch, planning"


def test_factsheet_sections_expand_to_the_complete_json_once(stub, loaded) -> None:
    where = common_pb2.Filter(equals={"factsheet_id": FACTSHEET["factsheet_id"]})
    hits = search(stub, "Kestrel Brazil exposure performance holdings", filter=where, top_k=10,
                  boosters=retriever_pb2.Boosters(expand_parents=True))
    assert len(hits) == 3 and {h.chunk.metadata["section_type"] for h in hits} == {
        "performance", "holdings", "commentary"}
    expanded = [h.parent_text for h in hits if h.parent_text]
    assert len(expanded) == 1 and json.loads(expanded[0]) == FACTSHEET


def test_get_document_returns_the_summaries_and_the_table_of_contents(stack: Stack, stub, loaded) -> None:
    info = stub.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="tales"), timeout=10)
    assert info.title == "Village Tales" and info.metadata["doc_type"] == "BOOK" and info.summary
    assert [s.title for s in info.sections] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert all(s.summary for s in info.sections)
    record = stack.app("retriever").store.get_document(DEMO, COLLECTION, "tales")
    assert convert.document_info_from_proto(info) == record  # what the gateway's client reads back
    docx = stub.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="plan.docx"), timeout=10)
    assert [s.title for s in docx.sections] == ["Scope"] and docx.summary == ""  # short: no summary by default
    with pytest.raises(grpc.RpcError) as err:
        stub.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id="missing"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_delete_by_filter_and_by_id(stub) -> None:
    docs = [retriever_pb2.Document(doc_id=f"del-{i}", collection="ingest_delete", text=f"Delete test {i} text.",
                                   metadata={"batch": "x" if i % 2 else "y"}) for i in range(4)]
    assert {stage(p) for p in ingest(stub, *docs).values()} == {"INDEXED"}
    reply = stub.Delete(retriever_pb2.DeleteRequest(collection="ingest_delete",
                                                    filter=common_pb2.Filter(equals={"batch": "x"})), timeout=10)
    assert (reply.documents, reply.chunks) == (2, 2)
    reply = stub.Delete(retriever_pb2.DeleteRequest(collection="ingest_delete", doc_ids=["del-0"]), timeout=10)
    assert reply.documents == 1
    assert [h.chunk.doc_id for h in search(stub, "delete test text", "ingest_delete")] == ["del-2"]
    with pytest.raises(grpc.RpcError) as err:
        stub.Delete(retriever_pb2.DeleteRequest(collection="ingest_delete", doc_ids=["del-2"],
                                                filter=common_pb2.Filter(equals={"batch": "y"})), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not both" in err.value.details()


def test_searches_during_a_replacement_see_one_version_whole(stub) -> None:
    """Each version's chunks all carry its marker; a search must never return both markers."""
    def version(marker: str, count: int) -> retriever_pb2.Document:
        text = " ".join(f"The {marker} paragraph {i} describes the quarry lantern rules in detail for everyone."
                        for i in range(count))
        return retriever_pb2.Document(doc_id="swap", collection="ingest_swap", text=text)

    ingest(stub, version("alphaversion", 40))
    seen: list[set[str]] = []
    stop = threading.Event()

    def searcher() -> None:
        while not stop.is_set():
            hits = search(stub, "quarry lantern rules", "ingest_swap", top_k=50)
            seen.append({m for h in hits for m in ("alphaversion", "betaversion") if m in h.chunk.text})

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(6):
            ingest(stub, version("betaversion" if i % 2 == 0 else "alphaversion", 40 if i % 2 else 12))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert seen and all(len(markers) == 1 for markers in seen)
    assert {m for markers in seen for m in markers} == {"alphaversion", "betaversion"}  # both were seen


def test_the_tail_of_a_long_faq_answer_is_found_by_dense_search_alone(stub) -> None:
    """MiniLM reads ~256 tokens of a text: a FAQ answer of 4,000 characters in one chunk would be
    embedded by its head, and its tail found by keywords only. Split within EMBED_MAX_CHARS (800),
    the tail's own chunk matches a question about it on the dense side, with no keyword help."""
    head = " ".join(f"Travel expense rule {i}: economy fares, receipts within {i + 5} days, and the "
                    f"per diem of region {i} apply to every trip booked through the portal." for i in range(30))
    tail = "Anyone visiting Reykjavik takes the geothermal lagoon shuttle, booked at the hotel concierge desk."
    faq = ("Frequently asked questions\n\nQ: What does the travel policy cover?\nA: " + head + " " + tail
           + "\n\nQ: How do I book a hotel?\nA: Hotels are booked on the travel portal two weeks ahead."
           + "\n\nQ: Can I fly business class?\nA: Only on flights longer than eight hours.")
    assert len(head) > 4000
    done = ingest(stub, file_doc("travel-faq.txt", faq.encode()))
    assert stage(done["travel-faq.txt"]) == "INDEXED"
    hits = search(stub, "bathing in hot springs in Iceland: how do I get there?", top_k=3,
                  dense_weight=1.0, sparse_weight=0.0)
    top = hits[0]
    assert tail in top.chunk.text and top.dense_rank == 1
    assert top.chunk.text.startswith("Q: What does the travel policy cover?") and len(top.chunk.text) <= 800
    assert top.dense_score > 0.3, top.dense_score
