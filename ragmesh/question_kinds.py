"""What kind of thing a question asks for (a person, a figure, a date, a reason): "Who manages Altair?"
wants a name, "How much did Northwind lose?" a figure, "When did Meridian close?" a date, "Why did Kestrel
rally?" a cause. Rules, no model. The gateway reads it to tell whether an earlier search's hits were found
for the same kind of question; the offline generator, to lead with the sentences that hold it."""
from __future__ import annotations

import re

PERSON, FIGURE, DATE, REASON = "person", "figure", "date", "reason"

_ROLES = r"(?:executives?|managers?|analysts?|persons?|people|partners?|pms?|co-pms?|hires?|employees?|ceos?|cios?|heads?)"
_ASKS = {
    PERSON: re.compile(rf"\b(?:who|whom|whose)\b|\b(?:which|what)\s+(?:\w+\s+)?{_ROLES}\b|\bname\s+of\b", re.I),
    FIGURE: re.compile(
        r"\bhow\s+(?:much|many|large|big|high|low|far|deep|strong|weak)\b|\bat\s+what\s+(?:capacity|level|price|size)\b"
        r"|\bwhat\s+(?:\w+\s+)?(?:percentage|percent|share|size|returns?|premium|price|cost|level|weight|amount|aum"
        r"|figure|capacity|loss|gain|drawdown|exposure|yield|spread)\b"
        r"|\b(?:returns?|aum|size|premium|loss|capacity|drawdown|weight|cost|lose|lost|recover(?:ed)?|paid|gain(?:ed)?|earn(?:ed)?"
        r"|make|made)\b(?=.*\?\s*$)",
        re.I),
    DATE: re.compile(r"\bwhen\b|\b(?:what|which)\s+(?:date|day|month|year|quarter|week)\b|\bsince\s+when\b", re.I),
    REASON: re.compile(r"\bwhy\b|\bwhat\s+(?:caused|drove|led\s+to|explains)\b|\breasons?\s+(?:for|behind)\b", re.I),
}


def asked(question: str) -> set[str]:
    """The kinds of thing the question asks for (none for "what did X say about Y")."""
    return {kind for kind, pattern in _ASKS.items() if pattern.search(question)}


def asking_words(question: str) -> set[str]:
    """The question's words that ask for a kind ("how much", "gain", "who", "when"), lower case: they say what
    kind of answer is wanted, not what it is about ("M&A" in "What did Solstice gain from M&A?")."""
    return {w.lower() for pattern in _ASKS.values() for m in pattern.finditer(question) for w in m.group(0).split()}
