"""Parsers on real files built here (fpdf2, python-docx, python-pptx, HTML, Markdown, JSON):
sections, pages, titles and metadata come out right, and each kind of bad input is a clear
error naming the file. The builders are shared with the integration tests."""
from __future__ import annotations

import codecs
import io
import json
import re

import docx
import pptx
import pytest
from fpdf import FPDF

from ragmesh.types import Document
from services.retriever.ingest.parsed import BadRecord, Parsed, UnreadableFile
from services.retriever.ingest.parsers import parse

LIMIT = 1_000_000


# -- builders ----------------------------------------------------------------------------------
def pdf_bytes(pages: list[str], title: str = "", password: str = "") -> bytes:
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    if title:
        pdf.set_title(title)
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def docx_bytes(blocks: list[tuple[str, str]], table: list[list[str]] | None = None) -> bytes:
    """blocks: ("h", heading) or ("p", paragraph)."""
    document = docx.Document()
    for kind, text in blocks:
        document.add_heading(text, level=1) if kind == "h" else document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def pptx_bytes(slides: list[tuple[str, str]], notes: dict[int, str] | None = None) -> bytes:
    deck = pptx.Presentation()
    for i, (title, body) in enumerate(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes and i in notes:
            slide.notes_slide.notes_text_frame.text = notes[i]
    buf = io.BytesIO()
    deck.save(buf)
    return buf.getvalue()


def sentence(topic: str, n: int) -> str:
    return f"The {topic} review number {n} covered budgets, staffing and the schedule for the next quarter."


def meeting_note(doc_id: str, fund: str = "Kestrel Emerging Markets") -> dict:
    return {"doc_id": doc_id, "fund_name": fund, "manager": "Ana Ruiz", "meeting_date": "2024-05-02",
            "notes": " ".join(sentence("portfolio", i) for i in range(6)), "conclusion": "We keep the fund on watch."}


FACTSHEET = {
    "factsheet_id": "fs-kestrel-2024-06-30", "fund_name": "Kestrel Emerging Markets", "report_date": "2024-06-30",
    "filename": "Kestrel_Factsheet_2024-06.pdf", "performance": {"month": 1.2, "ytd": 4.5},
    "holdings": [{"name": "Andes Copper", "sector": "Materials", "weight": 5.1}],
    "aum_usd_bn": 2.4, "commentary": "Kestrel cut its Brazil exposure in June. " * 3,
}
TRANSCRIPT = {"transcript_id": "t-1", "raw_text": "um so we agreed to move the launch to May. " * 4,
              "refined_text": "The team agreed to move the launch to May.", "tags": ["launch", "planning"],
              "echodate": "2024-04-10T09:30:00Z"}


def parsed(content: bytes, filename: str, **kw: object) -> list[Parsed | BadRecord]:
    return parse(Document(doc_id=filename, collection="c", content=content, filename=filename, **kw), LIMIT)


def only(docs: list[Parsed | BadRecord]) -> Parsed:
    assert len(docs) == 1 and isinstance(docs[0], Parsed)
    return docs[0]


def failure(content: bytes, filename: str, max_bytes: int = LIMIT, **kw: object) -> str:
    with pytest.raises(UnreadableFile) as err:
        parse(Document(doc_id=filename, collection="c", content=content, filename=filename, **kw), max_bytes)
    assert str(err.value).startswith(f"{filename}: "), str(err.value)
    return str(err.value)


# -- formats -----------------------------------------------------------------------------------
def test_pdf_pages_and_headings_become_sections_with_page_offsets() -> None:
    pages = [
        "Chapter 1\n\n" + " ".join(sentence("page one", i) for i in range(3)),
        " ".join(sentence("page two", i) for i in range(3)),
        "Chapter 2\n\n" + " ".join(sentence("page three", i) for i in range(3)),
    ]
    doc = only(parsed(pdf_bytes(pages, title="Annual Review"), "review.pdf"))
    assert doc.title == "Annual Review" and doc.filetype == "pdf" and doc.doc_id == "review.pdf"
    assert [s.title for s in doc.sections] == ["Chapter 1", "Chapter 2"]
    first, second = doc.sections
    assert [page for _, page in first.pages] == [1, 2] and [page for _, page in second.pages] == [3]
    where = {n: re.search(rf"page\s+{n}\s+review\s+number\s+2", first.text).start() for n in ("one", "two")}
    assert first.page_at(where["one"]) == 1 and first.page_at(where["two"]) == 2


def test_docx_headings_start_sections_and_tables_are_read() -> None:
    content = docx_bytes([("p", "Preface text."), ("h", "Scope"), ("p", "What is covered."), ("h", "Costs"),
                          ("p", "Travel went up.")], table=[["item", "cost"], ["travel", "1200"]])
    doc = only(parsed(content, "plan.docx"))
    assert [s.title for s in doc.sections] == ["", "Scope", "Costs"]
    assert doc.sections[1].text == "Scope\n\nWhat is covered."
    assert doc.sections[2].text.endswith("item | cost\ntravel | 1200")


def test_pptx_one_section_per_slide_with_its_number_as_page() -> None:
    content = pptx_bytes([("Welcome", "Agenda for today"), ("Revenue", "Revenue grew 10%."), ("Risks", "FX risk.")],
                         notes={1: "Mention the new region."})
    doc = only(parsed(content, "deck.pptx"))
    assert [s.title for s in doc.sections] == ["Welcome", "Revenue", "Risks"]
    assert [s.first_page for s in doc.sections] == [1, 2, 3]
    assert doc.sections[1].text == "Revenue\n\nRevenue grew 10%.\n\nNotes: Mention the new region."


def test_html_skips_scripts_and_splits_at_headings() -> None:
    html = (b"<html><head><title>Guide</title><style>p{}</style></head><body><script>var x=1;</script>"
            b"<p>Intro &amp; scope.</p><h2>Setup</h2><p>Install <b>it</b> first.</p><ul><li>One</li><li>Two</li></ul>"
            b"<table><tr><td>a</td><td>b</td></tr></table></body></html>")
    doc = only(parsed(html, "guide.html"))
    assert doc.title == "Guide"
    assert [(s.title, s.text) for s in doc.sections] == [
        ("", "Intro & scope."), ("Setup", "Setup\n\nInstall it first.\n\nOne\n\nTwo\n\na | b")]


def test_markdown_headings_but_not_inside_code_fences() -> None:
    md = b"# Handbook\n\nWelcome.\n\nSetup\n-----\n\nRun it.\n\n```\n# not a heading\n```\n\n## Usage\n\nCall it."
    doc = only(parsed(md, "handbook.md"))
    assert doc.title == "Handbook"
    assert [s.title for s in doc.sections] == ["Handbook", "Setup", "Usage"]
    assert "# not a heading" in doc.sections[1].text


@pytest.mark.parametrize("raw", [
    "Plain text. Ünïcode too.".encode(),
    codecs.BOM_UTF8 + "Plain text. Ünïcode too.".encode(),
    "Plain text. Ünïcode too.".encode("utf-16"),  # with its byte-order mark
])
def test_text_is_utf8_or_what_its_byte_order_mark_says(raw: bytes) -> None:
    assert only(parsed(raw, "note.txt")).sections[0].text == "Plain text. Ünïcode too."


def test_json_records_map_fields_to_metadata_and_sections() -> None:
    lines = "\n".join(json.dumps(r) for r in [meeting_note("mn-1"), meeting_note("mn-2", "Harborview"), FACTSHEET])
    note, other, sheet = parsed(lines.encode(), "corpus.jsonl")
    assert (note.doc_id, other.doc_id, sheet.doc_id) == ("mn-1", "mn-2", "fs-kestrel-2024-06-30")
    assert note.title == "Kestrel Emerging Markets meeting with Ana Ruiz (2024-05-02)" and note.date == "2024-05-02"
    assert {k: note.metadata[k] for k in ("fund_name", "manager", "meeting_date", "type")} == {
        "fund_name": "Kestrel Emerging Markets", "manager": "Ana Ruiz", "meeting_date": "2024-05-02",
        "type": "meeting_note"}
    assert [s.title for s in note.sections] == ["notes", "conclusion"] and not note.source
    assert [s.meta["chunk_type"] for s in note.sections] == ["notes_part", "conclusion"]  # 000's chunk types
    assert note.sections[0].whole_meta == {"chunk_type": "full_notes"}
    assert sheet.title == "Kestrel Emerging Markets Factsheet (2024-06-30)" and sheet.date == "2024-06-30"
    assert [s.meta["section_type"] for s in sheet.sections] == ["performance", "holdings", "commentary"]
    assert sheet.sections[0].text == ("Kestrel Emerging Markets performance as of 2024-06-30: month return 1.2%, "
                                      "year-to-date 4.5%, assets under management $2.4bn.")
    assert sheet.sections[1].text == "Kestrel Emerging Markets top holdings as of 2024-06-30: Andes Copper (Materials) 5.1%."
    assert sheet.metadata["aum_usd_bn"] == "2.4"
    assert json.loads(sheet.source) == FACTSHEET  # kept whole, once
    assert sheet.metadata["filename"] == "Kestrel_Factsheet_2024-06.pdf"


def test_transcripts_are_raw_then_refined_text_with_tags() -> None:
    doc = only(parsed(json.dumps(TRANSCRIPT).encode(), "t.json"))
    assert doc.doc_id == "t-1" and doc.date == "2024-04-10"
    assert [s.title for s in doc.sections] == ["raw_text", "refined_text"]
    assert doc.metadata["type"] == "transcript" and doc.metadata["tags"] == "launch, planning"


def test_records_without_ids_are_numbered_after_the_file() -> None:
    docs = parsed(json.dumps([{"text": "First record text."}, {"text": "Second one."}]).encode(), "batch.json")
    assert [d.doc_id for d in docs] == ["batch.json#1", "batch.json#2"]


def test_text_documents_without_a_file_still_work() -> None:
    docs = parse(Document(doc_id="d1", collection="c", text="Chapter 1\n\nIt begins.\n\nChapter 2\n\nIt ends."), LIMIT)
    assert [s.title for s in only(docs).sections] == ["Chapter 1", "Chapter 2"]


# -- bad input ---------------------------------------------------------------------------------
def test_an_encrypted_pdf_is_refused_by_name() -> None:
    assert "encrypted" in failure(pdf_bytes(["Secret plans."], password="pw"), "secret.pdf")


@pytest.mark.parametrize("content", [b"%PDF-1.4 this is not really a pdf", b"just some bytes"])
def test_a_corrupt_pdf_is_refused_by_name(content: bytes) -> None:
    assert "is not a readable PDF" in failure(content, "broken.pdf")


def test_a_pdf_without_a_text_layer_says_so() -> None:
    assert "scanned PDF" in failure(pdf_bytes(["", ""]), "scan.pdf")


@pytest.mark.parametrize(("filename", "reason"), [
    ("photo.png", "unsupported file type '.png'"),
    ("old.doc", "save it as .docx"),
    ("README", "unsupported file without an extension"),
])
def test_unsupported_types_are_refused_by_name(filename: str, reason: str) -> None:
    assert reason in failure(b"\x89PNG....", filename)


def test_mime_type_picks_the_parser_when_the_name_has_no_extension() -> None:
    assert only(parsed(b"Hello there.", "upload", mime_type="text/plain")).sections[0].text == "Hello there."


def test_empty_oversized_undecodable_and_broken_files_are_refused_by_name() -> None:
    assert failure(b"", "empty.txt").endswith("is empty")
    assert "over the limit of 10 bytes" in failure(b"x" * 11, "big.txt", max_bytes=10)
    assert "undecodable byte 0xff at offset 4" in failure(b"abc \xff\xfe def", "latin1.txt")
    assert "binary" in failure(b"abc\x00def", "blob.txt")
    assert "not a readable Word document" in failure(b"PK\x03\x04 not a zip", "bad.docx")
    assert "not a readable PowerPoint" in failure(b"nope", "bad.pptx")
    assert "line 1 is not valid JSON" in failure(b'{broken', "bad.jsonl")
    pretty = failure(b'{\n  "text": "pretty-printed, not JSON Lines"\n}', "pretty.jsonl")
    assert "line 1 is not valid JSON" in pretty and pretty.endswith("(and all 2 other records fail)")
    assert "record 1 is a JSON int" in failure(b"[1]", "ints.json")
    assert "is not valid JSON (Expecting value at line 1)" in failure(b"[1, ", "cut.json")
    assert "no text to index" in failure(b"   \n\n  ", "blank.md")
    assert "both text and content" in failure(b"abc", "both.txt", text="abc")


def test_a_bad_record_is_reported_alone_and_the_file_goes_on() -> None:
    """In a file of records each record is a document: one broken line, a non-object, an empty
    record or a repeated id fails that record, in file order, and the others parse."""
    lines = b'{"id": "a", "text": "Alpha."}\n{broken\n7\n{"id": "b", "text": "  "}\n{"id": "a", "text": "Again."}\n' \
            b'{"id": "c", "text": "Gamma."}'
    out = parsed(lines, "mixed.jsonl")
    assert [p.doc_id if isinstance(p, Parsed) else n for n, p in enumerate(out, 1)] == ["a", 2, 3, 4, 5, "c"]
    assert [p.reason for p in out if isinstance(p, BadRecord)] == [
        "line 2 is not valid JSON (Expecting property name enclosed in double quotes)",
        "record 3 is a JSON int, not an object", "record 4 has no text to index", "record 5 repeats doc_id 'a'",
    ]
    assert [type(p) for p in parsed(b'[1, {"text": "x"}]', "ints.json")] == [BadRecord, Parsed]


def test_a_heading_with_nothing_under_it_joins_the_next_section_pages_kept() -> None:
    deck = only(parsed(pptx_bytes([("Part Two", ""), ("Results", "Sales rose.")]), "deck.pptx"))
    assert [s.title for s in deck.sections] == ["Results"]
    results = deck.sections[0]
    assert results.text == "Part Two\n\nResults\n\nSales rose."
    assert results.page_at(0) == 1 and results.page_at(results.text.index("Sales")) == 2
    doc = only(parsed(docx_bytes([("h", "Book One"), ("h", "Chapter 1"), ("p", "It begins.")]), "b.docx"))
    assert [(s.title, s.text) for s in doc.sections] == [("Chapter 1", "Book One\n\nChapter 1\n\nIt begins.")]
