"""Text helpers several services share: sentence splitting and the keyword tokenizer."""
from __future__ import annotations

import hashlib

import re

# A sentence ends at . ! or ? (and a closing quote or bracket) followed by space and an
# upper-case letter, digit or quote, or at a blank line. Abbreviations like "e.g." followed
# by lower case do not end one.
_SENTENCE_END = re.compile(r"(?<=[.!?])([\"')\]]?)\s+(?=[A-Z0-9\"'(\[])|\n\s*\n")
_TOKEN = re.compile(r"[a-z0-9]+")
_CITATION = re.compile(r"\[(\d+)\]")
_CITATION_WITH_SPACE = re.compile(r"\s*\[\d+\]")

STOPWORDS = frozenset(
    """a an and are as at be by for from has have he her his i in is it its of on or our she
    that the their them they this to was were what when where which who will with you your we
    do does did how why can could would should about into than then there these those""".split()
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence in `text`, whitespace trimmed: chunkers map them to pages."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.start() + len(m.group(1) or "")))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for a, b in spans:
        piece = text[a:b]
        a, b = a + len(piece) - len(piece.lstrip()), b - (len(piece) - len(piece.rstrip()))
        if b > a:
            out.append((a, b))
    return out


def split_sentences(text: str) -> list[str]:
    return [" ".join(text[a:b].split()) for a, b in sentence_spans(text)]


def tokenize(text: str) -> list[str]:
    """Lower case, tokens of 2+ characters, English stopwords removed."""
    return [t for t in _TOKEN.findall(text.lower()) if len(t) >= 2 and t not in STOPWORDS]


def citation_numbers(text: str) -> list[int]:
    """The block numbers an answer cites as [n], in order of appearance (repeats kept)."""
    return [int(n) for n in _CITATION.findall(text)]


def strip_citations(text: str) -> str:
    """Text without its [n] markers, e.g. an old answer reused where its blocks no longer exist."""
    return _CITATION_WITH_SPACE.sub("", text)


def sha256(text: str) -> str:
    """Hex SHA-256 of a text's UTF-8: how a cached chunk's text is compared with the stored one."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# C0 and C1 controls and the bidirectional embeddings, overrides and isolates, which reorder what
# follows them on screen.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """Text a list shows on one line (a conversation's title): control and bidirectional-override
    characters dropped (a NUL cuts it short in C clients, an override disguises "exe.pdf" as
    "fdp.exe"), runs of whitespace made one space."""
    return " ".join(filter(None, (_UNSHOWABLE.sub("", word) for word in text.split())))
