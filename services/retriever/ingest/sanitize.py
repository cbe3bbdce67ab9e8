"""PII redaction: emails, phone numbers, SSNs, card numbers and long numeric ids
become `[REDACTED_*]` labels before anything is chunked, embedded or stored.

Card-shaped digit runs count towards PII density whether or not they pass the Luhn check, but
only Luhn-valid ones are redacted as cards: that is what makes MEDIUM (PII-like content, nothing
redacted) reachable."""
from __future__ import annotations

import re
from dataclasses import dataclass

HIGH, MEDIUM, LOW = "HIGH", "MEDIUM", "LOW"
MEDIUM_DENSITY = 0.005

# In priority order: where matches overlap, the earlier kind wins.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("EMAIL", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")),
    ("SSN", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")),
    # 13-19 digits as 4-4-4-n (or unbroken), or Amex's 4-6-5, one separator throughout.
    ("CARD", re.compile(r"(?<![\d-])(?:\d{4}([ -]?)\d{4}\1\d{4}\1\d{1,7}|\d{4}([ -]?)\d{6}\2\d{5})(?![\d-])")),
    ("PHONE", re.compile(
        r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)"
        r"|(?<![\w+])\+\d{1,3}(?:[ .-]\d{2,4}){2,4}(?!\w)"
    )),
    ("ID", re.compile(r"(?<![\d.,])\d{9,}(?![\d.,]\d)")),
]


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


@dataclass
class _Match:
    start: int
    end: int
    kind: str
    redact: bool


def _matches(text: str) -> list[_Match]:
    """Non-overlapping PII candidates, earlier patterns first."""
    taken: list[_Match] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < t.end and t.start < m.end() for t in taken):
                continue
            label, redact = kind, True
            if kind == "CARD" and not luhn_valid(digits := re.sub(r"\D", "", m.group())):
                # An unbroken long number is an id even when it is no card; a grouped one only looks like PII.
                label, redact = ("ID", True) if digits == m.group() else (kind, False)
            taken.append(_Match(m.start(), m.end(), label, redact))
    return sorted(taken, key=lambda t: t.start)


def pii_density(text: str) -> float:
    """The share of characters inside PII-like matches (a document is SENSITIVE at >= 0.015)."""
    if not text:
        return 0.0
    return sum(m.end - m.start for m in _matches(text)) / len(text)


@dataclass
class Sanitized:
    text: str
    redactions: int


def sensitivity(redactions: int, density: float) -> str:
    """HIGH if anything was redacted, MEDIUM if PII-like density > 0.005 without, else LOW."""
    if redactions:
        return HIGH
    return MEDIUM if density > MEDIUM_DENSITY else LOW


def sanitize(text: str) -> Sanitized:
    out, last, redactions = [], 0, 0
    for m in _matches(text):
        if m.redact:
            out += [text[last:m.start], f"[REDACTED_{m.kind}]"]
            last = m.end
            redactions += 1
    out.append(text[last:])
    return Sanitized("".join(out), redactions)


def is_redacted(text: str) -> bool:
    return "[REDACTED_" in text
