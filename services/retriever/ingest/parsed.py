"""What parsers produce: a document's text in titled sections that remember where each page
starts and which chapter they belong to, so every chunk can carry its chapter, section, paragraph
and page."""
from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field

from ragmesh.errors import InvalidArgument
from services.retriever.ingest.detect import HEADING_LINE

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


class UnreadableFile(InvalidArgument):
    """A per-file failure (unsupported, corrupt, encrypted, empty, too large, undecodable);
    the message names the file and the reason: "report.pdf: the PDF is encrypted ..."."""

    def __init__(self, filename: str, reason: str) -> None:
        super().__init__(filename or "document", reason)


@dataclass(frozen=True)
class BadRecord:
    """One record of a multi-record file that cannot be ingested (it stands in the record's
    place in the file's list): it is reported as failed and the file's other records go on
    (a file is not one transaction, its records are)."""

    reason: str  # "line 7 is not valid JSON (...)", "record 3 has no text to index"


@dataclass
class Section:
    title: str
    text: str = ""
    pages: list[tuple[int, int]] = field(default_factory=list)  # (offset in text, page), ascending
    meta: dict[str, str] = field(default_factory=dict)  # per-section metadata, e.g. section_type
    # What changes in `meta` when the whole section is one chunk (a meeting note's notes are
    # "notes_part" chunks, or one "full_notes" chunk when they fit in one).
    whole_meta: dict[str, str] = field(default_factory=dict)
    level: int = 0  # the heading's depth (1 for "#", <h1>, "Heading 1"); 0: no heading, or one outside the outline
    lead: int = 0  # how many paragraphs the text opens with are headings (not counted as the section's paragraphs)
    chapter: str = ""  # the title of the chapter holding it (its own, for a chapter's heading): with_chapters sets it

    def add(self, text: str, page: int = 0, sep: str = "\n\n") -> None:
        """Appends text (from `page` on, if the format has pages)."""
        if not text.strip():
            return
        if self.text:
            self.text += sep
        if page and (not self.pages or self.pages[-1][1] != page):
            self.pages.append((len(self.text), page))
        self.text += text

    def page_at(self, offset: int) -> int:
        """The page holding this offset; 0 when the format has no pages."""
        i = bisect.bisect_right(self.pages, (offset, float("inf"))) - 1
        return self.pages[max(i, 0)][1] if self.pages else 0

    def paragraph_number(self, paragraph: int) -> int:
        """The 1-based number a reader gives the text's `paragraph` (0-based, headings included): the
        headings the section opens with are not paragraphs of it."""
        return max(paragraph - self.lead, 0) + 1

    def slice(self, start: int, end: int) -> "Section":
        """text[start:end] as a section of its own, pages kept."""
        part = Section(self.title, self.text[start:end], meta=dict(self.meta), whole_meta=dict(self.whole_meta),
                       level=self.level, chapter=self.chapter)
        if self.pages:
            part.pages = [(0, self.page_at(start))] + [(o - start, p) for o, p in self.pages if start < o < end]
        return part

    @property
    def first_page(self) -> int:
        return self.pages[0][1] if self.pages else 0


RECORD_FILETYPE = "json"  # the filetype of a document parsed from a JSON record (parsers/records.py)


@dataclass
class Parsed:
    """One document out of a file (a JSON file of records gives several)."""

    doc_id: str
    sections: list[Section]
    filetype: str
    title: str = ""
    date: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    # The complete source record, stored once as the parent of every chunk of the document
    # (the fund-research factsheets' rule: "the complete factsheet JSON kept once per factsheet").
    source: str = ""

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


def with_chapters(sections: list[Section]) -> list[Section]:
    """Sets each section's chapter from the headings' levels: the shallowest level is the chapters' (a lone
    heading above the rest, the document's own title, is not a chapter), every section under a chapter's
    heading belongs to it. A document whose headings are all of one level has chapters only when they are
    named like chapters ("Chapter 3", "Part II", "Introduction"); notes with a few headings have none."""
    headed = [s for s in sections if s.level]
    levels = Counter(s.level for s in headed)
    top = min(levels, default=0)
    if len(levels) > 1 and levels[top] == 1 and headed[0].level == top:
        del levels[top]  # the document's title
        top = min(levels)
    if not levels:
        return sections
    if len(levels) == 1 and not _named_chapters([s.title for s in headed if s.level == top]):
        return sections
    chapter = ""
    for section in sections:
        if section.level == top:
            chapter = section.title
        elif 0 < section.level < top:
            chapter = ""  # the title above the chapters
        section.chapter = chapter
    return sections


def _named_chapters(titles: list[str]) -> bool:
    named = sum(bool(HEADING_LINE.fullmatch(t)) for t in titles)
    return named >= 2 and 2 * named >= len(titles)


def compact(sections: list[Section]) -> list[Section]:
    """Drops empty sections and joins a heading with nothing under it to the next section (headings
    in a row, a book's title then its first chapter's and section's, all to the first text after
    them), so no chunk is a lone heading."""
    out: list[Section] = []
    pending: Section | None = None
    for section in sections:
        if not section.text.strip():
            continue
        if pending is not None:
            section = _joined(pending, section)
            pending = None
        if _only_headings(section):
            pending = section
        else:
            out.append(section)
    if pending is not None:
        out.append(pending)
    return out


def _only_headings(section: Section) -> bool:
    return bool(section.title) and (section.text.strip() == section.title.strip()
                                    or _paragraphs(section.text) <= section.lead)


def _paragraphs(text: str) -> int:
    return len(_PARAGRAPH_BREAK.findall(text.strip())) + 1


def _joined(first: Section, second: Section) -> Section:
    """first's text then second's, under second's title; page offsets kept."""
    joined = Section(second.title, first.text, list(first.pages), {**first.meta, **second.meta},
                     {**first.whole_meta, **second.whole_meta}, second.level,
                     _paragraphs(first.text) + second.lead, second.chapter or first.chapter)
    shift = len(first.text) + 2
    joined.text += "\n\n" + second.text
    pages = [(offset + shift, page) for offset, page in second.pages]
    if not first.pages and pages and pages[0][0] == shift:
        pages[0] = (0, pages[0][1])  # the heading sits on the page its section starts
    joined.pages += [p for p in pages if not joined.pages or p[1] != joined.pages[-1][1]]
    return joined
