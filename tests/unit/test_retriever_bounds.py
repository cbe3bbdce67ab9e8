"""Issue 11 on the retriever's domain objects: the shared checks, search bounds, the filter columns'
reserved names, Upsert's per-document bounds, and Ingest's record checks, parse time limit and
stop on cancellation."""
from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from ragmesh.errors import InvalidArgument
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, Document, SearchFilter, StoredChunk
from ragmesh.validation import check_list, check_metadata, check_names, check_number, check_text, shown
from services.retriever import filters
from services.retriever.columns import Columns
from services.retriever.fusion import Boosters
from services.retriever.index import IndexRegistry
from services.retriever.ingest import upsert as upsert_module
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.upsert import Upserter
from services.retriever.ingest.workers import ParseLimits, ParsePool
from services.retriever.search import SearchEngine, SearchQuery
from tests.fakes.parsers import misbehaving
from tests.unit.test_ingest_pipeline import FakeEmbedder, final, make, run, stored

DIM = 4


def field_of(fn, *args, **kw) -> str:
    with pytest.raises(InvalidArgument) as err:
        fn(*args, **kw)
    return err.value.field


def test_shared_checks() -> None:
    assert check_list("xs", ["a", "b", "a"], 2, 5) == ["a", "b"]  # repeats do not count
    assert field_of(check_list, "xs", ["a", "b", "c"], 2, 5) == "xs"
    assert field_of(check_list, "xs", ["a", "toolong"], 2, 5) == "xs[1]"
    assert field_of(check_text, "q", "\ud800", 10) == "q"  # a lone surrogate
    assert field_of(check_text, "q", "  ", 10, required=True) == "q"
    assert check_names("cs", ["a", "a", "b"]) == ["a", "b"]
    assert field_of(check_names, "cs", ["a", "b c"]) == "cs[1]"
    for bad in (math.nan, math.inf, -1.0, 11.0):
        assert field_of(check_number, "n", bad, 0, 10) == "n"
    check_number("n", None, 0, 10)
    assert field_of(check_metadata, "m", {"__date__": "2024-01-01"}) == "m['__date__']"
    assert field_of(check_metadata, "m", {f"k{i}": "" for i in range(65)}) == "m"
    assert len(shown("x" * 1_000_000)) < 80


def registry() -> IndexRegistry:
    r = IndexRegistry(DIM)
    r.apply("c", [(("", "d0"), [StoredChunk(Chunk("d0#0", "d0", "c", "gold miners"), np.eye(DIM, dtype=np.float32)[0])])])
    return r


async def embed(texts: list[str], task: str) -> np.ndarray:
    return np.ones((len(texts), DIM), np.float32)


@pytest.mark.parametrize("query, field", [
    (SearchQuery("x" * 4001), "query"),
    (SearchQuery("x", vector=np.ones(DIM + 1, np.float32)), "query_vector"),
    (SearchQuery("x", vector=np.array([1, math.nan, 0, 0], np.float32)), "query_vector"),
    (SearchQuery("x", fusion="BEST"), "fusion"),
    (SearchQuery("x", sparse_weight=math.nan), "sparse_weight"),
    (SearchQuery("x", rrf_k=10_001), "rrf_k"),
    (SearchQuery("x", collections=["c"] * 50 + [f"c{i}" for i in range(32)]), "collections"),
    (SearchQuery("x", boosters=Boosters(now="0999-12-31")), "boosters.now"),
    (SearchQuery("x", boosters=Boosters(min_similarity=-1.01)), "boosters.min_similarity"),
    (SearchQuery("x", filter=SearchFilter(any_of={"f": ["v"] * 1001})), "filter.in['f']"),
])
def test_bad_searches_name_the_field(query: SearchQuery, field: str) -> None:
    engine = SearchEngine(registry(), embed)
    with pytest.raises(InvalidArgument) as err:
        asyncio.run(engine.search(query))
    assert err.value.field == field
    assert engine.searches == 0


def test_repeats_and_blanks_do_not_count_against_the_limits() -> None:
    q = SearchQuery("gold", collections=["c"] * 100, variants=["gold", "", " "] + [f"v{i}" for i in range(8)] * 3)
    outcome = asyncio.run(SearchEngine(registry(), embed).search(q))
    assert q.collections == ["c"] and q.variants == [f"v{i}" for i in range(8)] and outcome.hits


def test_filter_limits() -> None:
    filters.validate(SearchFilter(any_of={f"f{i}": ["v"] * 1000 for i in range(32)}, equals={f"e{i}": "v" for i in range(32)}))
    assert field_of(filters.validate, SearchFilter(equals={f"e{i}": "v" for i in range(65)})) == "filter.in"
    assert field_of(filters.validate, SearchFilter(date_field="x" * 257, start_date="2024-01-01")) == "filter.date_field"


