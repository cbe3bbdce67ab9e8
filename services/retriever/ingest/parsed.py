"""What parsers produce: a document's text in titled sections that remember where each page
starts, so every chunk can carry its section and page."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ragmesh.errors import InvalidArgument


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

    def slice(self, start: int, end: int) -> "Section":
        """text[start:end] as a section of its own, pages kept."""
        part = Section(self.title, self.text[start:end], meta=dict(self.meta), whole_meta=dict(self.whole_meta))
        if self.pages:
            part.pages = [(0, self.page_at(start))] + [(o - start, p) for o, p in self.pages if start < o < end]
        return part

    @property
    def first_page(self) -> int:
        return self.pages[0][1] if self.pages else 0


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


def compact(sections: list[Section]) -> list[Section]:
    """Drops empty sections and joins a heading with nothing under it to the next section,
    so no chunk is a lone heading."""
    out: list[Section] = []
    pending: Section | None = None
    for section in sections:
        if not section.text.strip():
            continue
        if pending is not None:
            section = _joined(pending, section)
            pending = None
        if section.title and section.text.strip() == section.title.strip():
            pending = section
        else:
            out.append(section)
    if pending is not None:
        out.append(pending)
    return out


def _joined(first: Section, second: Section) -> Section:
    """first's text then second's, under second's title; page offsets kept."""
    joined = Section(second.title, first.text, list(first.pages), {**first.meta, **second.meta},
                     {**first.whole_meta, **second.whole_meta})
    shift = len(first.text) + 2
    joined.text += "\n\n" + second.text
    pages = [(offset + shift, page) for offset, page in second.pages]
    if not first.pages and pages and pages[0][0] == shift:
        pages[0] = (0, pages[0][1])  # the heading sits on the page its section starts
    joined.pages += [p for p in pages if not joined.pages or p[1] != joined.pages[-1][1]]
    return joined
