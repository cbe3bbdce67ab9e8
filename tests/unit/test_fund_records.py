"""Fund-research records through the public record parser and chunker: meeting notes get 000's chunk
types (notes_part / full_notes / conclusion), and factsheets get the performance / holdings /
commentary sections the context names, each chunked on its own under the complete factsheet JSON."""
from __future__ import annotations

import json

from demo.loader import CORPUS_DIR
from ragmesh.types import Document
from services.retriever.ingest.parsers import parse
from services.retriever.ingest.strategies import chunk_document
from tests.unit.test_ingest_parsers import meeting_note, sentence


def _chunks(record: dict) -> list:
    [p] = parse(Document(doc_id="r", collection="c", content=json.dumps(record).encode(), filename="r.json"), 1 << 20)
    return chunk_document(p).pieces


def test_meeting_notes_are_notes_parts_or_full_notes_and_a_conclusion() -> None:
    notes = " ".join(sentence("portfolio", i) for i in range(12))  # ~1,200 characters: more than one chunk
    long = _chunks(meeting_note("mn-long") | {"notes": notes})
    assert [p.meta["chunk_type"] for p in long] == ["notes_part", "notes_part", "conclusion"]
    assert long[-1].text == "Conclusion: We keep the fund on watch."
    short = _chunks(meeting_note("mn-short") | {"notes": sentence("portfolio", 1)})
    assert [p.meta["chunk_type"] for p in short] == ["full_notes", "conclusion"]


def test_every_demo_meeting_note_chunk_has_a_chunk_type_of_000() -> None:
    lines = (CORPUS_DIR / "meeting_notes.jsonl").read_text().splitlines()
    types = {p.meta.get("chunk_type") for line in lines for p in _chunks(json.loads(line))}
    assert types == {"notes_part", "conclusion"}  # the demo's notes are all longer than one chunk


def test_a_factsheet_is_three_sections_under_its_complete_json() -> None:
    record = json.loads((CORPUS_DIR / "factsheets.jsonl").read_text().splitlines()[0])
    pieces = _chunks(record)
    parent, children = pieces[0], pieces[1:]
    assert parent.is_parent and json.loads(parent.text) == record
    assert all(c.parent == 0 for c in children)
    assert [c.meta["section_type"] for c in children][:2] == ["performance", "holdings"]
    assert {c.meta["section_type"] for c in children} == {"performance", "holdings", "commentary"}
    performance, holdings = children[0].text, children[1].text
    assert performance.startswith("Harborview Long/Short Equity performance as of 2024-03-31: month return 1.9%,")
    assert "Sharpe ratio 1.61, maximum drawdown -14.2%, assets under management $3.3bn." in performance
    assert "Calverton Systems (Software) 6.2%" in holdings and "Gross exposure 165.0%, net exposure 55.0%" in holdings
    assert children[2].text.startswith("Harborview Long/Short Equity commentary for the period ending 2024-03-31: "
                                       "Harborview gained 1.9% in March")


def test_the_demo_loader_sends_the_corpus_files_records_as_they_are() -> None:
    """No hand-made text or metadata: each document is one line of the corpus file, under the file's name."""
    from demo.loader import FILES, documents

    docs = documents()
    lines = {c: (CORPUS_DIR / name).read_text().splitlines() for c, name in FILES.items()}
    assert len(docs) == sum(len(v) for v in lines.values()) == 61
    for doc in docs:
        assert doc.content.decode() in lines[doc.collection] and doc.filename == FILES[doc.collection]
        assert not (doc.text or doc.metadata or doc.title or doc.date)
