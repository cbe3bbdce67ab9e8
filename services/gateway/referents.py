"""What a question's words refer back to ("that", "her", "the above", or nothing but "why?") and what they
bring of their own (content words, names): the word-level readers the question's one reading calls
(services/gateway/reading.py), and the follow-up decision compares (services/gateway/followup.py)."""
from __future__ import annotations

import re

from ragmesh.text import STOPWORDS

REFERENT_PHRASES = (
    "tell me more", "more detail", "more details", "in simpler words", "in simpler terms", "simpler words",
    "in plain english", "in other words", "so far", "what do you mean", "can you clarify", "the above",
    "about the above", "what about the", "regarding the", "say that again", "rephrase", "as a list",
    "in bullet points",
    "that", "this", "it", "its", "those", "these", "them", "they", "their", "he", "she", "his", "her", "him",
)
# The fund-research transform words: a question made of them alone ("why?", "summarize") refers to the last answer.
TRANSFORM_WORDS = (
    "summarize", "summarise", "summary", "list", "compare", "contrast", "explain", "elaborate", "clarify",
    "why", "how", "rephrase", "shorten", "simplify", "expand",
)
# Words that ask for a rework of what was said, not for a fact: never "new".
_REWORK_WORDS = frozenset(
    """summarize summarise summary list compare contrast explain elaborate clarify rephrase shorten simplify
    expand remind recap tell me more most detail details simpler simple plain english words terms other mean
    meant again please briefly brief short shorter longer version bullet bullets points point key main way
    answer said say above previous earlier mentioned so just also exactly really actually quick quickly
    happen happened go went make made sense thing things one ones same give show break down could would all
    any both each some much many well very only sentence sentences paragraph line lines two three him hers
    himself herself themselves""".split()
) | STOPWORDS
_PHRASES = re.compile(r"\b(" + "|".join(re.escape(p) for p in REFERENT_PHRASES) + r")\b", re.I)
_TRANSFORM = re.compile(r"\b(" + "|".join(TRANSFORM_WORDS) + r")\b", re.I)
_THIS_PERIOD = re.compile(r"\bthis (year|quarter|month|week)\b", re.I)  # a period, not a referent
WORD = re.compile(r"[A-Za-z0-9]+")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z]+")  # capitalised, not opening a sentence
_SUFFIXES = ("ing", "ies", "ed", "es", "er", "ly", "s")


def stem(word: str) -> str:
    """A crude stem, so "returned" matches "returns" and "manager" matches "manages"."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def referent(question: str) -> str:
    """The words by which the question refers back to what was said, or "" when it does not."""
    text = _THIS_PERIOD.sub(" ", question)
    if m := _PHRASES.search(text):
        return m.group(1).lower()
    if (m := _TRANSFORM.search(text)) and not content_words(question):
        return m.group(1).lower()  # nothing but transform words: "why?", "summarize", "explain"
    return ""


def names(question: str) -> list[str]:
    """Capitalised words that do not open a sentence: names, as written."""
    return [m.group(0) for m in _NAME.finditer(question)]


def content_words(question: str) -> dict[str, str]:
    """The question's content words, stemmed, each with the word as written."""
    words = {stem(w.lower()): w for w in WORD.findall(question) if len(w) >= 2}
    return {s: w for s, w in words.items() if w.lower() not in _REWORK_WORDS and s not in _REWORK_WORDS}
