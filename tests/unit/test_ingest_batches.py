"""An ingest stream's documents share embedding calls and commits: short documents go in one
embedding call, documents ready while a commit runs go in the next one (bounded in rows), a
document sent twice in a stream ends as its last version, a client that waits for INDEXED before
sending more is answered, and one document's bad chunk ids fail it alone."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from ragmesh.types import Chunk, Document, DocumentRecord, SearchFilter, StoredChunk
from services.retriever.ingest.batch import CommitBatch, Ready
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.pipeline import CALLS_AHEAD, Ingestor, Progress
from tests.unit.test_ingest_pipeline import DIM, FakeEmbedder, final, make, stored


class GatedCommitter(Committer):
    """Records each commit's documents; a commit waits for `gate` (open unless closed)."""

    def __init__(self, ingestor: Ingestor) -> None:
        super().__init__(ingestor.store, ingestor.registry)
        self.sizes: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        ingestor.committer = self

    def replace(self, items):
        self.sizes.append(len(items))
        assert self.gate.wait(10)
        return super().replace(items)


def one_chunk(i: int, marker: str = "harbour") -> Document:
    return Document(f"d{i}", "c", text=f"Document {i} about the {marker}.")


def ingest(ingestor: Ingestor, stream: AsyncIterator[Document]) -> list[Progress]:
    async def collect() -> list[Progress]:
        return [p async for p in ingestor.ingest(stream)]

    return asyncio.run(asyncio.wait_for(collect(), 30))


async def listed(*docs: Document) -> AsyncIterator[Document]:
    for d in docs:
        yield d


def test_short_documents_share_one_embedding_call(tmp_path: Path) -> None:
    embed = FakeEmbedder()
    ingestor = make(tmp_path, embed, batch_size=4)
    out = final(ingest(ingestor, listed(*[one_chunk(i) for i in range(6)])))
    assert {p.stage for p in out.values()} == {"INDEXED"} and len(out) == 6
    assert embed.calls == [4, 2]
    assert len(stored(ingestor)) == 6


def test_documents_ready_while_a_commit_runs_share_the_next_commit(tmp_path: Path) -> None:
    ingestor = make(tmp_path, batch_size=1)
    committer = GatedCommitter(ingestor)
    committer.gate.clear()

    async def stream() -> AsyncIterator[Document]:
        for i in range(4):
            yield one_chunk(i)
        committer.gate.set()  # asked for a fifth: d1-d3 are embedded and waiting while d0's commit holds

    progress = ingest(ingestor, stream())
    assert committer.sizes == [1, 3]
    stages = [(p.doc_id, p.stage) for p in progress if p.stage in ("EMBEDDED", "INDEXED")]
    for i in range(4):
        assert stages.index((f"d{i}", "EMBEDDED")) < stages.index((f"d{i}", "INDEXED"))
    assert len(stored(ingestor)) == 4 and ingestor.registry.get("c").live == 4


def test_a_stream_waits_once_its_commit_holds_its_rows(tmp_path: Path) -> None:
    """Documents wait for their commit up to `commit_rows` chunks; then the stream is read no further
    (than the embedding calls under way) until the commit under way ends."""
    ingestor = make(tmp_path, batch_size=1, commit_rows=2)
    committer = GatedCommitter(ingestor)
    committer.gate.clear()
    read: list[int] = []

    async def stream() -> AsyncIterator[Document]:
        for i in range(8):
            read.append(i)
            yield one_chunk(i)

    async def main() -> list[Progress]:
        collecting = asyncio.create_task(_collect(ingestor.ingest(stream())))
        await asyncio.sleep(0.3)
        assert CALLS_AHEAD == 2 and read == [0, 1, 2, 3, 4], \
            "d0 is being committed, d1 and d2 wait, d3 and d4 are in embedding calls under way: the stream waits"
        committer.gate.set()
        return await asyncio.wait_for(collecting, 30)

    out = final(asyncio.run(main()))
    assert [out[f"d{i}"].stage for i in range(8)] == ["INDEXED"] * 8
    assert sum(committer.sizes) == 8 and max(committer.sizes) <= 2


