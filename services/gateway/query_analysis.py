"""What a question says about its own scope, found without a model call: time hints
that become date filters or the retriever's time window, words asking for the latest (the time
decay), whole years asked about (the decay counted from the year's end), fund names that become a fund
filter (the known fund list), question numbers for the question-number lookup, whether it asks
something general or something specific (the route's chunk count and threshold), and the keywords that
ask for reasoning or a document's summary (the DEEP and SUMMARY routes)."""
from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_QUARTER_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4,
                  "last": 4, "final": 4}


@dataclass(frozen=True)
class DateRange:
    start: str
    end: str
    phrase: str


def _month_range(year: int, month: int) -> tuple[dt.date, dt.date]:
    return dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1])


def _quarter_range(year: int, quarter: int) -> tuple[dt.date, dt.date]:
    start, _ = _month_range(year, 3 * quarter - 2)
    _, end = _month_range(year, 3 * quarter)
    return start, end


def _relative(text: str, today: dt.date) -> tuple[dt.date, dt.date] | None:
    quarter = (today.month - 1) // 3 + 1
    days = {"today": 0, "yesterday": 1, "last week": 14,
            "past month": 31, "last 30 days": 30, "last 90 days": 90}
    for phrase, n in days.items():
        if phrase == text:
            return today - dt.timedelta(days=n), today
    if text == "this month":
        return _month_range(today.year, today.month)[0], today
    if text == "last month":
        last = today.replace(day=1) - dt.timedelta(days=1)
        return _month_range(last.year, last.month)
    if text == "this quarter":
        return _quarter_range(today.year, quarter)[0], today
    if text == "last quarter":
        year, q = (today.year, quarter - 1) if quarter > 1 else (today.year - 1, 4)
        return _quarter_range(year, q)
    if text == "this year":
        return dt.date(today.year, 1, 1), today
    if text == "last year":
        return dt.date(today.year - 1, 1, 1), dt.date(today.year - 1, 12, 31)
    return None


_RELATIVE = re.compile(r"\b(today|yesterday|last week|past month|last 30 days|last 90 days|"
                       r"this month|last month|this quarter|last quarter|this year|last year)\b", re.I)
_MONTH_YEAR = re.compile(rf"\b(?:in |during |for )?({_MONTH})\.? (\d{{4}})\b", re.I)
_QUARTER = re.compile(r"\b(?:q([1-4])|(first|second|third|fourth|1st|2nd|3rd|4th|last|final) quarter)(?: of)? ?(\d{4})\b",
                      re.I)
# "through 2024" / "throughout 2024" / "across 2024" ask about the year as "in" and "during" do ("from 2022 through
# 2024", a span of years, is not read: no single year is asked)
_YEAR = re.compile(r"\b(?:in|during|for|of|throughout|across|(?<!\d )through) (20\d{2}|19\d{2})\b", re.I)
_SINCE = re.compile(rf"\bsince ({_MONTH})\.? (\d{{4}})\b", re.I)


def time_hint(question: str, today: dt.date) -> DateRange | None:
    """The first time expression in the question as an inclusive date range."""
    if m := _SINCE.search(question):
        start, _ = _month_range(int(m.group(2)), MONTHS[m.group(1).lower()])
        return DateRange(start.isoformat(), today.isoformat(), m.group(0))
    if m := _QUARTER.search(question):
        q = int(m.group(1)) if m.group(1) else _QUARTER_WORDS[m.group(2).lower()]
        start, end = _quarter_range(int(m.group(3)), q)
        return DateRange(start.isoformat(), end.isoformat(), m.group(0))
    if m := _MONTH_YEAR.search(question):
        start, end = _month_range(int(m.group(2)), MONTHS[m.group(1).lower()])
        return DateRange(start.isoformat(), end.isoformat(), m.group(0).strip())
    if m := _RELATIVE.search(question):
        start, end = _relative(m.group(1).lower(), today)  # type: ignore[misc]
        return DateRange(start.isoformat(), end.isoformat(), m.group(0))
    if m := _YEAR.search(question):
        year = int(m.group(1))
        return DateRange(f"{year}-01-01", f"{year}-12-31", m.group(0))
    return None


_WINDOWS = (  # the context windows, relative to now: the retriever filters on them (Boosters.time_window)
    ("24h", re.compile(r"\b(?:last|past) (?:24 hours|day)\b", re.I)),
    ("48h", re.compile(r"\b(?:last|past) (?:48 hours|(?:two|2) days)\b", re.I)),
    ("1w", re.compile(r"\b(?:this week|(?:last|past) (?:7|seven) days|past week)\b", re.I)),
)


@dataclass(frozen=True)
class TimeWindow:
    window: str  # 24h | 48h | 1w
    phrase: str


