"""Files sent in pieces, tried as a sender and as an attacker would send them. A large file used to reach
the retriever as one gRPC message: receiving and decoding 40 MB held its event loop, and every tenant's
calls on it, for a quarter of a second, and each process held the file whole. Now the gateway sends a
file in pieces of 1 MiB (retriever.proto's Document.more_content) and the retriever writes each to its
spool as it arrives. So: a file in pieces is stored as the same document as the file sent whole; pieces
that break the contract (a field besides content on a later piece, a piece over 4 MiB, pieces past
INGEST_MAX_BYTES, a stream ending inside a file) end the call with INVALID_ARGUMENT naming the field; and
a sender that goes away halfway leaves nothing on disk."""
from __future__ import annotations

import io
import os
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import docx
import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from services.gateway.upload_memory import PIECE_BYTES
from services.retriever.ingest.workers import MAX_PIECE_BYTES, ParsePool
from tests.auth import bearer, channel, headers
from tests.stack import Stack

MB = 1024 * 1024
TENANT = "pieces-co"


def padded_docx(size: int) -> bytes:
    """A real DOCX of a few sentences, padded to `size` bytes with an incompressible stored member (as
    pictures pad a report), so a large file parses to a few chunks."""
    made = io.BytesIO()
    document = docx.Document()
    for i in range(6):
        document.add_paragraph(f"The Quillmere lighthouse fund bought {i + 3} turbines for the Skerry wind farm "
                               f"in quarter {i % 4 + 1}, paid from its second tranche.")
    document.save(made)
    out = io.BytesIO(made.getvalue())
    with zipfile.ZipFile(out, "a", zipfile.ZIP_STORED) as z:
        z.writestr("word/media/picture.bin", os.urandom(max(0, size - len(made.getvalue()))))
    return out.getvalue()


def split(doc: retriever_pb2.Document, piece: int) -> list[retriever_pb2.Document]:
    """`doc` as a sender of pieces sends it: its fields and first piece, then the content's other pieces."""
    content = doc.content
    first = retriever_pb2.Document()
    first.CopyFrom(doc)
    first.content, first.more_content = content[:piece], len(content) > piece
    rest = [retriever_pb2.Document(content=content[i : i + piece], more_content=i + piece < len(content))
            for i in range(piece, len(content), piece)]
    return [first, *rest]


def ingest(address: str, key: str, messages: Iterable[retriever_pb2.Document]) -> list[retriever_pb2.IngestProgress]:
    with channel(address, bearer(key)) as ch:
        return list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter(messages), timeout=120))


