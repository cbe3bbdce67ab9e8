"""JSON records (a .json array or object, or .jsonl lines): one document per record.

Text fields become sections (named by the field, also as `section_type`), nested objects and
lists become rendered sections, numbers a "details" section, and short fields metadata. Meeting
notes (fund_name, manager, meeting_date), factsheets (fund_name, report_date) and transcripts
(raw_text, refined_text, tags) get the titles and fields the rest of the system
expects; meeting notes and factsheets get their kind's sections (fund_records.py) and their
other fields as any record's. A factsheet, and any record with nested data, keeps its complete
JSON once, as the parent chunk of its sections (the fund-research rule: "the complete factsheet JSON
kept once per factsheet"), which the context shows whole."""
from __future__ import annotations

import json
from typing import Any

from ragmesh.errors import InvalidArgument
from ragmesh.validation import check_date
from services.retriever.ingest.parsed import RECORD_FILETYPE, BadRecord, Parsed, Section, UnreadableFile
from services.retriever.ingest.parsers.fund_records import LAYOUTS
from services.retriever.ingest.parsers.text import decode

ID_FIELDS = ("doc_id", "id", "factsheet_id", "meeting_id", "transcript_id")
_DATE_FIELDS = ("date", "meeting_date", "report_date", "echodate", "created_at")
_TEXT_FIELDS = {"text", "content", "body", "notes", "conclusion", "commentary", "summary", "description",
                "raw_text", "refined_text", "polished_text", "transcript"}
_LONG = 300  # a string field longer than this is text, not metadata


def _load(data: bytes, name: str, lines: bool) -> list[Any]:
    """The file's records; in JSON Lines a line that does not parse is a BadRecord, not the
    end of the file."""
    text = decode(data, name)
    if not lines:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnreadableFile(name, f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return value if isinstance(value, list) else [value]
    records: list[Any] = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                records.append(BadRecord(f"line {number} is not valid JSON ({exc.msg})"))
    return records


def _kind(r: dict) -> str:
    if "raw_text" in r:
        return "transcript"
    if "factsheet_id" in r or ("report_date" in r and "fund_name" in r):
        return "factsheet"
    if "meeting_date" in r:
        return "meeting_note"
    return "record"


def _title(r: dict, kind: str) -> str:
    if r.get("title"):
        return str(r["title"])
    fund = r.get("fund_name", "")
    if kind == "factsheet":
        return f"{fund} Factsheet ({r.get('report_date', '')})"
    if kind == "meeting_note":
        manager = f" with {r['manager']}" if r.get("manager") else ""
        return f"{fund} meeting{manager} ({r['meeting_date']})".strip()
    if kind == "transcript":
        return f"Transcript {_date(r)}".strip()
    return str(r.get("name", ""))


def _date(r: dict) -> str:
    for key in _DATE_FIELDS:
        value = str(r.get(key) or "")[:10]
        try:
            if value and check_date(key, value):
                return value
        except InvalidArgument:
            continue
    return ""


def _words(key: str) -> str:
    return key.replace("_", " ")


def _render(value: Any) -> str:
    """Nested data as a readable line: 'month 1.9; ytd 6.4', 'Calverton (sector Software, weight 6.2)'."""
    if isinstance(value, dict):
        return "; ".join(f"{_words(k)} {_render(v)}" for k, v in value.items() if v not in (None, "", [], {}))
    if isinstance(value, list):
        return "; ".join(_render_item(v) for v in value)
    return str(value)


def _render_item(value: Any) -> str:
    if not isinstance(value, dict):
        return _render(value)
    name_key = next((k for k in ("name", "title", "label") if k in value), None)
    rest = ", ".join(f"{_words(k)} {_render(v)}" for k, v in value.items() if k != name_key)
    return f"{value[name_key]} ({rest})" if name_key else f"({rest})"


def _is_structured(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))


def _record(r: dict) -> Parsed:
    kind = _kind(r)
    title = _title(r, kind)
    metadata: dict[str, str] = {}
    sections, laid_out = LAYOUTS[kind](r) if kind in LAYOUTS else ([], set())
    numbers: list[str] = []
    for key, value in r.items():
        if value is None or key == "title":
            continue
        if key in laid_out:  # in its kind's sections already; a figure stays metadata too
            if isinstance(value, (int, float)):
                metadata[key] = str(value)
            continue
        if isinstance(value, str) and (key in _TEXT_FIELDS or len(value) > _LONG):
            sections.append(Section(key, value.strip(), meta={"section_type": key}))
        elif _is_structured(value):
            sections.append(Section(key, f"{title} {_words(key)}: {_render(value)}.", meta={"section_type": key}))
        elif isinstance(value, list):
            metadata[key] = ", ".join(str(v) for v in value)
        elif isinstance(value, bool):
            metadata[key] = str(value).lower()
        else:
            metadata[key] = str(value)
            if isinstance(value, (int, float)) and key not in ID_FIELDS:
                numbers.append(f"{_words(key)} {value}")
    if numbers:
        sections.append(Section("details", f"{title} details: {'; '.join(numbers)}.", meta={"section_type": "details"}))
    metadata.setdefault("type", kind)
    whole = kind == "factsheet" or any(_is_structured(v) for v in r.values())
    source = json.dumps(r, ensure_ascii=False, separators=(",", ":")) if whole else ""
    doc_id = next((str(r[k]) for k in ID_FIELDS if r.get(k) not in (None, "")), "")
    return Parsed(doc_id, sections, RECORD_FILETYPE, title=title, date=_date(r), metadata=metadata, source=source)


def _parse(data: bytes, name: str, lines: bool) -> list[Parsed | BadRecord]:
    out: list[Parsed | BadRecord] = []
    for number, r in enumerate(_load(data, name, lines), 1):
        if isinstance(r, BadRecord):
            out.append(r)
        elif isinstance(r, dict):
            out.append(_record(r))
        else:
            out.append(BadRecord(f"record {number} is a JSON {type(r).__name__}, not an object"))
    return out


def parse_json(data: bytes, name: str) -> list[Parsed | BadRecord]:
    return _parse(data, name, lines=False)


def parse_jsonl(data: bytes, name: str) -> list[Parsed | BadRecord]:
    return _parse(data, name, lines=True)
