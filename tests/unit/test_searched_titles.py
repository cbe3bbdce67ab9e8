"""Every chunk is searched after its document's title: a later chunk of a titled document is found by a
word only its title holds (BM25 alone, the hybrid engine, the Milvus backend, upserted chunks), the embedder
is asked for the titled text, a chunk that opens with its title does not get it twice, a JSON record's chunks
(whose title is made of its fields) are searched as they are, replacing and deleting keep BM25's scores
those of a fresh index (rank_bm25's over the searched texts), and an index rebuilt from the store or read
back from a snapshot still finds the title."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, Document, DocumentRecord, SearchFilter, StoredChunk
from services.retriever.index import IndexRegistry
from services.retriever.ingest import pipeline
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.ingest.upsert import Upserter
from services.retriever.milvus import MilvusBackend, MilvusConfig
from services.retriever.search import SearchEngine, SearchQuery
from services.retriever.searched import TITLE_KEY, TITLE_MAX_CHARS, searched_text, titled
from tests.unit.test_ingest_chunking import paragraphs
from tests.unit.test_ingest_parsers import FACTSHEET
from tests.unit.test_ingest_pipeline import DIM, FakeEmbedder, make, run, stored

# Longer than the index's shared short values: its chunks share it all the same
TITLE = "Zanzibar Lighthouse Survey of the Eastern Channel Approaches, with the Keeper's Notes, 1998 to 2004"
BODY = paragraphs(6, 5, 3)  # several chunks, none holding "zanzibar"


class RecordingEmbedder(FakeEmbedder):
    """The fake embedder, keeping every text it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def __call__(self, texts: list[str], task: str) -> np.ndarray:
        self.texts += texts
        return await super().__call__(texts, task)


def survey(text: str = BODY, title: str = TITLE, doc_id: str = "survey", **kw: object) -> Document:
    return Document(doc_id, "library", text=text, title=title, **kw)


OTHERS = [Document(f"other{i}", "library", text=paragraphs(2, 4, 10 + i), title=f"Harbour log {i}") for i in range(6)]


def children(ingestor: Ingestor, doc_id: str) -> list[Chunk]:
    return [s.chunk for s in stored(ingestor, doc_id) if s.vector is not None]


def bm25(registry: IndexRegistry, query: str) -> dict[str, float]:
    """chunk id -> BM25 score of the query's keyword list alone."""
    found = registry.search("library", [query], None, 1000, SearchFilter())
    if found is None:
        return {}
    slots, scores = found.sparse[0]
    return {found.chunks[int(s)].chunk_id: float(v) for s, v in zip(slots, scores)}


