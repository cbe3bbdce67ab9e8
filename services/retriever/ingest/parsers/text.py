"""Plain text: bytes to str (UTF-8, or what a byte-order mark says), sections at heading-like lines."""
from __future__ import annotations

import codecs
import re

from services.retriever.ingest.detect import HEADING_LINE
from services.retriever.ingest.parsed import Parsed, Section, UnreadableFile

# A heading's level by its first word: parts hold chapters, chapters hold sections.
_LEVELS = {"part": 1, "book": 1, "section": 3}
_OWN_PARAGRAPH = re.compile(r"[ \t]*\n[ \t]*\n")

_BOMS = [  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
]


def decode(data: bytes, name: str) -> str:
    """UTF-8, or the encoding a byte-order mark names; anything else is a clear error, not mojibake."""
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            name, f"is not {encoding.upper().removesuffix('-SIG')} text (undecodable byte 0x{data[exc.start]:02x} "
                  f"at offset {exc.start}); save it as UTF-8"
        ) from None
    if "\x00" in text:
        raise UnreadableFile(name, "looks like a binary file, not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def sections_at_headings(text: str, page: int = 0, into: list[Section] | None = None) -> list[Section]:
    """Splits text into sections at heading-like lines ("Chapter 3", "Part II", ...), appending
    to `into` (a PDF continues its current section across pages)."""
    sections = into if into is not None else [Section("")]
    start = 0
    for m in HEADING_LINE.finditer(text):
        sections[-1].add(text[start:m.start()].strip("\n"), page, sep=_separator(sections[-1].text))
        title = " ".join(m.group().split())
        sections.append(Section(title, level=_LEVELS.get(title.split()[0].lower(), 2),
                                lead=int(bool(_OWN_PARAGRAPH.match(text, m.end())))))
        start = m.start()
    sections[-1].add(text[start:].strip("\n"), page, sep=_separator(sections[-1].text))
    return sections


def _separator(before: str) -> str:
    """A blank line after a finished sentence; a plain newline where text runs on (across pages)."""
    return "\n\n" if before.rstrip().endswith((".", "!", "?", ":", '"', "'", ")")) else "\n"


def parse_text(data: bytes, name: str) -> list[Parsed]:
    return [Parsed("", sections_at_headings(decode(data, name)), "text")]
