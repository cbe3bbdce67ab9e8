"""Word (python-docx: headings start sections, their levels give the chapters; tables read row by
row) and PowerPoint (python-pptx: one section per slide, named by its title, the slide number as its
page, speaker notes included)."""
from __future__ import annotations

import io
from collections.abc import Iterator

import docx
import pptx
from docx.table import Table
from docx.text.paragraph import Paragraph
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape

from services.retriever.ingest.parsed import Parsed, Section, UnreadableFile


def _table_text(rows: list[list[str]]) -> str:
    return "\n".join(" | ".join(cell for cell in row) for row in rows if any(row))


def parse_docx(data: bytes, name: str) -> list[Parsed]:
    try:
        document = docx.Document(io.BytesIO(data))
        sections = [Section("")]
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                sections[-1].add(_table_text([[c.text.strip() for c in row.cells] for row in block.rows]))
                continue
            text = block.text.strip()
            if (level := _heading_level(block)) is not None and text:
                sections.append(Section(text, level=level, lead=1))
            sections[-1].add(text)
        title = (document.core_properties.title or "").strip()
    except Exception as exc:  # a damaged zip or XML: python-docx raises many kinds
        raise UnreadableFile(name, f"is not a readable Word document ({type(exc).__name__}: {exc})") from None
    return [Parsed("", sections, "docx", title=title)]


def _heading_level(paragraph: Paragraph) -> int | None:
    """"Heading 2" is level 2; the document's "Title" starts a section outside the outline (0); None: body text."""
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return 0
    if style.startswith("Heading"):
        return int(level) if (level := style.removeprefix("Heading").strip()).isdigit() else 1
    return None


def _shapes(shapes) -> Iterator[BaseShape]:
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shapes(shape.shapes)
        else:
            yield shape


def parse_pptx(data: bytes, name: str) -> list[Parsed]:
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        sections = []
        for number, slide in enumerate(deck.slides, 1):
            title_shape = slide.shapes.title
            title = title_shape.text_frame.text.strip() if title_shape is not None else ""
            section = Section(title or f"Slide {number}")  # its page is the slide number
            section.add(title, number)
            for shape in _shapes(slide.shapes):
                if title_shape is not None and shape.shape_id == title_shape.shape_id:
                    continue
                if shape.has_text_frame:
                    section.add(shape.text_frame.text.strip(), number)
                elif getattr(shape, "has_table", False):
                    rows = [[cell.text.strip() for cell in row.cells] for row in shape.table.rows]
                    section.add(_table_text(rows), number)
            notes = slide.notes_slide.notes_text_frame.text.strip() if slide.has_notes_slide else ""
            if notes:
                section.add(f"Notes: {notes}", number)
            sections.append(section)
        title = (deck.core_properties.title or "").strip()
    except Exception as exc:  # a damaged zip or XML: python-pptx raises many kinds
        raise UnreadableFile(name, f"is not a readable PowerPoint file ({type(exc).__name__}: {exc})") from None
    return [Parsed("", sections, "pptx", title=title)]
