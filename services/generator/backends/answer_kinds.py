"""Whether a sentence carries the kind of thing a question asks for (ragmesh.question_kinds: a person,
a figure, a date, a reason), so an answer quoted from the context leads with the sentences that hold it.
Rules, no model: the offline backend must do it too. A block's metadata says some of these
things better than its text (the manager of a meeting note's fund, a factsheet's report date),
so they are offered as sentences of their own. Some questions name a measure in words a passage that states it
need not share ("How much money does Northwind manage?" is answered by "AUM is $6.0bn"): MEASURES says which
words state each, so a figure of something else ("the managed-account sleeve has grown to $1.1bn") is not taken
for it."""
from __future__ import annotations

import re

from dataclasses import dataclass

from ragmesh.question_kinds import DATE, FIGURE, PERSON, REASON
from ragmesh.text import STOPWORDS
from ragmesh.types import ContextBlock

_MONTH = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|" \
         r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
COUNT = "count"  # what "how many" asks for besides a figure: a bare number counts
_COUNTED = re.compile(r"\bhow\s+many\b", re.I)
_CARRIES = {
    FIGURE: re.compile(r"[$€£]\s?\d|(?<![\w.])[-+\u2212]?\d+(?:[.,]\d+)*\s?(?:%|bp\b|bps\b|bn\b|billion|million|"
                       r"m\b|x\b|cents?\b|percent|per\s+cent)"),
    DATE: re.compile(rf"\b{_MONTH}\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b|\bQ[1-4]\b|\b(?:19|20)\d{{2}}\b"),
    # A count ("How many beehives?"): a number with no unit, not a year ("37 beehives", "61 positions").
    COUNT: re.compile(r"(?<![\w.$€£-])\d{1,3}(?:,\d{3})*(?![\d.,%])"),
    # A cause told: "because", "driven by", "after policymakers announced ...".
    REASON: re.compile(r"\b(?:because|due\s+to|driven\s+by|drove|thanks\s+to|as\s+a\s+result|following|announced|"
                       r"led\s+to|caused|on\s+the\s+back\s+of|amid|since\s+(?:the|it|we))\b", re.I),
}
# Runs of capitalised words: a person's name is two or three of them (after any stopword such as a
# sentence's first "The"), that are not all words of the block's fund.
_CAPITALISED = re.compile(r"\b[A-Z][a-z\u00e0-\u00ff]+(?:-[A-Z][a-z]+)?(?:\s[A-Z][a-z\u00e0-\u00ff]+(?:-[A-Z][a-z]+)?)+\b")
# When a meeting or a report was: the question the block's date (metadata) answers.
_DATED = re.compile(r"\b(?:meet\w*|met|factsheets?|reports?|reported|calls?|reviews?|notes?)\b", re.I)
# Who runs the fund: the question the block's manager (metadata) answers.
_MANAGING = re.compile(r"\b(?:manag\w*|runs?|running|run by|pms?|portfolio manager|in charge|leads?|led by)\b", re.I)


def counted(question: str) -> set[str]:
    """{COUNT} when the question asks how many: a sentence giving a bare number then carries what was asked."""
    return {COUNT} if _COUNTED.search(question) else set()


def carries(sentence: str, kinds: set[str], block: ContextBlock) -> bool:
    """Whether the sentence holds something of a kind asked for."""
    for kind in kinds:
        if kind == PERSON:
            if _names(sentence, block):
                return True
        elif _CARRIES[kind].search(sentence):
            return True
    return False


def _names(sentence: str, block: ContextBlock) -> bool:
    """A person named in the sentence: the block's manager, or a capitalised name that is not its fund's."""
    meta = block.chunk.metadata if block.chunk else {}
    manager = meta.get("manager", "")
    if manager and (manager in sentence or manager.split()[-1] in sentence.split()):
        return True
    fund_words = set(meta.get("fund_name", "").split())
    for run in _CAPITALISED.findall(sentence):
        words = run.split()
        while words and words[0].lower() in STOPWORDS:
            words.pop(0)
        if 2 <= len(words) <= 3 and not set(words) <= fund_words:
            return True
    return False


def metadata_sentences(question: str, kinds: set[str], block: ContextBlock) -> list[str]:
    """What the block's metadata says of a kind asked for, as sentences to quote beside its text: its
    fund's manager when the question asks who runs it, its date when it asks when the meeting or the
    report was (not when something the notes tell of happened)."""
    meta = block.chunk.metadata if block.chunk else {}
    fund = meta.get("fund_name", "")
    out = []
    if PERSON in kinds and fund and meta.get("manager") and _MANAGING.search(question):
        out.append(f"{fund} is managed by {meta['manager']}.")
    if DATE in kinds and fund and block.chunk and block.chunk.date and _DATED.search(question):
        what = "factsheet reports as of" if block.chunk.collection == "factsheets" else "meeting notes are dated"
        out.append(f"The {fund} {what} {block.chunk.date}.")
    return out


@dataclass(frozen=True)
class Measure:
    """A quantity a question may ask for in other words than those that state it."""

    name: str  # what the answer says was not found, when no passage states it
    asked: re.Pattern[str]  # the question asks for it
    stated: re.Pattern[str]  # a sentence states it
    words: tuple[str, ...]  # searched for beside the question's own words


MEASURES = (  # first match wins: a kind of fee before any fee, a fee before the return ("performance fee")
    Measure("the management fee", re.compile(r"\bmanagement\s+fees?\b", re.I),
            re.compile(r"\bmanagement\s+fees?\b", re.I), ("fee",)),
    Measure("the performance fee", re.compile(r"\b(?:performance|incentive)\s+fees?\b", re.I),
            re.compile(r"\b(?:performance|incentive)\s+fees?\b", re.I), ("fee",)),
    Measure("the fees", re.compile(r"\bfees?\b", re.I), re.compile(r"\bfees?\b", re.I), ("fee",)),
    Measure("the minimum investment", re.compile(r"\bminimum\s+(?:investment|subscription|ticket)s?\b", re.I),
            re.compile(r"\bminimum\s+(?:investment|subscription|ticket)s?\b", re.I), ("minimum",)),
    Measure("the fund's assets under management",
            re.compile(r"\baum\b|assets\s+under\s+management|\bhow\s+much\s+(?:money|capital)\b.*\b(?:manag|run|oversee)"
                       r"|\bfund\s+size\b|\bsize\s+of\s+the\s+fund\b", re.I),
            re.compile(r"\bAUM\b|assets\s+under\s+management|\bassets\b", re.I), ("aum", "assets")),
    Measure("the return", re.compile(r"\b(?:(?:full|calendar)[- ]year\s+|annual\s+|monthly\s+)?(?:returns?|performance)\b"
                                     r"|\b(?:lose|lost|losing|make|made|making)\s+money\b", re.I),
            re.compile(r"\breturn(?:s|ed)?\b|\bperformance\b|\b(?:gain(?:ed)?|lost|fell|rose|up|down|closed|added)\b"
                       r"|\b(?:worst|best)\s+month\b", re.I), ()),
)


def measure_asked(question: str) -> Measure | None:
    """The measure the question asks for, when it names one of MEASURES."""
    return next((m for m in MEASURES if m.asked.search(question)), None)