def time_window(question: str) -> TimeWindow | None:
    """"in the last 24 hours" -> 24h, "last two days" -> 48h, "this week" -> 1w."""
    for window, pattern in _WINDOWS:
        if m := pattern.search(question):
            return TimeWindow(window, m.group(0))
    return None


_WHOLE_YEAR = r"(?:full[- ]year|year[- ]end|calendar[- ]year|annual|whole[- ]year|fy)"
_REPORTED_YEAR = re.compile(rf"\b{_WHOLE_YEAR}\s*(?:of\s+)?(20\d{{2}}|19\d{{2}})\b|\b(20\d{{2}}|19\d{{2}})\s*{_WHOLE_YEAR}\b"
                            r"|\b(?:the\s+)?(?:end|whole)\s+of\s+(20\d{2}|19\d{2})\b", re.I)


def reported_period(question: str) -> DateRange | None:
    """A whole year the question asks the result of ("2025 full-year return", "year-end 2024", "the whole of
    2023"): what reports on it is dated at its end or after, so it ranks what is dated there first rather
    than filtering by date (a mid-year report is dated within the year, the year's own result after it)."""
    if m := _REPORTED_YEAR.search(question):
        year = next(g for g in m.groups() if g)
        return DateRange(f"{year}-01-01", f"{year}-12-31", m.group(0))
    return None


_RECENCY = re.compile(r"\b(latest|most recent(?:ly)?|newest|current(?:ly)?|as of (?:now|today)|right now|"
                      r"at the moment|these days|nowadays|up[- ]to[- ]date|recent(?:ly)?|lately)\b", re.I)


def recency_phrase(question: str) -> str:
    """The words asking for the newest information ("latest", "as of now"), or ""."""
    m = _RECENCY.search(question)
    return m.group(0) if m else ""


_COMMON = {"fund", "global", "capital", "partners", "the", "credit", "equity", "macro", "value", "growth",
           "income", "opportunities", "markets", "emerging", "long", "short", "quant", "systematic"}


def mentioned_funds(question: str, known: list[str]) -> list[str]:
    """Known fund names the question mentions: the full name, or a distinctive first word
    that belongs to one fund only ("Kestrel" -> "Kestrel Emerging Markets")."""
    text = question.lower()
    found = [name for name in known if name.lower() in text]
    first_words: dict[str, list[str]] = {}
    for name in known:
        word = re.split(r"[\s/]+", name.lower())[0]
        if len(word) > 3 and word not in _COMMON:
            first_words.setdefault(word, []).append(name)
    for word, names in first_words.items():
        if len(names) == 1 and names[0] not in found and re.search(rf"\b{re.escape(word)}\b", text):
            found.append(names[0])
    return sorted(found)


_NUMBERED = re.compile(r"\b(?:question|problem|exercise|item|q)\s*(?:no\.?|number|#)?\s*(\d{1,4})\b", re.I)


def question_numbers(question: str) -> list[str]:
    """"explain question 6" -> ["6"] (the question-number lookup)."""
    return list(dict.fromkeys(_NUMBERED.findall(question)))


_GENERAL = re.compile(r"\b(overall|in general|general|overview|all|everything|tell me about|what are|"
                      r"which funds|main|key themes|broadly)\b", re.I)


def is_general(question: str) -> bool:
    """A broad question (more chunks, lower threshold) rather than a pointed one."""
    return bool(_GENERAL.search(question)) and not re.search(r"\d", question)


SUMMARY_PATTERNS = (
    "summarize", "summarise", "summary", "overview", "what is this document about", "what is the document about",
    "what is this book about", "what is the book about", "tell me about this document", "describe this document",
    "what does this document cover", "book summary",
)
REASONING_PATTERNS = (
    "analyze", "analyse", "analysis", "compare", "comparison", "contrast", "why", "how does", "how is", "how are",
    "what causes", "what leads to", "connect", "connection", "relationship", "relate", "correlate", "explain why",
    "what is the relationship", "what is the connection", "difference between", "similarities between",
    "distinguish",
)


def _pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.I)


_SUMMARY, _REASONING = _pattern(SUMMARY_PATTERNS), _pattern(REASONING_PATTERNS)


def _keyword(pattern: re.Pattern[str], question: str) -> str:
    m = pattern.search(question)
    return m.group(1).lower() if m else ""


def reasoning_keyword(question: str) -> str:
    """The words asking for reasoning ("why", "compare", "how does"): the deep-reasoner route; or ""."""
    return _keyword(_REASONING, question)


def summary_keyword(question: str) -> str:
    """The words asking for a summary ("summarize", "what is this document about"), or ""."""
    return _keyword(_SUMMARY, question)
