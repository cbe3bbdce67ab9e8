"""A book's chunks know their place: the chapter, the section in it and the paragraph they start at, from
the headings of Markdown, HTML, Word, plain text and PDF; documents without chapters have none, and the
labels and citations the gateway makes from them name the place only when there is one."""
from __future__ import annotations

import io

import docx

from ragmesh.types import Chunk, ContextBlock, Document
from services.gateway.context import citation_for, label
from services.gateway.places import Place, place_of
from services.retriever.ingest.parsed import Parsed
from services.retriever.ingest.parsers import parse
from services.retriever.ingest.strategies import Piece, chunk_document
from services.retriever.ingest.summaries import table_of_contents
from tests.books import CHAPTERS, FACTS, FILENAME, LENS, TITLE, book_bytes
from tests.unit.test_ingest_parsers import pdf_bytes, sentence


def parsed(content: bytes, filename: str) -> Parsed:
    [doc] = parse(Document("d", "documents", content=content, filename=filename), 1_000_000)
    assert isinstance(doc, Parsed)
    return doc


def places(content: bytes, filename: str) -> list[tuple[str, str, int]]:
    """(chapter, section heading, paragraph) of each piece, in order."""
    return [(p.chapter, p.section, p.paragraph) for p in chunk_document(parsed(content, filename)).pieces]


def holding(pieces: list[Piece], words: str) -> Piece:
    return next(p for p in pieces if words in " ".join(p.text.split()))


def test_each_fact_of_the_markdown_book_is_in_a_piece_that_names_its_place() -> None:
    pieces = chunk_document(parsed(book_bytes(), FILENAME)).pieces
    for fact in FACTS:
        piece = holding(pieces, fact.answer)
        assert place_of(piece.place | {"section": piece.section}) == Place(fact.chapter, fact.section, fact.paragraph)
    # the lens's piece opens with the sentence it shares with the piece before (¶2): it points at ¶3
    lens = holding(pieces, LENS.answer)
    assert lens.text.startswith("Salt spray") and lens.paragraph == 3
    assert {p.chapter for p in pieces} == set(CHAPTERS)  # the book's title is not a chapter


def test_a_document_with_headings_of_one_kind_has_no_chapters() -> None:
    notes = "# Board meeting\n\n## Attendees\n\nAda and Ben.\n\n## Decisions\n\nThe budget is approved.\n"
    assert places(notes.encode(), "notes.md") == [("", "Attendees", 1), ("", "Decisions", 1)]
    assert all(p.place == {} for p in chunk_document(parsed(notes.encode(), "notes.md")).pieces)
    flat = "## Scope\n\nWhat is covered.\n\n## Costs\n\nWhat it costs.\n"
    assert {c for c, _, _ in places(flat.encode(), "flat.md")} == {""}


def test_chapters_named_as_such_need_no_second_level() -> None:
    text = "\n\n".join(f"Chapter {c}\n\n{sentence('chapter', c)}\n\n{sentence('more', c)}" for c in (1, 2))
    assert places(text.encode(), "book.txt") == [("Chapter 1", "Chapter 1", 1), ("Chapter 2", "Chapter 2", 1)]


def test_plain_text_and_pdf_chapters_hold_their_sections() -> None:
    text = ("Chapter 1 Tides\n\nThe tides turn twice a day.\n\nSection 1.1 Springs\n\nSpring tides run high."
            "\n\nNeap tides run low.\n\nChapter 2 Winds\n\nThe winds back in autumn.")
    assert [(c, s) for c, s, _ in places(text.encode(), "tides.txt")] == [
        ("Chapter 1 Tides", "Chapter 1 Tides"), ("Chapter 1 Tides", "Section 1.1 Springs"),
        ("Chapter 2 Winds", "Chapter 2 Winds")]
    pages = ["Chapter 1\n\n" + " ".join(sentence("one", i) for i in range(3)),
             "Chapter 2\n\n" + " ".join(sentence("two", i) for i in range(3))]
    assert [(c, s, n) for c, s, n in places(pdf_bytes(pages), "tides.pdf")] == [
        ("Chapter 1", "Chapter 1", 1), ("Chapter 2", "Chapter 2", 1)]


