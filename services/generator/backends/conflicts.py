"""Finds blocks that disagree: different percentages or dates for the same thing
(conflict detection, done with rules so the offline backend can do it too).

A claim is a figure with what it is about: the fund (chunk metadata), the word the
figure follows in its clause ("exposure", "returned", "left"), and for percentages the
period (the months or quarters the sentence names, else the document's date, so figures
from different times never clash). Two blocks conflict when the same claim carries
disjoint figures. Dates (written out: "14 June 2024") also need a person or company
named in both sentences. Rules miss some conflicts; they are tuned not to invent any.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from ragmesh.text import STOPWORDS
from ragmesh.types import ContextBlock

# Sentences and texts whose analysis the offline answerer keeps (a few MB at most): the same sources come back
# answer after answer.
TEXT_CACHE = 8192

_MONTH = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|" \
         r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
_PERCENT = re.compile(r"(?<![\w.])([-+\u2212]?\d+(?:\.\d+)?)\s?%")
# Event dates are written out; ISO dates in text are stamps ("performance as of 2024-08-31").
_DATE = re.compile(rf"\b(\d{{1,2}} {_MONTH} \d{{4}}|{_MONTH} \d{{1,2}}, \d{{4}})\b")
_ISO = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_SPAN = re.compile(rf"\b(?:{_MONTH}|Q[1-4]|H[12]|YTD|year-to-date)\b")  # what makes a sentence name its period
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")
_CLAUSE = re.compile(r"[;,:(]|\band\b|\bbut\b|\bwhile\b|\bwhereas\b")
_NAME = re.compile(r"\b[A-Z][a-zA-Z]+")
# Words between a thing and its figure that are not the thing.
_GLUE = STOPWORDS | {"up", "down", "around", "roughly", "approximately", "nearly", "almost", "just", "over",
                     "under", "only", "now", "still", "rose", "fell", "increased", "decreased", "cut", "raised",
                     "reduced", "grew", "dropped", "climbed", "moved", "went", "stood", "gave", "said", "per",
                     "cent", "percent", "was", "is", "be", "been", "being", "had", "last", "first"}


@dataclass(frozen=True)
class Claim:
    subject: str
    thing: str
    period: str
    kind: str  # percent | date


@dataclass
class Conflict:
    claim: Claim
    first: tuple[int, list[str]]  # block number, figures as written
    second: tuple[int, list[str]]

    def describe(self) -> str:
        (a, fa), (b, fb) = self.first, self.second
        what = f"{self.claim.thing} ({self.claim.period})" if self.claim.period else self.claim.thing
        if self.claim.subject:
            what = f"{self.claim.subject}, {what}"
        return f"{what}: [{a}] says {', '.join(fa)}, but [{b}] says {', '.join(fb)}."


@dataclass
class _Found:
    block: ContextBlock
    figures: dict[str, str]  # normalised -> as written
    names: set[str]


def find_conflicts(sentences: list[tuple[ContextBlock, str]], limit: int = 3) -> list[Conflict]:
    """Conflicts between sentences of different blocks, in the order the sentences came."""
    seen: dict[Claim, list[_Found]] = {}
    conflicts: list[Conflict] = []
    reported: set[tuple[Claim, int, int]] = set()
    for block, sentence in sentences:
        for claim, found in _claims(block, sentence).items():
            for earlier in seen.get(claim, []):
                pair = (claim, earlier.block.index, block.index)
                if earlier.block.index == block.index or pair in reported:
                    continue
                if earlier.figures.keys() & found.figures.keys():
                    continue  # a figure in common: the same fact, or a change both sources describe
                if claim.kind == "date" and not earlier.names & found.names:
                    continue  # dates of events about different people or companies
                reported.add(pair)
                conflicts.append(Conflict(claim, (earlier.block.index, list(earlier.figures.values())),
                                          (block.index, list(found.figures.values()))))
                if len(conflicts) == limit:
                    return conflicts
            seen.setdefault(claim, []).append(found)
    return conflicts


def _claims(block: ContextBlock, sentence: str) -> dict[Claim, _Found]:
    subject = block.chunk.metadata.get("fund_name", "") if block.chunk else ""
    date = block.chunk.date if block.chunk else ""
    return {claim: _Found(block, dict(figures), set(names))
            for claim, figures, names in _sentence_claims(sentence, subject, date)}


@lru_cache(maxsize=TEXT_CACHE)
def _sentence_claims(sentence: str, subject: str, date: str) -> tuple[tuple[Claim, tuple, frozenset[str]], ...]:
    """The claims of a sentence of `subject`'s document of `date`: (claim, its figures as (normalised, as
    written), the names the sentence holds). Kept for the sentences last seen: the same sources' sentences
    come back in answer after answer."""
    text = _ISO.sub(" ", sentence)
    names = frozenset(_names(_DATE.sub(" ", text), subject))
    out: dict[Claim, dict[str, str]] = {}
    for match in _PERCENT.finditer(text):
        thing = _thing(text[: match.start()], skip_names=False)
        if thing:
            claim = Claim(subject, thing, _period_of(text, date), "percent")
            out.setdefault(claim, {})[_percent(match.group(1))] = match.group(0)
    for match in _DATE.finditer(text):
        thing = _thing(text[: match.start()], skip_names=True)
        if thing and names:  # an event of someone or something named, so another block can be about the same
            claim = Claim(subject, thing, "", "date")
            out.setdefault(claim, {})[_iso(match.group(1))] = match.group(0)
    return tuple((claim, tuple(figures.items()), names) for claim, figures in out.items())


def _period_of(text: str, date: str) -> str:
    """The months, quarters (and their years) the sentence names, else the document's date.

    A bare year is not enough ("bonds due 2029", "since 2020"): figures from documents of
    different dates are only compared when the sentences name the same month or quarter."""
    spans = [m.group(0) for m in _SPAN.finditer(_DATE.sub(" ", text))]
    if spans:
        return " ".join(dict.fromkeys([s[:3] if re.fullmatch(_MONTH, s) else s for s in spans] + _YEAR.findall(text)))
    return f"as of {date}" if date else ""


def _names(text: str, subject: str) -> set[str]:
    """Capitalised words other than common ones ("The", "In"), the fund's own and periods."""
    return {w for w in _NAME.findall(text)
            if w.lower() not in _GLUE and w not in subject.split() and not _SPAN.fullmatch(w)}


def _thing(before: str, skip_names: bool) -> str:
    """The last meaningful word of the figure's clause: what the figure is about. For dates,
    names are skipped: "filed for Chapter 11 on" is about filing, not about Chapter."""
    clause = _CLAUSE.split(_DATE.sub(" ", before))[-1]
    words = [w for w in re.findall(r"[A-Za-z]+", _SPAN.sub(" ", clause))
             if not (skip_names and w[0].isupper()) and len(w) > 1 and w.lower() not in _GLUE]
    if not words:
        return ""
    word = words[-1].lower()
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _percent(raw: str) -> str:
    return f"{float(raw.replace(chr(0x2212), '-')):g}"


def _iso(raw: str) -> str:
    for fmt in ("%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y"):
        try:
            return datetime.strptime(raw.replace("Sept ", "Sep "), fmt).date().isoformat()
        except ValueError:
            continue
    return raw
