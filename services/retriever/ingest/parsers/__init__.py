"""Picks the parser for a document (by file extension, then MIME type), checks what every
format must satisfy (not empty, not too large, some text out), and names the resulting
documents: a file of several JSON records gives one document per record, and a record that
cannot be ingested is a BadRecord beside the others rather than the failure of the file."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath

from ragmesh.types import Document
from services.retriever.ingest.parsed import BadRecord, Parsed, UnreadableFile, compact, with_chapters
from services.retriever.ingest.parsers.archive import ArchiveLimits, check_archive
from services.retriever.ingest.parsers.markup import parse_html, parse_markdown
from services.retriever.ingest.parsers.records import parse_json, parse_jsonl
from services.retriever.ingest.parsers.text import parse_text, sections_at_headings

Parser = Callable[[bytes, str], Sequence[Parsed | BadRecord]]


def _lazy(module: str, function: str) -> Parser:
    """pypdf, python-docx and python-pptx (~33 MB) load with the first file of their kind, not at start."""
    def parse(content: bytes, name: str) -> Sequence[Parsed | BadRecord]:
        return getattr(importlib.import_module(f"services.retriever.ingest.parsers.{module}"), function)(content, name)

    return parse


parse_pdf, parse_docx, parse_pptx = _lazy("pdf", "parse_pdf"), _lazy("office", "parse_docx"), _lazy("office", "parse_pptx")

PARSERS: dict[str, Parser] = {
    ".pdf": parse_pdf, ".docx": parse_docx, ".pptx": parse_pptx,
    ".md": parse_markdown, ".markdown": parse_markdown, ".html": parse_html, ".htm": parse_html,
    ".txt": parse_text, ".text": parse_text, ".json": parse_json, ".jsonl": parse_jsonl, ".ndjson": parse_jsonl,
}
_MIME_TYPES = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "text/markdown": ".md", "text/x-markdown": ".md", "text/html": ".html", "text/plain": ".txt",
    "application/json": ".json", "application/x-ndjson": ".jsonl", "application/jsonl": ".jsonl",
}
_LINEAR = {parse_markdown, parse_html, parse_text, parse_json, parse_jsonl}
_ZIPPED = {parse_docx, parse_pptx}  # checked for decompression bombs before they are opened
_OLD_OFFICE = {".doc": ".docx", ".ppt": ".pptx", ".rtf": ".docx", ".odt": ".docx", ".odp": ".pptx"}


def _parser(doc: Document, name: str) -> Parser:
    suffix = PurePosixPath(doc.filename.lower()).suffix
    if suffix in PARSERS:
        return PARSERS[suffix]
    mime = doc.mime_type.split(";")[0].strip().lower()
    if mime in _MIME_TYPES:
        return PARSERS[_MIME_TYPES[mime]]
    if suffix in _OLD_OFFICE:
        raise UnreadableFile(name, f"is an old {suffix} file, which is not supported: save it as {_OLD_OFFICE[suffix]}")
    what = f"file type {suffix!r}" if suffix else f"MIME type {mime!r}" if mime else "file without an extension"
    known = ", ".join(sorted(PARSERS))
    raise UnreadableFile(name, f"is an unsupported {what} (supported: {known})")


def check_size(doc: Document, max_bytes: int) -> None:
    """UnreadableFile unless the document is one of text or content, of at most max_bytes
    (INGEST_MAX_BYTES): checked before a file is handed to a parse worker, and again by parse()."""
    name = doc.filename or doc.doc_id
    if doc.content and doc.text:
        raise UnreadableFile(name, "has both text and content: send one of them")
    if len(doc.content) > max_bytes:
        raise UnreadableFile(name, f"is {len(doc.content):,} bytes, over the limit of {max_bytes:,} bytes "
                                   "(INGEST_MAX_BYTES)")
    if len(doc.text) > max_bytes:
        raise UnreadableFile(name, f"is {len(doc.text):,} characters, over the limit of {max_bytes:,} "
                                   "(INGEST_MAX_BYTES)")


def is_light(doc: Document, limit: int) -> bool:
    """Small (at most `limit` bytes or characters) and of a format parsed in time linear in its
    size, in pure Python: cheaper to parse in place than to send to a worker process."""
    if not doc.content:
        return len(doc.text) <= limit
    try:
        return _parser(doc, "") in _LINEAR and len(doc.content) <= limit
    except UnreadableFile:  # an unsupported format: refused at once, unparsed
        return True


def parse(doc: Document, max_bytes: int, archive: ArchiveLimits = ArchiveLimits()) -> list[Parsed | BadRecord]:
    """The documents in `doc`, each with its doc_id, in file order. Raises UnreadableFile
    naming the file when the file as a whole fails (or its only record does), or a zip-based
    file would inflate past `archive`."""
    name = doc.filename or doc.doc_id
    check_size(doc, max_bytes)
    if doc.content:
        parser = _parser(doc, name)
        if parser in _ZIPPED:
            check_archive(doc.content, name, archive)
        parsed = parser(doc.content, name)
    elif doc.text.strip():
        parsed = [Parsed("", sections_at_headings(doc.text.replace("\r\n", "\n")), "text")]
    else:
        raise UnreadableFile(name, "is empty")
    if not parsed:
        raise UnreadableFile(name, "holds no records")
    out = [_checked(p, number, doc.doc_id, len(parsed)) for number, p in enumerate(parsed, 1)]
    seen: set[str] = set()
    for number, p in enumerate(out, 1):
        if isinstance(p, Parsed):
            if p.doc_id in seen:
                out[number - 1] = BadRecord(f"record {number} repeats doc_id {p.doc_id!r}")
            seen.add(p.doc_id)
    if all(isinstance(p, BadRecord) for p in out):  # not a file of records at all, say so once
        more = f" (and all {len(out) - 1} other records fail)" if len(out) > 1 else ""
        raise UnreadableFile(name, out[0].reason + more)
    return out


def _checked(p: Parsed | BadRecord, number: int, file_id: str, records: int) -> Parsed | BadRecord:
    """Names the document, gives its sections their chapters and checks that it has text to index."""
    if isinstance(p, BadRecord):
        return p
    p.sections = compact(with_chapters(p.sections))
    if not p.sections:
        hint = " (a scanned PDF? text recognition is not supported)" if p.filetype == "pdf" else ""
        return BadRecord(f"{f'record {number} ' if records > 1 else ''}has no text to index{hint}")
    p.doc_id = p.doc_id or (file_id if records == 1 else f"{file_id}#{number}")
    return p