def test_a_commit_never_takes_more_than_its_rows_however_many_became_ready(tmp_path: Path) -> None:
    """Five documents ready while a commit holds (the embedding calls under way ended meanwhile) go
    in commits of at most `rows` chunks, oldest first, each reported once its own commit ends."""
    ingestor = make(tmp_path)
    committer = GatedCommitter(ingestor)
    committer.gate.clear()
    commits: CommitBatch[str] = CommitBatch(committer, rows=2)

    def ready(i: int) -> Ready[str]:
        doc = one_chunk(i)
        record = DocumentRecord(tenant="", collection="c", doc_id=doc.doc_id, title="", date="",
                                content_hash=str(i), chunk_count=1)
        chunk = Chunk(chunk_id=f"{doc.doc_id}:0", doc_id=doc.doc_id, collection="c", text=doc.text)
        return Ready(record, [StoredChunk(chunk, np.ones(DIM, np.float32))], doc.doc_id, lambda exc: f"failed {exc}")

    async def main() -> list[str]:
        commits.add(ready(0))
        reported = await commits.turn()
        for i in range(1, 6):
            commits.add(ready(i))
        committer.gate.set()
        return reported + await commits.settle()

    assert asyncio.run(main()) == [f"d{i}" for i in range(6)]
    assert committer.sizes == [1, 2, 2, 1]


async def _collect(progress: AsyncIterator[Progress]) -> list[Progress]:
    return [p async for p in progress]


def test_a_document_sent_twice_in_a_stream_ends_as_its_last_version(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    progress = ingest(ingestor, listed(one_chunk(0, "old harbour"), one_chunk(1), one_chunk(0, "new harbour"),
                                       one_chunk(0, "new harbour")))
    assert [p.stage for p in progress if p.doc_id == "d0" and p.stage in ("INDEXED", "UNCHANGED")] == [
        "INDEXED", "INDEXED", "UNCHANGED"]
    assert [s.chunk.text for s in stored(ingestor, "d0")] == ["Document 0 about the new harbour."]
    found = ingestor.registry.search("c", ["harbour"], None, 10, SearchFilter())
    assert sorted(c.text for c in found.chunks.values()) == [
        "Document 0 about the new harbour.", "Document 1 about the harbour."]


def test_a_client_waiting_for_indexed_before_sending_more_is_answered(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    indexed: dict[str, asyncio.Event] = {}

    async def main() -> list[Progress]:
        for i in range(3):
            indexed[f"d{i}"] = asyncio.Event()

        async def stream() -> AsyncIterator[Document]:
            for i in range(3):
                yield one_chunk(i)
                await indexed[f"d{i}"].wait()  # sends the next once this one is searchable

        out = []
        async for p in ingestor.ingest(stream()):
            out.append(p)
            if p.stage == "INDEXED":
                indexed[p.doc_id].set()
        return out

    out = final(asyncio.run(asyncio.wait_for(main(), 30)))
    assert [out[f"d{i}"].stage for i in range(3)] == ["INDEXED"] * 3


def test_a_chunk_id_clash_fails_only_its_document_in_a_shared_commit(tmp_path: Path) -> None:
    ingestor = make(tmp_path, batch_size=1)
    taken = Chunk(chunk_id="c/d2#0", doc_id="other", collection="c", text="Already here.")
    ingestor.store.replace_documents([(DocumentRecord("other", "c", "", content_hash="x", chunk_count=1),
                                       [StoredChunk(taken, None)])])
    committer = GatedCommitter(ingestor)
    committer.gate.clear()

    async def stream() -> AsyncIterator[Document]:
        for i in range(4):
            yield one_chunk(i)
        committer.gate.set()

    out = final(ingest(ingestor, stream()))
    assert committer.sizes[:2] == [1, 3], "d1-d3 went in one commit, then each alone"
    assert [out[f"d{i}"].stage for i in range(4)] == ["INDEXED", "INDEXED", "FAILED", "INDEXED"]
    assert "chunk id is already used" in out["d2"].error
    assert {s.chunk.doc_id for s in stored(ingestor)} == {"other", "d0", "d1", "d3"}