def test_a_later_chunk_is_found_by_a_word_only_its_title_holds(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    run(ingestor, survey(), *OTHERS)
    mine = children(ingestor, "survey")
    assert len(mine) >= 3 and not any("zanzibar" in c.text.lower() for c in mine)
    assert all(c.metadata[TITLE_KEY] == TITLE for c in mine)
    assert set(bm25(ingestor.registry, "zanzibar")) == {c.chunk_id for c in mine}, "BM25 alone"



def test_the_hybrid_search_ranks_a_titled_documents_later_chunks_by_its_title(tmp_path: Path) -> None:
    """Every text embeds to one vector: the dense list ties, and the keyword list decides."""
    async def same(texts: list[str], task: str) -> np.ndarray:
        return np.tile(np.full(DIM, DIM ** -0.5, np.float32), (len(texts), 1))

    ingestor = make(tmp_path, same)
    run(ingestor, survey(), *OTHERS)
    mine = {c.chunk_id for c in children(ingestor, "survey")}
    query = SearchQuery("zanzibar", collections=["library"])
    outcome = asyncio.run(SearchEngine(ingestor.registry, same).search(query))
    top = outcome.hits[: len(mine)]
    assert {h.chunk.chunk_id for h in top} == mine and all(h.sparse_rank > 0 and h.dense_rank > 0 for h in top)


def test_the_embedder_is_asked_for_each_chunks_text_after_its_title(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    run(ingestor, survey())
    mine = children(ingestor, "survey")
    assert embedder.texts == [f"{TITLE}\n\n{c.text}" for c in mine]


@pytest.mark.parametrize("opening", [f"{TITLE}\n\n", f"# {TITLE.lower()}\n\n", f"  {TITLE.upper()}: "])
def test_a_chunk_that_opens_with_its_title_does_not_get_it_twice(tmp_path: Path, opening: str) -> None:
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    run(ingestor, survey(opening + BODY))
    first, *later = children(ingestor, "survey")
    assert embedder.texts == [first.text] + [f"{TITLE}\n\n{c.text}" for c in later]
    assert searched_text(first).lower().count("zanzibar") == 1


def test_what_opens_with_a_title_is_read_word_by_word() -> None:
    assert titled("Cell", "Cells divide.") == "Cell\n\nCells divide."  # "Cells" is another word
    assert titled("Cell  biology", "cell\nbiology, an outline") == "cell\nbiology, an outline"
    assert titled("", "text") == titled("  ", "text") == "text"
    long = " ".join(["lighthouse"] * 100)  # 1,099 characters
    cut = " ".join(["lighthouse"] * 27)  # 296 characters: cut at a word
    assert len(cut) <= TITLE_MAX_CHARS and titled(long, "text") == f"{cut}\n\ntext"


def test_a_client_title_in_the_metadata_wins_and_an_untitled_document_is_searched_as_it_is(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    run(ingestor, survey(metadata={TITLE_KEY: "Pemba Beacon Notes"}))
    assert {c.metadata[TITLE_KEY] for c in children(ingestor, "survey")} == {"Pemba Beacon Notes"}
    assert set(bm25(ingestor.registry, "pemba")) == {c.chunk_id for c in children(ingestor, "survey")}
    embedder.texts.clear()
    run(ingestor, survey(title="", doc_id="untitled"))
    plain = children(ingestor, "untitled")
    assert all(TITLE_KEY not in c.metadata for c in plain) and embedder.texts == [c.text for c in plain]


def test_a_json_records_chunks_are_searched_as_they_are(tmp_path: Path) -> None:
    """A record's title is made of its own fields (fund, date): it stays off its chunks' searched text."""
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    run(ingestor, Document("", "factsheets", content=json.dumps(FACTSHEET).encode(), filename="fs.json"))
    record = ingestor.store.get_document("", "factsheets", FACTSHEET["factsheet_id"])
    assert record is not None and "Kestrel" in record.title
    plain = children(ingestor, FACTSHEET["factsheet_id"])
    assert plain and all(TITLE_KEY not in c.metadata for c in plain) and embedder.texts == [c.text for c in plain]


def test_re_ingesting_an_unchanged_document_embeds_it_with_its_title_once_the_pipeline_changed(tmp_path: Path,
                                                                                             monkeypatch) -> None:
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    monkeypatch.setattr(pipeline, "PIPELINE_VERSION", 3)  # the last one that embedded chunks without their title
    run(ingestor, survey())
    monkeypatch.undo()
    embedder.texts.clear()
    assert [p.stage for p in run(ingestor, survey())][-1] == "INDEXED"
    assert embedder.texts == [f"{TITLE}\n\n{c.text}" for c in children(ingestor, "survey")]


def test_replacing_and_deleting_titled_documents_leaves_bm25_as_a_fresh_index(tmp_path: Path, caplog) -> None:
    """The removal of a replaced chunk analyses the same searched text its addition did (BM25 finds its terms
    from those tokens, without scanning every posting): the title's words' document frequencies come back
    down, and every score is rank_bm25's over the searched texts."""
    caplog.set_level(logging.WARNING, "services.retriever.bm25")
    ingestor = make(tmp_path)
    run(ingestor, survey(), *OTHERS)
    run(ingestor, survey(paragraphs(3, 5, 4), title="Zanzibar Harbour Log"))  # replaced: another title
    asyncio.run(ingestor.delete("", "library", ["other0", "other1"]))
    fresh = IndexRegistry(DIM)
    fresh.rebuild(ingestor.store)
    live = [c for s in stored(ingestor) if s.vector is not None for c in [s.chunk]]
    analyze = fresh.analyzer("library").analyze
    reference = BM25Okapi([analyze(searched_text(c)) for c in live], k1=1.5, b=0.75, epsilon=0.25)
    assert "removal scans the postings" not in caplog.text
    assert bm25(ingestor.registry, "lighthouse survey") == {}, "the old title's words left with it"
    for query in ("zanzibar", "harbour log", "zanzibar harbour", "log"):
        got, rebuilt = bm25(ingestor.registry, query), bm25(fresh, query)
        assert got.keys() == rebuilt.keys() and got
        expected = dict(zip((c.chunk_id for c in live), reference.get_scores(analyze(query))))
        for chunk_id, score in got.items():
            assert score == pytest.approx(rebuilt[chunk_id], abs=1e-6)
            assert score == pytest.approx(expected[chunk_id], abs=1e-6)


def test_an_index_rebuilt_from_the_store_or_read_from_a_snapshot_finds_the_title(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    run(ingestor, survey(), *OTHERS)
    mine = {c.chunk_id for c in children(ingestor, "survey")}
    store = SqliteStore(tmp_path / "store.sqlite3")  # a restart: the store as the next process opens it
    rebuilt = IndexRegistry(DIM)
    assert rebuilt.warm_up(store, tmp_path / "none", store.version()).startswith("indexes rebuilt from the store")
    assert set(bm25(rebuilt, "zanzibar")) == mine
    titles = [c.metadata[TITLE_KEY] for c in rebuilt.get("library").chunks if c is not None and c.chunk_id in mine]
    assert len({id(t) for t in titles}) == 1, "one title object for the document's chunks, however long it is"
    ingestor.registry.save_snapshot(tmp_path / "snap", store.version())
    restarted = IndexRegistry(DIM)
    assert restarted.load_snapshot(tmp_path / "snap", store.version())
    assert set(bm25(restarted, "zanzibar")) == mine
    restarted.apply("library", [(("", "survey"), [])])  # a delete after the restart takes the title's words too
    assert bm25(restarted, "zanzibar") == {}


def test_the_milvus_backend_searches_each_chunk_after_its_title(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    record = DocumentRecord(doc_id="survey", collection="library", tenant="t", content_hash="h", chunk_count=3,
                            title=TITLE)
    rng = np.random.default_rng(5)
    texts = ["Zanzibar lighthouse survey: the keeper's log", "the lamp was relit in May", "fog horn repairs"]
    chunks = [StoredChunk(Chunk(f"t/library/survey#{i}", "survey", "library", text, {TITLE_KEY: TITLE}, tenant="t"),
                          rng.standard_normal(4).astype(np.float32)) for i, text in enumerate(texts)]
    store.replace_documents([(record, chunks)])
    backend = MilvusBackend(MilvusConfig(str(tmp_path / "milvus.db"), "", "", "FLAT", {}, {}, "Strong", "titles_"), 4)
    backend.warm_up(store, Path(), store.version())
    found = backend.search("library", ["zanzibar"], None, 10, SearchFilter(tenant="t"))
    assert found is not None and sorted(c.text for c in found.chunks.values()) == sorted(texts)


def test_upserted_chunks_are_searched_after_a_title_in_their_metadata_and_keep_their_vectors(tmp_path: Path) -> None:
    store, registry = SqliteStore(tmp_path / "store.sqlite3"), IndexRegistry(DIM)
    rng = np.random.default_rng(3)
    sent = [(Chunk(f"library/survey#{i}", "survey", "library", f"part {i} of the keeper's log", {TITLE_KEY: TITLE},
                   chunk_index=i), rng.standard_normal(DIM).astype(np.float32)) for i in range(3)]

    async def stream():
        for item in sent:
            yield item

    summary = asyncio.run(Upserter(Committer(store, registry)).upsert(stream()))
    assert summary.chunks == 3 and not summary.errors
    assert set(bm25(registry, "zanzibar")) == {c.chunk_id for c, _ in sent}
    kept = {s.chunk.chunk_id: s.vector for s in store.iter_chunks()}
    assert all(np.array_equal(kept[c.chunk_id], v) for c, v in sent)


def test_an_embedding_call_holds_its_texts_as_they_are_embedded_within_group_chars(tmp_path: Path) -> None:
    """Five one-chunk documents of 565 characters share one call untitled (2,825 characters); with a title of
    287 characters before each (4,270 with the blank lines) they pass GROUP_CHARS: one call of four, then one."""
    embedder = RecordingEmbedder()
    ingestor = make(tmp_path, embedder)
    body, title = paragraphs(1, 6, 21), " ".join(["zanzibar"] * 32)
    run(ingestor, *[survey(body, title, f"d{i}") for i in range(5)])
    assert sum(map(len, embedder.texts)) > pipeline.GROUP_CHARS >= 5 * len(body)
    assert embedder.calls == [4, 1] and all(len(t) == len(title) + 2 + len(body) for t in embedder.texts)