def test_word_and_html_heading_levels_give_chapters_and_sections() -> None:
    document = docx.Document()
    document.add_heading(TITLE, level=0)
    for chapter in ("Tides", "Winds"):
        document.add_heading(chapter, level=1)
        document.add_heading(f"{chapter} in spring", level=2)
        document.add_paragraph(f"What {chapter.lower()} do in spring.")
        document.add_paragraph(f"What {chapter.lower()} do after it.")
    buf = io.BytesIO()
    document.save(buf)
    assert places(buf.getvalue(), "almanac.docx") == [("Tides", "Tides in spring", 1), ("Winds", "Winds in spring", 1)]
    html = ("<h1>Almanac</h1><h2>Tides</h2><p>Intro.</p><h3>Springs</h3><p>High.</p>"
            "<h2>Winds</h2><h3>Gales</h3><p>Strong.</p>")
    assert places(html.encode(), "almanac.html") == [
        ("Tides", "Tides", 1), ("Tides", "Springs", 1), ("Winds", "Gales", 1)]


def test_the_table_of_contents_lists_chapters_whose_heading_opens_their_first_section() -> None:
    sections = chunk_document(parsed(book_bytes(), FILENAME)).sections
    assert [s.title for s in table_of_contents(sections)] == [
        CHAPTERS[0], "1.1 Fresnel lenses", "1.2 Lamp oil", CHAPTERS[1], "2.1 The fog signal", "2.2 Logbooks"]
    html = "<h1>Almanac</h1><h2>Tides</h2><h3>Springs</h3><p>High.</p><h2>Winds</h2><h3>Gales</h3><p>Strong.</p>"
    sections = chunk_document(parsed(html.encode(), "almanac.html")).sections
    assert [s.title for s in table_of_contents(sections)] == ["Tides", "Springs", "Winds", "Gales"]


def chunk(collection: str, **metadata: str) -> Chunk:
    return Chunk(chunk_id=f"t/{collection}/d#3", doc_id="d", collection=collection, text="Some text.",
                 metadata=metadata, date="2024-05-01")


def test_labels_and_citations_name_a_books_place_and_nothing_else() -> None:
    book = chunk("documents", filename=FILENAME, chapter=LENS.chapter, section=LENS.section, paragraph="3")
    assert label(book) == f"{FILENAME} › {LENS.chapter} › 1.1 Fresnel lenses · ¶3, 2024-05-01"
    cited = citation_for(ContextBlock(1, "Some text.", book, label(book)))
    assert (cited.chapter, cited.section, cited.paragraph) == (LENS.chapter, "1.1 Fresnel lenses", 3)
    opening = chunk("library", chapter=CHAPTERS[1], section=CHAPTERS[1], paragraph="1")
    assert label(opening) == f"library › {CHAPTERS[1]} · ¶1, 2024-05-01"
    assert citation_for(ContextBlock(1, "x", opening, "")).section == ""
    note = chunk("meeting_notes", fund_name="Kestrel", section="Notes")
    memo = chunk("documents", filename="memo.md", section="Scope")
    assert (label(note), label(memo)) == ("Meeting note, Kestrel, 2024-05-01", "memo.md, 2024-05-01")
    for plain in (note, memo):
        cited = citation_for(ContextBlock(1, "x", plain, label(plain)))
        assert (cited.chapter, cited.section, cited.paragraph) == ("", "", 0)


def test_a_long_books_parents_and_children_name_the_paragraph_they_start_at() -> None:
    """BOOK chunking (parents of whole paragraphs, overlapping children): each piece's paragraph is the one
    its first sentence not held by the piece before comes from."""
    def paragraph(c: int, n: int) -> str:
        return " ".join(f"Keeper note c{c}p{n} line {i} tells of the tower, the lamp and the long watch."
                        for i in range(7))

    text = "\n\n".join(f"Chapter {c}\n\n" + "\n\n".join(paragraph(c, n) for n in range(1, 9)) for c in (1, 2, 3))
    chunked = chunk_document(parsed(text.encode(), "keeper.txt"))
    assert chunked.doc_type == "BOOK"
    children = [p for p in chunked.pieces if not p.is_parent]
    assert len(children) >= 24 and {p.chapter for p in chunked.pieces} == {"Chapter 1", "Chapter 2", "Chapter 3"}
    for piece in chunked.pieces:
        c = piece.chapter.split()[-1]
        assert f"c{c}p{piece.paragraph} " in piece.text, (piece.paragraph, piece.text[:200])
    # past the overlap: a child that opens with the previous paragraph's last sentence names the next one
    assert any(p.text.startswith(f"Keeper note c1p{p.paragraph - 1} line 6") for p in children), "no overlap seen"