def test_a_metadata_key_named_like_a_reserved_column_cannot_change_a_chunks_tenant_or_date() -> None:
    columns = Columns()
    columns.reserve(2)
    columns.set(0, Chunk("a", "d", "c", "t", {"__tenant__": "victim", "__date__": "2030-01-01"}, tenant="attacker"))
    columns.set(1, Chunk("b", "e", "c", "t", {"__date__": "2030-01-01"}, date="2024-01-01", tenant="victim"))
    alive = np.ones(2, bool)
    assert columns.mask(SearchFilter(tenant="victim"), alive).tolist() == [False, True]
    dated = SearchFilter(tenant="victim", start_date="2030-01-01")
    assert columns.mask(dated, alive).tolist() == [False, False]


def test_upsert_rejects_a_document_with_too_many_chunks_and_goes_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(upsert_module, "MAX_CHUNKS_PER_DOCUMENT", 3)
    store = SqliteStore(tmp_path / "s.db")
    upserter = Upserter(Committer(store, IndexRegistry(DIM)))

    async def stream() -> AsyncIterator[tuple[Chunk, np.ndarray]]:
        for doc, n in (("big", 5), ("small", 2), ("big2", 4)):
            for i in range(n):
                yield Chunk(f"{doc}#{i}", doc, "c", f"{doc} {i}"), np.ones(DIM, np.float32)

    summary = asyncio.run(upserter.upsert(stream()))
    assert (summary.documents, summary.chunks, summary.rejected) == (1, 2, 2)
    assert summary.errors[0] == "big: chunk: more than 3 chunks in one document"
    assert {s.chunk.doc_id for s in store.iter_chunks()} == {"small"}


def test_a_records_reserved_fields_are_dropped_and_a_bad_record_fails_alone(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    records = ('{"id": "r1", "text": "First note.", "__v": 3, "team": "ops"}\n'
               '{"id": "r2", "text": "Second note.", "' + "k" * 300 + '": 1}\n'
               '{"id": "' + "x" * 513 + '", "text": "Third note."}\n').encode()
    out = final(run(ingestor, Document("notes", "c", content=records, filename="notes.jsonl")))
    assert out["r1"].stage == "INDEXED" and out["r2"].stage == "FAILED"
    assert out["r2"].error.startswith("notes.jsonl (r2): record metadata key 'kkkk"), out["r2"].error
    assert [p.error for d, p in out.items() if d.startswith("xxx")][0].startswith(
        "notes.jsonl (" + "x" * 513 + "): doc_id: is 513 characters")
    meta = stored(ingestor, "r1")[0].chunk.metadata
    assert meta["team"] == "ops" and "__v" not in meta
    assert {s.chunk.doc_id for s in stored(ingestor)} == {"r1"}


def test_a_parse_past_its_time_limit_fails_its_document_alone(tmp_path: Path) -> None:
    parsing = ParsePool(ParseLimits(timeout_s=0.5, inline_bytes=0), parser=misbehaving)
    ingestor = make(tmp_path, parsing=parsing)
    try:
        out = final(run(ingestor, Document("slow", "c", text="Slow to parse.", title="spin"),
                        Document("ok", "c", text="Quick.")))
    finally:
        parsing.close()
    assert out["slow"].stage == "FAILED" and out["slow"].error == (
        "slow: took longer than 0.5 s to parse (INGEST_PARSE_TIMEOUT_S), so it was not ingested")
    assert out["ok"].stage == "INDEXED" and parsing.killed == 1
    assert {s.chunk.doc_id for s in stored(ingestor)} == {"ok"}


def test_a_cancelled_ingest_reads_and_embeds_no_more(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    ingestor = make(tmp_path, embedder)
    read = 0

    async def endless() -> AsyncIterator[Document]:
        nonlocal read
        while True:
            read += 1
            yield Document(f"d{read}", "c", text=f"Document number {read} about the harbour.")
            await asyncio.sleep(0.01)

    async def main() -> tuple[int, int]:
        indexed = asyncio.Event()

        async def consume() -> None:
            async for p in ingestor.ingest(endless()):
                if p.stage == "INDEXED":
                    indexed.set()

        task = asyncio.create_task(consume())
        await indexed.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        calls, seen = len(embedder.calls), read
        await asyncio.sleep(0.2)
        assert (len(embedder.calls), read) == (calls, seen)
        return calls, seen

    calls, seen = asyncio.run(main())
    assert calls <= 2 and seen <= 2
    assert len({s.chunk.doc_id for s in stored(ingestor)}) <= 2
