"""When a notes or factsheet search finds nothing, the most recent notes of the fund(s) in scope are the
context, newest first, and the answer says so; with no notes of those funds at all, the plain no-match."""
from __future__ import annotations

import json
from pathlib import Path

from services.gateway.fallback import PREFACE
from services.gateway.pipeline import NO_MATCH
from tests.conftest import answer_of, one, sse
from tests.stack import Stack

KESTREL = "Kestrel Emerging Markets"
CORPUS = Path(__file__).resolve().parents[2] / "demo" / "corpus"


def newest_kestrel_dates() -> list[str]:
    """The dates of Kestrel's notes and factsheets, newest first (from the demo corpus itself)."""
    dates = []
    for name, field in (("meeting_notes.jsonl", "meeting_date"), ("factsheets.jsonl", "report_date")):
        for line in (CORPUS / name).read_text().splitlines():
            doc = json.loads(line)
            if doc["fund_name"] == KESTREL:
                dates.append(doc[field])
    return sorted(dates, reverse=True)


def ask(stack: Stack, question: str, headers: dict[str, str] | None = None, **extra) -> list[dict]:
    return sse(stack.http_url + "/api/chat/ask/stream", {"question": question, **extra}, headers or stack.headers)


def test_nothing_matched_gives_the_funds_recent_notes_said_as_such(stack: Stack) -> None:
    events = ask(stack, "What did Kestrel do?", start_date="2030-01-01", end_date="2030-12-31")
    strategy = one(events, "strategy")
    assert (strategy["filter"]["start_date"], strategy["filter"]["end_date"]) == ("2030-01-01", "2030-12-31")
    note = f"nothing matched: the most recent notes of {KESTREL}, newest first, are the context"
    assert note in strategy["relaxed"] and note in strategy["reason"]
    answer = answer_of(events)
    assert answer.startswith(PREFACE.format(of=f" of {KESTREL}")), answer
    assert answer != NO_MATCH
    citations = one(events, "citations")
    assert citations and {c["metadata"]["fund_name"] for c in citations} == {KESTREL}
    newest = newest_kestrel_dates()[:2]
    assert {c["date"] for c in citations} <= set(newest_kestrel_dates()[:6])
    assert any(c["date"] in newest for c in citations), "the newest notes are among those quoted"


def test_no_notes_of_the_funds_at_all_is_the_plain_no_match(stack: Stack) -> None:
    """A tenant with no notes: nothing to fall back on."""
    from tests.auth import headers

    events = ask(stack, "What did Kestrel do?", headers(stack.key("empty-tenant", "analyst")))
    assert answer_of(events) == NO_MATCH and one(events, "citations") == []
    assert not any(r.startswith("nothing matched") for r in one(events, "strategy")["relaxed"])
