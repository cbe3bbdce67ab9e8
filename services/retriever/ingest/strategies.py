"""From a parsed document to chunk texts (type-aware chunking): detect the type, redact, then the
type's chunker. Chunks never span sections (so each names one, with its chapter and the number of
its first paragraph in the section) but may span pages (each names the first and last); BOOK parents
group whole paragraphs and may span sections (each names where it starts).

FAQ:       one chunk per Q&A pair, at most 8,000 chars (a longer answer continues in further
           chunks that repeat the question, where a single cut would lose it).
BOOK:      parents of 2,000-3,500 chars, stored for expansion, not embedded; children of
           400-700 chars with 2 sentences of overlap, embedded.
SENSITIVE: 225-450 chars, no overlap.
USER:      400-800 chars (CHUNK_MIN_CHARS / CHUNK_MAX_CHARS), 1 sentence of overlap.

No embedded chunk is longer than EMBED_MAX_CHARS (`Sizes.embed_max`): every chunker's maximum is
capped by it, and a sentence longer than it is split at word boundaries. The embedding model reads
a bounded window (all-MiniLM-L6-v2: 256 tokens, about 900-1,100 characters of English) and silently
drops the rest, so cutting the embedding input at EMBED_MAX_CHARS would leave the tail of an
8,000-character FAQ answer in BM25 only: a question worded differently from the tail could never
reach it. Splitting costs more chunks (a long FAQ answer continues in further chunks that repeat
its question, as answers past 8,000 characters already did) but every indexed word is seen by both
sides of the search, and nothing is cut."""
from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ragmesh.text import sentence_spans
from services.retriever.ingest.chunker import group
from services.retriever.ingest.detect import BOOK, FAQ, QUESTION_LINE, SENSITIVE, USER, detect_document_type
from services.retriever.ingest.parsed import Parsed, Section
from services.retriever.ingest.sanitize import pii_density, sanitize, sensitivity

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Sizes:
    """(min, max, overlap in sentences) of each chunker."""

    user: tuple[int, int, int] = (400, 800, 1)
    sensitive: tuple[int, int, int] = (225, 450, 0)
    child: tuple[int, int, int] = (400, 700, 2)
    parent: tuple[int, int] = (2000, 3500)
    faq_max: int = 8000
    embed_max: int = 800  # EMBED_MAX_CHARS: the most an embedded chunk may hold

    def capped(self) -> "Sizes":
        """These sizes with every embedded chunk's maximum at most embed_max (parents are not embedded)."""
        def fit(size: tuple[int, int, int]) -> tuple[int, int, int]:
            lo, hi, overlap = size
            hi = min(hi, self.embed_max)
            return min(lo, hi // 2), hi, overlap

        return dataclasses.replace(self, user=fit(self.user), sensitive=fit(self.sensitive), child=fit(self.child),
                                   faq_max=min(self.faq_max, self.embed_max))


@dataclass
class Piece:
    """One chunk's text and where it came from; `parent` indexes the parent piece, if any."""

    text: str
    section: str = ""
    page: int = 0
    page_end: int = 0
    meta: dict[str, str] = field(default_factory=dict)
    is_parent: bool = False
    parent: int | None = None
    chapter: str = ""
    paragraph: int = 0  # 1-based, in its section: where the piece starts

    @property
    def place(self) -> dict[str, str]:
        """The chunk metadata naming its chapter and paragraph: none for a document without chapters."""
        return {"chapter": self.chapter, "paragraph": str(self.paragraph)} if self.chapter else {}


@dataclass
class Chunked:
    doc_type: str
    sensitivity: str
    redactions: int
    pieces: list[Piece]
    sections: list[Section]  # redacted, for summaries


@dataclass
class _Unit:
    """A sentence, or a paragraph (BOOK parents), with its section and pages."""

    text: str
    section: int
    page: int
    page_end: int
    paragraph: int = 0


def _redact(section: Section) -> tuple[Section, int]:
    """The section with PII replaced, page by page so page offsets stay right."""
    bounds = sorted({0, *(offset for offset, _ in section.pages), len(section.text)})
    clean = dataclasses.replace(section, text="", pages=[], meta=dict(section.meta), whole_meta=dict(section.whole_meta))
    redactions = 0
    for a, b in zip(bounds, bounds[1:]):
        done = sanitize(section.text[a:b])
        redactions += done.redactions
        clean.add(done.text, section.page_at(a), sep="")
    return clean, redactions


def _within(text: str, a: int, b: int, limit: int) -> Iterator[tuple[int, int]]:
    """[a, b) as spans of at most `limit` characters, cut at whitespace (a longer word where it must)."""
    while b - a > limit:
        cut = max(text.rfind(" ", a + 1, a + limit + 1), text.rfind("\n", a + 1, a + limit + 1))
        cut = cut if cut > a else a + limit
        yield a, cut
        a = cut
        while a < b and text[a].isspace():
            a += 1
    if a < b:
        yield a, b


def _sentences(section: Section, index: int, limit: int) -> list[_Unit]:
    """The section's sentences (one longer than `limit` in parts), each with its pages and paragraph number."""
    breaks = [m.end() for m in _PARAGRAPH_BREAK.finditer(section.text)]
    return [
        _Unit(" ".join(section.text[a:b].split()), index, section.page_at(a), section.page_at(b - 1),
              bisect.bisect_right(breaks, a))
        for start, end in sentence_spans(section.text) for a, b in _within(section.text, start, end, limit)
    ]


def _join(units: list[_Unit]) -> str:
    """Sentences of a paragraph joined by a space, paragraphs by a blank line (headings stay apart)."""
    parts = [units[0].text] if units else []
    for before, unit in zip(units, units[1:]):
        parts += [" " if unit.paragraph == before.paragraph else "\n\n", unit.text]
    return "".join(parts)


def _pieces(units: list[_Unit], sections: list[Section], size: tuple[int, int, int],
            parent: int | None = None) -> list[Piece]:
    """Sentence units of one section packed to size."""
    lo, hi, overlap = size
    # A unit that starts a paragraph is joined by two characters, not one: count the extra.
    lengths = [len(u.text) + (i > 0 and u.paragraph != units[i - 1].paragraph) for i, u in enumerate(units)]
    out = []
    said = 0  # units the pieces so far hold: a piece's first new unit is where it points a reader
    for a, b in group(lengths, lo, hi, overlap):
        first, last = units[a], units[b - 1]
        out.append(_piece(_join(units[a:b]), sections[first.section], first, last, units[min(max(a, said), b - 1)],
                          parent=parent))
        said = b
    return out


def _piece(text: str, section: Section, first: _Unit, last: _Unit, new: _Unit | None = None,
           parent: int | None = None, is_parent: bool = False) -> Piece:
    """A piece of `section` from `first`'s sentence to `last`'s: its place (section, chapter, pages, and the
    paragraph of `new`, its first sentence that the piece before did not hold: the overlap is not where it is)."""
    return Piece(text, section.title, first.page, last.page_end, dict(section.meta), is_parent, parent,
                 section.chapter, section.paragraph_number((new or first).paragraph))


def _section_pieces(sections: list[Section], index: int, size: tuple[int, int, int], limit: int) -> list[Piece]:
    """One section's sentences packed to size; a section that is one chunk whole takes its `whole_meta`."""
    section = sections[index]
    pieces = _pieces(_sentences(section, index, limit), sections, size)
    if len(pieces) == 1:
        pieces[0].meta |= section.whole_meta
    return pieces


def _by_section(units: list[_Unit]) -> list[list[_Unit]]:
    runs: list[list[_Unit]] = []
    for u in units:
        if runs and runs[-1][-1].section == u.section:
            runs[-1].append(u)
        else:
            runs.append([u])
    return runs


def _faq(sections: list[Section], sizes: Sizes) -> list[Piece]:
    out = []
    for section in sections:
        starts = sorted({0, *(m.start() for m in QUESTION_LINE.finditer(section.text)), len(section.text)})
        for a, b in zip(starts, starts[1:]):
            raw = section.text[a:b]
            block = raw.strip()
            if not block:
                continue
            a += len(raw) - len(raw.lstrip())
            paragraph = section.paragraph_number(len(_PARAGRAPH_BREAK.findall(section.text, 0, a)))
            if len(block) <= sizes.faq_max:
                out.append(Piece(block, section.title, section.page_at(a), section.page_at(a + len(block) - 1),
                                 dict(section.meta), chapter=section.chapter, paragraph=paragraph))
                continue
            question = block.partition("\n")[0]
            if len(question) > sizes.faq_max // 2:  # too long to repeat: split with its answer, like text
                question = ""
            part = section.slice(a + len(question) + 1 if question else a, a + len(block))
            room = sizes.faq_max - len(question) - 1 if question else sizes.faq_max
            for piece in _pieces(_sentences(part, 0, room), [part], (room // 2, room, 0)):
                piece.paragraph = paragraph  # the question's: the part's own count starts inside it
                if question:
                    piece.text = f"{question}\n{piece.text}"
                out.append(piece)
    return out


def _book(sections: list[Section], sizes: Sizes) -> list[Piece]:
    """Parents from whole paragraphs (a paragraph longer than a parent is split at sentences),
    then each parent's children, section by section."""
    sentences = [u for i, s in enumerate(sections) for u in _sentences(s, i, sizes.embed_max)]
    paragraphs: list[list[_Unit]] = []
    for u in sentences:
        if paragraphs and (paragraphs[-1][-1].section, paragraphs[-1][-1].paragraph) == (u.section, u.paragraph):
            paragraphs[-1].append(u)
        else:
            paragraphs.append([u])
    lo, hi = sizes.parent
    blocks: list[list[_Unit]] = []
    for para in paragraphs:
        ranges = group([len(u.text) for u in para], lo, hi) if sum(len(u.text) + 1 for u in para) > hi else [(0, len(para))]
        blocks += [para[a:b] for a, b in ranges]
    out: list[Piece] = []
    block_lengths = [sum(len(u.text) + 1 for u in b) - 1 for b in blocks]
    for a, b in group(block_lengths, lo, hi, sep=2):
        units = [u for block in blocks[a:b] for u in block]
        first, last = units[0], units[-1]
        text = "\n\n".join(_join(block) for block in blocks[a:b])
        out.append(_piece(text, sections[first.section], first, last, is_parent=True))
        parent = len(out) - 1
        for run in _by_section(units):
            out += _pieces(run, sections, sizes.child, parent)
    return out


def chunk_document(parsed: Parsed, sizes: Sizes = Sizes()) -> Chunked:
    sizes = sizes.capped()
    raw = parsed.text
    density = pii_density(raw)
    doc_type = detect_document_type(raw, density)
    if doc_type == BOOK and parsed.source:
        doc_type = USER  # a record's own source is the parent of its chunks
    redacted = [_redact(s) for s in parsed.sections]
    sections = [s for s, _ in redacted]
    redactions = sum(n for _, n in redacted)
    if doc_type == FAQ:
        pieces = _faq(sections, sizes)
    elif doc_type == BOOK:
        pieces = _book(sections, sizes)
    else:
        size = sizes.sensitive if doc_type == SENSITIVE else sizes.user
        pieces = [p for i in range(len(sections)) for p in _section_pieces(sections, i, size, sizes.embed_max)]
    if parsed.source:
        source = sanitize(parsed.source)
        redactions += source.redactions
        for piece in pieces:  # no BOOK parents here: see above
            piece.parent = 0
        pieces.insert(0, Piece(source.text, is_parent=True))
    return Chunked(doc_type, sensitivity(redactions, density), redactions, pieces, sections)