def spooled_files(folder: Path) -> int:
    """Files this process holds open in the spool folder (nameless ones show as '#n (deleted)')."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:  # closed meanwhile
            pass
    return count


def until(condition, what: str, within_s: float = 30) -> None:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.key(TENANT, "root", "admin")


def test_a_large_file_uploaded_over_http_goes_in_pieces_and_is_stored_as_sent_whole(
        stack: Stack, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    content = padded_docx(2 * PIECE_BYTES + 12345)
    completed: list[int] = []
    received = ParsePool.received

    async def counted(pool: ParsePool, doc, pieces, max_bytes: int) -> None:  # noqa: ANN001 - the pool's own
        await received(pool, doc, pieces, max_bytes)
        completed.append(doc.spooled.size if doc.spooled is not None else len(doc.content))

    monkeypatch.setattr(ParsePool, "received", counted)
    reply = httpx.post(stack.http_url + "/api/documents", headers=headers(key), timeout=120,
                       files={"files": ("report.docx", content)}, data={"collection": "documents"})
    assert reply.status_code == 200, reply.text
    assert '"stage": "INDEXED"' in reply.text, reply.text
    assert completed == [len(content)], "the gateway sent the file in pieces, put together whole"
    with channel(stack.address("retriever"), bearer(key)) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        in_pieces = stub.GetDocument(retriever_pb2.GetDocumentRequest(collection="documents", doc_id="report.docx"))
        whole = retriever_pb2.Document(doc_id="report.docx", filename="report.docx", collection="documents",
                                       content=content)
        again = list(stub.Ingest(iter([whole]), timeout=120))
        assert [retriever_pb2.IngestStage.Name(p.stage) for p in again] == ["UNCHANGED"], again
        list(stub.Ingest(iter([retriever_pb2.Document(doc_id="whole.docx", filename="report.docx",
                                                      collection="documents", content=content)]), timeout=120))
        sent_whole = stub.GetDocument(retriever_pb2.GetDocumentRequest(collection="documents", doc_id="whole.docx"))
    assert in_pieces.chunk_count > 0
    assert (sent_whole.content_hash, sent_whole.chunk_count) == (in_pieces.content_hash, in_pieces.chunk_count)


def test_a_file_sent_in_pieces_of_any_size_is_the_same_document(stack: Stack, key: str) -> None:
    text = "\n\n".join(f"## Quarter {i}\n\nThe Skerry wind farm turned {i * 7} megawatt hours in quarter {i}; "
                       f"the Quillmere fund booked it under note {i:03d}." for i in range(40)).encode()
    whole = retriever_pb2.Document(doc_id="notes.md", filename="notes.md", collection="documents", content=text)
    first = ingest(stack.address("retriever"), key, [whole])
    assert retriever_pb2.IngestStage.Name(first[-1].stage) == "INDEXED", first
    for piece in (1, 777, len(text) - 1):
        again = ingest(stack.address("retriever"), key, split(whole, piece))
        assert [retriever_pb2.IngestStage.Name(p.stage) for p in again] == ["UNCHANGED"], (piece, again)


def refused(address: str, key: str, messages: list[retriever_pb2.Document]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        ingest(address, key, messages)
    return caught.value


def test_pieces_that_break_the_contract_are_refused_naming_the_field_and_leave_nothing_on_disk(
        stack: Stack, key: str) -> None:
    spool = stack.app("retriever").parsing.spool.folder
    before = spooled_files(spool)
    doc = retriever_pb2.Document(doc_id="f.pdf", filename="f.pdf", collection="documents", content=b"%PDF" * 5000)
    stray = split(doc, 8000)
    stray[1].doc_id = "another.pdf"  # a later piece naming a document of its own
    smuggled = split(doc, 8000)
    smuggled[2].metadata["owner"] = "mallory"
    oversized = [retriever_pb2.Document(doc_id="f.pdf", filename="f.pdf", collection="documents",
                                        content=b"x" * 10, more_content=True),
                 retriever_pb2.Document(content=b"x" * (MAX_PIECE_BYTES + 1))]
    cut = split(doc, 8000)[:-1]  # the stream ends while more was announced
    for messages, field in ((stray, "doc_id"), (smuggled, "metadata"), (oversized, "content"),
                            (cut, "more_content")):
        error = refused(stack.address("retriever"), key, messages)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error)
        assert error.details().startswith(field), (field, error.details())

    small = stack.start_variant("retriever", ingest_max_bytes=2 * MB)
    past = split(retriever_pb2.Document(doc_id="big.pdf", filename="big.pdf", collection="documents",
                                        content=b"y" * (3 * MB)), MB)
    error = refused(small.address, key, past)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith("content"), error
    assert "INGEST_MAX_BYTES" in error.details()
    until(lambda: spooled_files(spool) <= before, "every refused file's spool file removed")


def test_a_sender_going_away_halfway_through_a_file_leaves_no_spool_file(stack: Stack, key: str) -> None:
    spool = stack.app("retriever").parsing.spool.folder
    before = spooled_files(spool)
    release = threading.Event()
    pieces = split(retriever_pb2.Document(doc_id="half.pdf", filename="half.pdf", collection="documents",
                                          content=os.urandom(3 * MB)), MB)

    def halfway() -> Iterator[retriever_pb2.Document]:
        yield from pieces[:2]
        release.wait(60)  # the rest never comes

    with channel(stack.address("retriever"), bearer(key)) as ch:
        call = retriever_pb2_grpc.RetrieverStub(ch).Ingest(halfway(), timeout=120)
        try:
            until(lambda: spooled_files(spool) > before, "the pieces received written to the spool")
            call.cancel()
        finally:
            release.set()
    until(lambda: spooled_files(spool) <= before, "the half-received file's spool file removed")


def test_the_gateway_takes_each_file_whole_and_refuses_pieces_naming_the_field(stack: Stack, key: str) -> None:
    """Pieces are what the gateway makes of a file for the retriever; its own clients send a file whole
    (within their receiving share), so a piece sent to it is refused, not passed on."""
    pieces = split(retriever_pb2.Document(doc_id="p.pdf", filename="p.pdf", collection="documents",
                                          content=b"%PDF" * 1000), 1000)
    with channel(stack.address("gateway"), bearer(key)) as ch:
        with pytest.raises(grpc.RpcError) as caught:
            list(gateway_pb2_grpc.GatewayStub(ch).Ingest(iter(pieces), timeout=60))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value
    assert caught.value.details().startswith("more_content"), caught.value.details()
