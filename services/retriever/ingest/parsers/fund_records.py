"""How the fund-research record kinds (meeting notes, factsheets) become sections, whoever sends
them: the demo loader and a customer's `ragmesh ingest` or `/api/documents` go through this one path.

Factsheets: three sections, `performance` (the figures with their names and units, and the
assets under management), `holdings` (the top holdings and the exposure) and `commentary`, each
opening with the fund and the report date so a chunk says what it is about on its own; the opening
leads into the section's first sentence rather than standing alone, so no sentence an answer may
quote says only which factsheet it is. Meeting notes: the notes as `notes_part` chunks (one
`full_notes` chunk when they fit in one) and the conclusion as a `conclusion` chunk, the chunk
types the fund-research answers cite."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.retriever.ingest.parsed import Section

# A layout turns a record into its sections and names the fields they consumed (the generic
# rendering skips those, though their scalar values stay metadata).
Layout = Callable[[dict], tuple[list[Section], set[str]]]

_PERFORMANCE = {  # field: (how the text names it, unit)
    "month": ("month return", "%"), "mtd": ("month-to-date", "%"), "qtd": ("quarter-to-date", "%"),
    "ytd": ("year-to-date", "%"), "one_year": ("one-year return", "%"), "three_year": ("three-year return", "%"),
    "since_inception": ("since inception", "%"), "since_inception_annualised": ("annualised since inception", "%"),
    "volatility": ("volatility", "%"), "sharpe": ("Sharpe ratio", ""), "max_drawdown": ("maximum drawdown", "%"),
}
_EXPOSURE = {"gross": "Gross exposure", "net": "net exposure", "long": "long", "short": "short"}
_AUM = {"aum_usd_bn": ("assets under management $", "bn"), "aum_usd_mn": ("assets under management $", "m")}


def _words(key: str) -> str:
    return key.replace("_", " ")


def _figure(key: str, value: Any, names: dict[str, tuple[str, str]]) -> str:
    name, unit = names.get(key, (_words(key), ""))
    return f"{name}{value}{unit}" if name.endswith("$") else f"{name} {value}{unit}"


def _holding(h: Any) -> str:
    if not isinstance(h, dict):
        return str(h)
    name = h.get("name") or h.get("title") or ""
    sector = f" ({h['sector']})" if h.get("sector") else ""
    weight = f" {h['weight']}%" if h.get("weight") not in (None, "") else ""
    rest = ", ".join(f"{_words(k)} {v}" for k, v in h.items() if k not in ("name", "title", "sector", "weight"))
    return f"{name}{sector}{weight}" + (f" ({rest})" if rest else "")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def factsheet(r: dict) -> tuple[list[Section], set[str]]:
    fund, date = r.get("fund_name", ""), r.get("report_date", "")
    sections: list[Section] = []
    used: set[str] = set()
    figures: list[str] = []
    if isinstance(r.get("performance"), dict):
        used.add("performance")
        figures += [_figure(k, v, _PERFORMANCE) for k, v in r["performance"].items() if v not in (None, "")]
    numbers = [k for k, v in r.items() if _number(v) and k not in used and k != "id" and not k.endswith("_id")]
    used.update(numbers)
    figures += [_figure(k, r[k], _AUM) for k in numbers]
    if figures:
        sections.append(_section("performance", f"{fund} performance as of {date}: " + ", ".join(figures) + "."))
    parts: list[str] = []
    if isinstance(r.get("holdings"), list):
        used.add("holdings")
        parts.append(f"{fund} top holdings as of {date}: " + ", ".join(_holding(h) for h in r["holdings"]) + ".")
    if isinstance(r.get("exposure"), dict):
        used.add("exposure")
        exposure = ", ".join(f"{_EXPOSURE.get(k, _words(k))} {v}%" for k, v in r["exposure"].items())
        parts.append(exposure[0].upper() + exposure[1:] + ".")
    if parts:
        sections.append(_section("holdings", " ".join(parts)))
    if isinstance(r.get("commentary"), str) and r["commentary"].strip():
        used.add("commentary")
        sections.append(_section("commentary", f"{fund} commentary for the period ending {date}: "
                                               f"{r['commentary'].strip()}"))
    return sections, used


def meeting_note(r: dict) -> tuple[list[Section], set[str]]:
    sections: list[Section] = []
    used: set[str] = set()
    if isinstance(r.get("notes"), str) and r["notes"].strip():
        used.add("notes")
        sections.append(Section("notes", r["notes"].strip(), meta={"section_type": "notes", "chunk_type": "notes_part"},
                                whole_meta={"chunk_type": "full_notes"}))
    if isinstance(r.get("conclusion"), str) and r["conclusion"].strip():
        used.add("conclusion")  # labelled, so a chunk of it alone still says what it is
        sections.append(Section("conclusion", f"Conclusion: {r['conclusion'].strip()}",
                                meta={"section_type": "conclusion", "chunk_type": "conclusion"}))
    return sections, used


def _section(name: str, text: str) -> Section:
    return Section(name, text, meta={"section_type": name})


LAYOUTS: dict[str, Layout] = {"factsheet": factsheet, "meeting_note": meeting_note}
