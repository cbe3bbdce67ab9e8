"""Document type detection by heuristics (PII density, Q&A pairs, length and headings), no model call. Checked in the
order SENSITIVE -> FAQ -> BOOK -> USER: the first that fits picks the chunker."""
from __future__ import annotations

import re

FAQ, BOOK, SENSITIVE, USER = "FAQ", "BOOK", "SENSITIVE", "USER"
SENSITIVE_DENSITY = 0.015

# "Chapter 3", "Section 2.1 Scope", "Part IV", "Appendix A: Tables", "Introduction": a line of
# its own. Parsers of unstructured formats (plain text, PDF) also start sections at these.
HEADING_LINE = re.compile(
    r"^[ \t]*(?:(?:chapter|section|part|book|appendix)[ \t]+(?:\d+(?:\.\d+)*|[ivxlcdm]+|[a-z])\b[.:]?"
    r"(?:[ \t]+[^\n]{0,80})?|(?:prologue|epilogue|preface|foreword|introduction|conclusion|afterword))[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
# "Q: ...", "Q3. ...", "Question 2: ...", "4) How do I ...?", "## Can I ...?"
QUESTION_LINE = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\d+[.)][ \t]*)?"
    r"(?:(?:Q|Question)[ \t]*\d*[ \t]*[:.)][ \t]*\S[^\n]*|[A-Z][^\n]{0,200}\?)[ \t]*$",
    re.MULTILINE,
)
_FAQ_WORDS = re.compile(r"\bFAQs?\b|frequently asked", re.IGNORECASE)


def looks_like_faq(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    questions = len(QUESTION_LINE.findall(text))
    if questions < 2:
        return False
    return (questions >= 3 and questions >= 0.1 * len(lines)) or bool(_FAQ_WORDS.search(text[:2000]))


def looks_like_long_form(text: str) -> bool:
    length = len(text)
    breaks = len(re.findall(r"\n\s*\n", text))
    if length < 8000 or breaks < 5:
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    average_line = sum(len(line) for line in lines) / max(len(lines), 1)
    return (
        len(HEADING_LINE.findall(text)) >= 2
        or (breaks >= 20 and length > 20_000)
        or (average_line > 80 and length > 15_000)
    )


def detect_document_type(text: str, pii_density: float) -> str:
    if pii_density >= SENSITIVE_DENSITY:
        return SENSITIVE
    if looks_like_faq(text):
        return FAQ
    if looks_like_long_form(text):
        return BOOK
    return USER
