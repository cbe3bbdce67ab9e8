"""The ingest pipeline on a real SQLite store and index with a deterministic fake embedder and
the real extractive generator: chunk metadata, what gets embedded, idempotent re-ingest,
replacement, embedding batches and retries, failures that leave nothing behind, summaries, and
delete by id and by filter."""
from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from ragmesh.errors import InvalidArgument, ResourceExhausted, Unavailable
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION, Document, SearchFilter
from services.generator.backends import GenerationRequest
from services.generator.backends.extractive import ExtractiveBackend
from services.retriever.index import IndexRegistry
from services.retriever.ingest.pipeline import CALLS_AHEAD, Ingestor, Progress, SummaryPolicy
from services.retriever.ingest.summaries import Summarizer, SummaryPrompt
from tests.unit.test_ingest_chunking import paragraphs
from tests.unit.test_ingest_parsers import FACTSHEET, pdf_bytes, sentence

DIM = 16


class FakeEmbedder:
    """Hash vectors; fails the first `failures` calls with `error`, or texts containing `poison`."""

    def __init__(self, failures: int = 0, error: type[Exception] = Unavailable, poison: str = "") -> None:
        self.calls: list[int] = []
        self.tasks: list[str] = []
        self.failures, self.error, self.poison = failures, error, poison

    async def __call__(self, texts: list[str], task: str) -> np.ndarray:
        self.calls.append(len(texts))
        self.tasks.append(task)
        if self.failures:
            self.failures -= 1
            raise self.error("embedder: UNAVAILABLE: try again")
        if self.poison and any(self.poison in t for t in texts):
            raise InvalidArgument("texts", "the embedder refused this text")
        vectors = np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:DIM], np.uint8) for t in texts])
        vectors = vectors.astype(np.float32) + 1
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class FakeGenerator:
    """The real extractive backend, or an outage."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.prompts: list[SummaryPrompt] = []

    async def __call__(self, p: SummaryPrompt) -> str:
        self.prompts.append(p)
        if self.down:
            raise Unavailable("generator: UNAVAILABLE: connection refused")
        return ExtractiveBackend(delay_ms=0).compose(GenerationRequest("extractive", p.question, p.blocks))


def make(tmp_path: Path, embed: FakeEmbedder | None = None, generator: FakeGenerator | None = None,
         **kw: object) -> Ingestor:
    return Ingestor(SqliteStore(tmp_path / "store.sqlite3"), IndexRegistry(DIM), embed or FakeEmbedder(),
                    summarizer=Summarizer(generator or FakeGenerator()), backoff_s=0.001, **kw)


def run(ingestor: Ingestor, *docs: Document) -> list[Progress]:
    async def stream() -> AsyncIterator[Document]:
        for d in docs:
            yield d

    async def collect() -> list[Progress]:
        return [p async for p in ingestor.ingest(stream())]

    return asyncio.run(collect())


def final(progress: list[Progress]) -> dict[str, Progress]:
    return {p.doc_id: p for p in progress if p.stage in ("INDEXED", "UNCHANGED", "FAILED")}


def stored(ingestor: Ingestor, doc_id: str | None = None) -> list:
    return [s for s in ingestor.store.iter_chunks() if doc_id is None or s.chunk.doc_id == doc_id]


BOOK = "\n\n".join(f"Chapter {c}\n\n" + paragraphs(8, 5, c) for c in range(1, 4))


def test_every_chunk_carries_its_metadata_and_only_children_are_indexed(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    progress = run(ingestor, Document("book", "library", text=BOOK, metadata={"shelf": "b2"}, date="2024-02-01"))
    assert [p.stage for p in progress] == ["PARSED", "CHUNKED", "EMBEDDED", "INDEXED"]
    assert progress[-1].doc_type == "BOOK" and progress[-1].sensitivity == "LOW"
    chunks = stored(ingestor, "book")
    assert len(chunks) == progress[-1].chunks
    for i, s in enumerate(chunks):
        meta = s.chunk.metadata
        assert s.chunk.chunk_index == i and meta["chunk_index"] == str(i)
        assert {k: meta[k] for k in ("shelf", "doc_type", "sensitivity", "redacted", "filetype")} == {
            "shelf": "b2", "doc_type": "BOOK", "sensitivity": "LOW", "redacted": "false", "filetype": "text"}
        assert meta["section"].startswith("Chapter") and meta["page"] == "" and s.chunk.date == "2024-02-01"
        assert (s.vector is None) == (s.chunk.parent_chunk_id == "")  # parents are the ones without vectors
    parents = {s.chunk.chunk_id for s in chunks if s.vector is None}
    assert parents and all(s.chunk.parent_chunk_id in parents for s in chunks if s.vector is not None)
    index = ingestor.registry.get("library")
    assert index.live == len(chunks) - len(parents)  # children searched, parents kept for expansion
    assert set(index.parents) == parents


def test_a_stream_is_read_ahead_no_further_than_its_embedding_calls_under_way(tmp_path: Path) -> None:
    """The next document is read once the ones in hand fill an embedding call (one text here), while
    at most CALLS_AHEAD earlier calls are under way besides the one waited for: the embedder finds the
    next call queued, and a long stream never piles up."""
    ingestor = make(tmp_path, batch_size=1)
    events: list[str] = []

    async def stream() -> AsyncIterator[Document]:
        for i in range(5):
            events.append(f"read d{i}")
            yield Document(f"d{i}", "c", text=f"Document {i} about the harbour.")

    async def main() -> None:
        async for p in ingestor.ingest(stream()):
            if p.stage in ("EMBEDDED", "INDEXED"):
                events.append(f"{p.stage.lower()} {p.doc_id}")

    asyncio.run(main())
    embedded = [e for e in events if not e.startswith("indexed")]
    assert CALLS_AHEAD == 2
    assert embedded == ["read d0", "read d1", "read d2", "embedded d0", "read d3", "embedded d1", "read d4",
                        "embedded d2", "embedded d3", "embedded d4"]
    assert {e for e in events if e.startswith("indexed")} == {f"indexed d{i}" for i in range(5)}


def test_conversation_memory_is_embedded_as_document_fast_never_in_a_call_with_the_corpus(tmp_path: Path) -> None:
    """Memory takes the fastest document encoder; the corpus keeps DOCUMENT, so a stream holding both
    embeds them in calls of their own."""
    embed = FakeEmbedder()
    ingestor = make(tmp_path, embed)
    memory = {MEMORY_AUTHOR: "alice", "conversation_id": "c1"}
    docs = [Document("n1", "notes", text="The harbour opens at six."),
            Document("m1", MEMORY_COLLECTION, text="When does the harbour open?", metadata=memory),
            Document("m2", MEMORY_COLLECTION, text="At six, the notes say.", metadata=memory),
            Document("n2", "notes", text="The ferry leaves at seven.")]
    assert {p.stage for p in final(run(ingestor, *docs)).values()} == {"INDEXED"}
    assert list(zip(embed.tasks, embed.calls)) == [("DOCUMENT", 1), ("DOCUMENT_FAST", 2), ("DOCUMENT", 1)]


def test_a_memory_turn_keeps_its_vector_for_every_chunk_and_another_document_is_embedded(tmp_path: Path) -> None:
    """A conversation memory turn is found by its question: the vector sent stands for each of its chunks. Any
    other document's vector is taken only as its one chunk's: split into several, it is embedded."""
    embed = FakeEmbedder()
    ingestor = make(tmp_path, embed)
    vector = np.eye(DIM, dtype=np.float32)[0]
    text = "User: What did the harbour committee decide?\n\n" + BOOK
    docs = [Document("t1", MEMORY_COLLECTION, text=text, metadata={MEMORY_AUTHOR: "alice", "conversation_id": "c1"},
                     vector=vector),
            Document("n1", "notes", text=text, vector=vector)]
    assert {p.stage for p in final(run(ingestor, *docs)).values()} == {"INDEXED"}
    turn = [s.vector for s in stored(ingestor, "t1") if s.vector is not None]
    notes = [s.vector for s in stored(ingestor, "n1") if s.vector is not None]
    assert len(turn) > 1 and all(np.array_equal(v, vector) for v in turn)
    assert len(notes) == len(turn) and not any(np.array_equal(v, vector) for v in notes)
    assert embed.tasks == ["DOCUMENT"]


def test_a_pdfs_chunks_carry_their_pages(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    pages = [" ".join(sentence(f"page{n}", i) for i in range(4)) for n in (1, 2, 3)]
    run(ingestor, Document("", "library", content=pdf_bytes(pages), filename="minutes.pdf"))
    chunks = stored(ingestor, "minutes.pdf")
    assert chunks and all(s.chunk.metadata["filename"] == "minutes.pdf" for s in chunks)
    for s in chunks:
        named = sorted({int(w[4:]) for w in s.chunk.text.split() if w.startswith("page") and w[4:].isdigit()})
        assert (int(s.chunk.metadata["page"]), int(s.chunk.metadata["page_end"])) == (named[0], named[-1])
    assert {s.chunk.metadata["page"] for s in chunks} >= {"1", "2"}


def test_redaction_is_recorded_on_the_document_and_each_chunk(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    text = " ".join(sentence("account", i) for i in range(16)) + " Reach the owner at owner@example.com today."
    done = final(run(ingestor, Document("acct", "c", text=text)))["acct"]
    assert (done.redactions, done.sensitivity, done.doc_type) == (1, "HIGH", "USER")
    chunks = stored(ingestor, "acct")
    assert all(s.chunk.metadata["sensitivity"] == "HIGH" for s in chunks)
    flags = {s.chunk.metadata["redacted"] for s in chunks if "[REDACTED_EMAIL]" in s.chunk.text}
    assert flags == {"true"} and "owner@example.com" not in " ".join(s.chunk.text for s in chunks)
    assert ingestor.store.get_document("", "c", "acct").metadata["sensitivity"] == "HIGH"


def test_the_same_content_again_changes_nothing_and_new_content_replaces_all(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    first = Document("d", "c", text=paragraphs(5, 4, 1))
    indexed = final(run(ingestor, first))["d"]
    version = ingestor.store.version()
    again = run(ingestor, first)
    assert [p.stage for p in again] == ["UNCHANGED"] and again[0].chunks == indexed.chunks
    assert ingestor.store.version() == version
    run(ingestor, Document("d", "c", text="A much shorter second version. It has two sentences."))
    texts = [s.chunk.text for s in stored(ingestor, "d")]
    assert texts == ["A much shorter second version. It has two sentences."]
    assert ingestor.registry.get("c").live == 1


def test_embedding_goes_in_batches_and_retries_transient_failures(tmp_path: Path) -> None:
    embed = FakeEmbedder(failures=2, error=Unavailable)
    ingestor = make(tmp_path, embed, batch_size=3)
    done = final(run(ingestor, Document("d", "c", text=paragraphs(8, 5, 2))))["d"]
    assert done.stage == "INDEXED"
    assert embed.calls[:3] == [3, 3, 3]  # two failures, then the first batch went through
    assert max(embed.calls) <= 3 and sum(embed.calls[2:]) == ingestor.registry.get("c").live

    limited = FakeEmbedder(failures=1, error=ResourceExhausted)
    assert final(run(make(tmp_path / "b", limited), Document("d", "c", text="One. Two.")))["d"].stage == "INDEXED"


def test_a_failed_document_leaves_nothing_and_the_stream_goes_on(tmp_path: Path) -> None:
    embed = FakeEmbedder(poison="POISON")
    ingestor = make(tmp_path, embed, retries=1)
    out = final(run(ingestor,
                    Document("a", "c", text="First document. It is fine."),
                    Document("b", "c", content=b"POISON text that the embedder refuses.", filename="b.txt"),
                    Document("c", "c", text="Third document. Also fine.")))
    assert (out["a"].stage, out["b"].stage, out["c"].stage) == ("INDEXED", "FAILED", "INDEXED")
    assert out["b"].error.startswith("b.txt: texts: the embedder refused") and out["b"].filename == "b.txt"
    assert ingestor.store.get_document("", "c", "b") is None and not stored(ingestor, "b")

    down = make(tmp_path / "down", FakeEmbedder(failures=99), retries=2)
    failed = final(run(down, Document("x", "c", text="Never embedded.")))["x"]
    assert failed.stage == "FAILED" and "UNAVAILABLE" in failed.error and not stored(down)


def test_a_bad_record_fails_alone_and_its_file_goes_on(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    records = b'{"id": "n1", "text": "First note."}\n{"id": "n2", "text": \n{"id": "n3", "text": "Third note."}\n'
    out = final(run(ingestor, Document("notes", "c", content=records, filename="notes.jsonl")))
    assert {k: p.stage for k, p in out.items()} == {"n1": "INDEXED", "notes#2": "FAILED", "n3": "INDEXED"}
    assert out["notes#2"].error.startswith("notes.jsonl: line 2 is not valid JSON")
    assert sorted({s.chunk.doc_id for s in stored(ingestor)}) == ["n1", "n3"]


@pytest.mark.parametrize(("doc", "reason"), [
    (Document("", "c", content=pdf_bytes(["Secret."], password="pw"), filename="locked.pdf"), "locked.pdf: is an encrypted PDF"),
    (Document("", "c", content=b"%PDF-1.7 truncated", filename="broken.pdf"), "broken.pdf: is not a readable PDF"),
    (Document("", "c", content=b"", filename="empty.txt"), "empty.txt: is empty"),
    (Document("", "c", content=b"x" * 5001, filename="huge.txt"), "huge.txt: is 5,001 bytes, over the limit of 5,000"),
    (Document("", "c", content=b"caf\xe9", filename="latin1.txt"), "latin1.txt: is not UTF-8 text"),
    (Document("", "c", content=b"GIF89a", filename="cat.gif"), "cat.gif: is an unsupported file type '.gif'"),
    (Document("d", "bad name!", text="Hi."), "collection: must be"),
    (Document("d", "c", text="Hi.", date="2024-13-01"), "date: is not a calendar date"),
])
def test_bad_input_is_reported_by_name_and_writes_nothing(tmp_path: Path, doc: Document, reason: str) -> None:
    ingestor = make(tmp_path, max_bytes=5000)
    progress = run(ingestor, doc, Document("ok", "c", text="A good document follows."))
    assert progress[0].stage == "FAILED" and progress[0].error.startswith(reason), progress[0].error
    assert [p.doc_id for p in progress if p.stage == "INDEXED"] == ["ok"]
    assert [s.chunk.doc_id for s in stored(ingestor)] == ["ok"]


def test_summaries_are_stored_with_the_document(tmp_path: Path) -> None:
    generator = FakeGenerator()
    ingestor = make(tmp_path, generator=generator)
    done = final(run(ingestor, Document("book", "c", text=BOOK, title="Village Tales")))["book"]
    assert done.summarized
    record = ingestor.store.get_document("", "c", "book")
    assert [s.title for s in record.sections] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert all(s.summary for s in record.sections) and record.summary
    assert all("[" not in s.summary for s in record.sections)  # citation markers stripped
    assert 0 < len(record.summary) <= 2500 and all(len(s.summary) <= 700 for s in record.sections)
    assert len(generator.prompts) == 4  # three sections, then the global summary from their summaries
    assert "Chapter 1:" in generator.prompts[-1].blocks[0].text


def test_summaries_follow_the_policy_and_the_request(tmp_path: Path) -> None:
    generator = FakeGenerator()
    ingestor = make(tmp_path, generator=generator, summaries=SummaryPolicy(enabled=True, min_chars=5000))
    short = Document("short", "c", text=paragraphs(2, 3, 4))
    assert not final(run(ingestor, short))["short"].summarized and not generator.prompts  # under min_chars
    assert final(run(ingestor, Document("skip", "c", text=BOOK, summarize=False)))["skip"].summarized is False
    assert ingestor.store.get_document("", "c", "skip").sections[0].title == "Chapter 1"  # the ToC all the same
    again = run(ingestor, Document("short", "c", text=short.text, summarize=True))  # same content, now with one
    assert final(again)["short"].stage == "INDEXED" and ingestor.store.get_document("", "c", "short").summary


def test_a_generator_outage_only_loses_the_summaries(tmp_path: Path) -> None:
    ingestor = make(tmp_path, generator=FakeGenerator(down=True))
    done = final(run(ingestor, Document("book", "c", text=BOOK, summarize=True)))["book"]
    assert done.stage == "INDEXED" and not done.summarized
    record = ingestor.store.get_document("", "c", "book")
    assert record.summary == "" and [s.title for s in record.sections] == ["Chapter 1", "Chapter 2", "Chapter 3"]


def test_a_factsheets_sections_point_at_its_json_kept_once(tmp_path: Path) -> None:
    import json

    ingestor = make(tmp_path)
    run(ingestor, Document("", "factsheets", content=json.dumps(FACTSHEET).encode(), filename="fs.json"))
    chunks = stored(ingestor, FACTSHEET["factsheet_id"])
    parent, children = chunks[0], chunks[1:]
    assert parent.vector is None and json.loads(parent.chunk.text) == FACTSHEET
    assert {c.chunk.metadata["section_type"] for c in children} == {"performance", "holdings", "commentary"}
    assert all(c.chunk.parent_chunk_id == parent.chunk.chunk_id for c in children)
    assert all(c.chunk.metadata["fund_name"] == "Kestrel Emerging Markets" for c in children)


def test_delete_by_id_and_by_filter(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    run(ingestor, *[Document(f"d{i}", "c", text=f"Document {i} text.", metadata={"fund": "A" if i < 3 else "B"})
                    for i in range(5)],
        Document("d0", "c", text="Another tenant's document.", tenant="acme", metadata={"fund": "A"}))

    async def delete(*args: object) -> tuple[int, int]:
        return await ingestor.delete(*args)

    assert asyncio.run(delete("", "c", ["d4"])) == (1, 1)
    assert asyncio.run(delete("", "c", [], SearchFilter(equals={"fund": "A"}))) == (3, 3)
    assert sorted({s.chunk.doc_id for s in stored(ingestor) if not s.chunk.tenant}) == ["d3"]
    assert [s.chunk.tenant for s in stored(ingestor, "d0")] == ["acme"]  # the tenant scope holds
    assert ingestor.registry.indexed("c") == 2
    assert asyncio.run(delete("", "c", [], SearchFilter(equals={"fund": "none"}))) == (0, 0)
    with pytest.raises(InvalidArgument, match="at least one condition"):
        asyncio.run(delete("", "c", [], SearchFilter()))
    with pytest.raises(InvalidArgument, match="not both"):
        asyncio.run(delete("", "c", ["d3"], SearchFilter(equals={"fund": "B"})))


def test_a_long_text_without_headings_is_summarised_in_parts(tmp_path: Path) -> None:
    generator = FakeGenerator()
    ingestor = make(tmp_path, generator=generator)
    text = paragraphs(30, 6, 7)
    assert len(text) > 10_000 and "Chapter" not in text
    run(ingestor, Document("long", "c", text=text))
    record = ingestor.store.get_document("", "c", "long")
    assert [s.title for s in record.sections] == [f"Part {i}" for i in range(1, len(record.sections) + 1)]
    assert len(record.sections) >= 3 and all(s.summary for s in record.sections) and record.summary
    assert all(len(p.blocks[0].text) <= 5000 for p in generator.prompts)  # 004's input bound per section
