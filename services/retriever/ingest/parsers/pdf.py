"""PDF (pypdf): every page's text with its page number, sections at heading-like lines.

pypdf gives lines without blank lines between paragraphs, so paragraph ends are inferred: a
short line that finishes a sentence, or a short heading-like line before a capitalised one.
Without them every PDF would look like one paragraph and never chunk as long form."""
from __future__ import annotations

import io

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError

from services.retriever.ingest.detect import HEADING_LINE
from services.retriever.ingest.parsed import Parsed, Section, UnreadableFile
from services.retriever.ingest.parsers.text import sections_at_headings

_SHORT = 0.8  # of the page's usual line length


def _with_paragraphs(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    lengths = sorted(len(line) for line in lines if line.strip())
    if not lengths:
        return ""
    width = lengths[int(0.9 * (len(lengths) - 1))]
    out = []
    for line, following in zip(lines, lines[1:] + [""]):
        out.append(line)
        short = len(line) < _SHORT * width
        ends_sentence = line.endswith((".", "!", "?", ":", '"', ")"))
        heading = HEADING_LINE.fullmatch(line) or (len(line) < 0.5 * width and following[:1].isupper())
        out.append("\n\n" if short and (ends_sentence or heading) else "\n")
    return "".join(out).strip()


def parse_pdf(data: bytes, name: str) -> list[Parsed]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opened(reader):
            raise UnreadableFile(name, "is an encrypted PDF (password protected): remove the password and send it again")
        sections: list[Section] = [Section("")]
        for number, page in enumerate(reader.pages, 1):
            sections_at_headings(_with_paragraphs(page.extract_text() or ""), number, into=sections)
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except UnreadableFile:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files; all mean "cannot read it"
        raise UnreadableFile(name, f"is not a readable PDF ({type(exc).__name__}: {exc})") from None
    return [Parsed("", sections, "pdf", title=title)]


def _opened(reader: PdfReader) -> bool:
    """PDFs locked only against editing open with the empty user password."""
    try:
        return bool(reader.decrypt(""))
    except (DependencyError, FileNotDecryptedError, NotImplementedError):
        return False
