"""Retrieved hits become numbered context blocks, and blocks the prompt an LLM reads.

Blocks follow the fund-research context layout: meeting notes with date, fund,
manager and chunk type; factsheets grouped by factsheet id, listing the sections that
matched with their scores, with the complete factsheet JSON once (the parent the record
parser stores for every factsheet's sections, shown whole). The model's context budget
(ragmesh.context_budget: the offline answerer's 4,000 characters, a large-window model's much more) bounds
the context, a child's parent text comes once, and sentences that repeat an earlier block's are dropped
(sentence dedupe). Retrieved text, and the earlier turns
of the conversation, are fenced in <data> ... </data> and the prompts say it is data, not instructions."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ragmesh.context_budget import ContextBudget
from ragmesh.prompts import PROMPTS, system_instruction
from ragmesh.text import split_sentences, tokenize
from ragmesh.types import Chunk, Citation, ContextBlock, Hit, Turn
from services.gateway.context_sections import RenderedBlock, sectioned
from services.gateway.places import place_of

PARENT_MAX_CHARS = 1_600
RECORDS_SHARE = 0.5  # of a budget that reserves complete records, the most they may hold back from the notes
RECORD_LINES_CHARS = 60  # per line a factsheet's block shows besides its record (label, each matching section)
DEDUPE_JACCARD = 0.8


def label(chunk: Chunk) -> str:
    """What the model and the sources list call the chunk: a book's chunk names its chapter, section and
    paragraph ("guide.md › Chapter 2: Storms › 2.1 The fog signal · ¶3")."""
    fund = chunk.metadata.get("fund_name", "")
    if chunk.collection == "factsheets":
        return f"{fund} Factsheet ({chunk.date})".strip()
    kind = {"meeting_notes": "Meeting note", "conversations": "Earlier conversation",
            "documents": chunk.metadata.get("filename") or "Document"}.get(chunk.collection, chunk.collection)
    if place := place_of(chunk.metadata):
        kind = f"{kind} › {place}"
    parts = [p for p in (fund, chunk.date) if p]
    return f"{kind}, {', '.join(parts)}" if parts else kind


def persistent_ref(chunk_id: str) -> str:
    """`#chk_` + 8 hex digits of md5(chunk id): stable across reloads of the conversation (persistent citations)."""
    return "#chk_" + hashlib.md5(chunk_id.encode()).hexdigest()[:8]


def citation_for(block: ContextBlock) -> Citation:
    chunk = block.chunk
    assert chunk is not None
    place = place_of(chunk.metadata)
    return Citation(
        index=block.index, chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, collection=chunk.collection,
        title=block.label, date=chunk.date, metadata=dict(chunk.metadata), snippet=chunk.text[:240],
        ref=persistent_ref(chunk.chunk_id), chapter=place.chapter, section=place.section, paragraph=place.paragraph,
    )


def _truncate(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a sentence (or word) boundary."""
    if len(text) <= limit:
        return text
    kept = ""
    for sentence in split_sentences(text):
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept or text[:limit].rsplit(" ", 1)[0]


@functools.lru_cache(maxsize=256)
def _is_record(parent: str) -> bool:
    """Whether a parent is a complete JSON record (a factsheet's), which is shown whole, never cut mid-JSON."""
    if not parent.startswith("{"):
        return False
    try:
        return isinstance(json.loads(parent), dict)
    except ValueError:
        return False


@dataclass
class _Draft:
    """One block under construction: a factsheet's matching sections, or a document's parts."""

    hits: list[Hit]

    @property
    def best(self) -> Hit:
        """The hit the block ranks, is labelled and is cited by."""
        return max(self.hits, key=lambda h: h.score)


def _joins(draft: _Draft, hit: Hit) -> bool:
    """Whether the hit goes in the draft's block: a section of the same factsheet, or a part of the same
    document written next to one of the draft's (a meeting note's consecutive parts)."""
    chunk, first = hit.chunk, draft.hits[0].chunk
    if chunk.collection != first.collection:
        return False
    if chunk.collection == "factsheets" and chunk.metadata.get("factsheet_id"):
        return chunk.metadata["factsheet_id"] == first.metadata.get("factsheet_id")
    return any(h.chunk.doc_id == chunk.doc_id and abs(h.chunk.chunk_index - chunk.chunk_index) == 1 for h in draft.hits)


def _group(hits: list[Hit]) -> list[_Draft]:
    """The sections of one factsheet, and the consecutive parts of one document, go together at the rank of
    their best; a document's parts in the order they are written, so they read as they were written."""
    drafts: list[_Draft] = []
    for hit in hits:
        if draft := next((d for d in drafts if _joins(d, hit)), None):
            draft.hits.append(hit)
        else:
            drafts.append(_Draft([hit]))
    for draft in drafts:
        if draft.hits[0].chunk.collection != "factsheets":
            draft.hits.sort(key=lambda h: h.chunk.chunk_index)
    return drafts


def with_neighbours(hits: list[Hit]) -> list[Hit]:
    """The hits best first, each followed by the parts written next to it (the same document, the chunk
    before or after) that ranked lower: a note's point often spans two parts ("Mexico went the other way."
    ends one, the cut that answers opens the next), and a part the question's words ranked sixth is worth
    more beside its neighbour than the fifth passage of its own. The route's k then cuts this order."""
    at = {(h.chunk.collection, h.chunk.doc_id, h.chunk.chunk_index): i for i, h in enumerate(hits)}
    placed: set[int] = set()
    ordered: list[Hit] = []
    for i, hit in enumerate(hits):
        if i in placed:
            continue
        chunk = hit.chunk
        near = [at.get((chunk.collection, chunk.doc_id, chunk.chunk_index + step)) for step in (-1, 1)]
        for j in [i, *sorted(j for j in near if j is not None and j > i and j not in placed)]:
            placed.add(j)
            ordered.append(hits[j])
    return ordered


@dataclass(frozen=True)
class _Rendered:
    lean: str  # the block as the prompt shows it: what its hits say
    full: str  # a factsheet's: its matching sections and its complete record (`lean` for a block that has none)
    content: str  # its content alone, for backends that quote it


def _render(draft: _Draft, index: int, dedupe: list[frozenset[str]], seen_parents: set[str]) -> _Rendered:
    first = draft.best.chunk
    meta = first.metadata
    lines = [f"[{index}] {label(first)}"]
    if first.collection == "meeting_notes":
        kind = meta.get("chunk_type") or meta.get("section_type") or meta.get("doc_type") or "note"  # the notes' chunk type
        lines += [f"Date: {first.date}", f"Fund: {meta.get('fund_name', '')}", f"Manager: {meta.get('manager', '')}",
                  f"Chunk Type: {kind}"]
    elif first.collection == "factsheets":
        if meta.get("filename"):
            lines[0] += f" - {meta['filename']}"
        lines.append(f"Matching Sections ({len(draft.hits)}):")
        lines += [f"  - {h.chunk.metadata.get('section_type', 'section')} (relevance: {h.score:.4f})" for h in draft.hits]
    contents: list[str] = []
    complete = ""
    for hit in draft.hits:
        parent = hit.parent_text
        if parent and hit.chunk.parent_chunk_id not in seen_parents:
            seen_parents.add(hit.chunk.parent_chunk_id)
            if first.collection == "factsheets" and _is_record(parent):
                complete = parent
            else:
                lines.append(f"Context: {_truncate(parent, PARENT_MAX_CHARS)}")
        kept = []
        for sentence, words in _sentences(hit.chunk.text):
            if words and _said(words, dedupe):
                continue  # said already by an earlier block
            dedupe.append(words)
            kept.append(sentence)
        if kept:
            contents.append(" ".join(kept))
            lines.append(f"Content: {contents[-1]}")
    lean = "\n".join([*lines, f"Relevance Score: {draft.best.score:.4f}"])
    if not complete:
        return _Rendered(lean, lean, "\n\n".join(contents))
    # The record holds what its sections say: shown whole, it stands for their text.
    full = [line for line in lines if not line.startswith("Content: ")] + [f"Complete Factsheet Data: {complete}"]
    return _Rendered(lean, "\n".join(full), "\n\n".join(contents))


@functools.lru_cache(maxsize=4096)
def _sentences(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """A chunk's sentences with their words. Kept for the chunks seen last: a question that reuses its
    scope builds its context from the same chunks as the one before."""
    return tuple((sentence, frozenset(tokenize(sentence))) for sentence in split_sentences(text))


def _said(words: frozenset[str], earlier: list[frozenset[str]]) -> bool:
    """Whether an earlier sentence's words have Jaccard >= DEDUPE_JACCARD with these. Sizes too far
    apart cannot reach it (|a & b| <= the smaller, |a | b| >= the larger): skipped."""
    m = len(words)
    for other in earlier:
        n = len(other)
        if min(m, n) / max(m, n) >= DEDUPE_JACCARD:
            shared = len(words & other)
            if shared / (m + n - shared) >= DEDUPE_JACCARD:
                return True
    return False


@dataclass
class Context:
    blocks: list[ContextBlock]
    text: str
    hits_used: list[Hit]
    budget: ContextBudget | None = None  # what it was built within (None: not known, as when read back from Redis)


def _record(draft: _Draft) -> str:
    """The complete record (a factsheet's whole JSON) a factsheet's block shows, or ""."""
    if draft.hits[0].chunk.collection != "factsheets":
        return ""
    return next((h.parent_text for h in draft.hits if h.parent_text and _is_record(h.parent_text)), "")


def _reserved(drafts: list[_Draft], chars: int) -> dict[int, int]:
    """id(draft) -> the characters held for its block with its complete record: the factsheets' blocks best first,
    while all held stay within RECORDS_SHARE of `chars`, so the notes ranked above them cannot take their room."""
    held: dict[int, int] = {}
    room = int(chars * RECORDS_SHARE)
    for draft in drafts:
        if record := _record(draft):
            size = len(record) + RECORD_LINES_CHARS * (len(draft.hits) + 2)
            if size > room:
                break
            held[id(draft)], room = size, room - size
    return held


def build(hits: list[Hit], budget: ContextBudget) -> Context:
    """Numbered blocks within the budget's characters, best hits first. What the hits say comes first: a block
    that does not fit is left out (what it said unsaid) and smaller ones after it are tried. A budget that reserves
    complete records holds room for the best factsheets' whole records before any block is placed (the notes
    ranked above them take the rest), and each of those factsheets shows its record in place of its sections'
    text; then each other factsheet's record takes the place of its sections' text, best first, while the budget
    has room for it."""
    limit = budget.chars
    drafts = _group(hits)
    held = _reserved(drafts, limit) if budget.complete_records else {}
    blocks: list[ContextBlock] = []
    rendered: list[RenderedBlock] = []
    records: list[str] = []  # each placed block with its complete record
    used: list[Hit] = []
    dedupe: list[frozenset[str]] = []
    seen_parents: set[str] = set()
    for draft in drafts:
        index = len(blocks) + 1
        said, parents = len(dedupe), set(seen_parents)
        out = _render(draft, index, dedupe, seen_parents)
        whole = bool(held.pop(id(draft), 0))  # its room is its own now (or given back)
        if not out.content:
            continue  # every sentence repeated an earlier block
        chunk = draft.best.chunk
        content = out.content
        room = limit - sum(held.values())  # the section headers count too
        fitting = [text for text in ([out.full] if whole else []) + [out.lean]
                   if len(sectioned([*rendered, RenderedBlock(chunk.collection, text, len(draft.hits))])) <= room]
        block = RenderedBlock(chunk.collection, fitting[0] if fitting else out.lean, len(draft.hits))
        if not fitting:
            if blocks:
                del dedupe[said:]
                seen_parents = parents
                continue
            room = limit - len(sectioned([dataclasses.replace(block, text="")]))
            block = dataclasses.replace(block, text=_truncate(out.lean, room))  # the best block always goes in
            content = _truncate(content, room)
        rendered.append(block)
        records.append(out.full if block.text == out.lean else block.text)
        blocks.append(ContextBlock(index=index, text=content, chunk=chunk, label=label(chunk)))
        used += draft.hits
    for i, full in enumerate(records):
        if full != rendered[i].text:
            trial = [*rendered[:i], dataclasses.replace(rendered[i], text=full), *rendered[i + 1:]]
            if len(sectioned(trial)) <= limit:
                rendered = trial
    return Context(blocks, sectioned(rendered), used, budget)


_FENCE_TAG = re.compile(r"<\s*/?\s*data\b")
_LESS_THAN = "<\ufe64\uff1c"  # every character NFKC makes a "<" of
# Lower-case letters of other scripts drawn like those of "data" (NFKC keeps them apart: Cyrillic a,
# komi de and te, Greek alpha and tau, Latin alpha), and slashes drawn like "/".
_LOOKALIKES = str.maketrans("\u0430\u0501\u0442\u03b1\u03c4\u0251\u2044\u2215\u29f8", "adtata///")


def _folded(text: str) -> tuple[str, Sequence[int]]:
    """The text as the fence is matched on (each character NFKC-normalised, look-alikes mapped to the
    letters they imitate, lower case, invisible format characters and combining marks dropped), and
    for each of its characters the index of the character of `text` it came from."""
    if text.isascii():
        return text.lower(), range(len(text))
    folded, origin = [], []
    for i, char in enumerate(text):
        for c in unicodedata.normalize("NFKC", char).lower().translate(_LOOKALIKES):
            if unicodedata.category(c) not in ("Cf", "Mn"):
                folded.append(c)
                origin.append(i)
    return "".join(folded), origin


def fence_safe(text: str) -> str:
    """Text with every <data> / </data> tag escaped, so a document (or an earlier turn) cannot close
    the data fence and speak as instructions. Tags are found as a reader would see them: any case or
    spacing, fullwidth forms, zero-width characters inside, Cyrillic or Greek look-alike letters; the
    tag's "<" becomes "&lt;", the rest of the text is left as it was."""
    if not any(less in text for less in _LESS_THAN):
        return text
    folded, origin = _folded(text)
    opens = {origin[m.start()] for m in _FENCE_TAG.finditer(folded)}
    return "".join("&lt;" if i in opens else c for i, c in enumerate(text)) if opens else text


def _fenced(text: str) -> str:
    """Text the model must read as data, never as instructions, between the tags the prompts name."""
    return f"<data>\n{fence_safe(text)}\n</data>\n"


def build_prompt(prompt_name: str, question: str, history: list[Turn], summary: str, context: Context,
                 data_sources: list[str], persona: str = "") -> tuple[str, str]:
    """(system instruction with the persona in place, user prompt) for the route's prompt."""
    prompt = PROMPTS[prompt_name]
    parts: list[str] = []
    if summary:  # made from earlier turns: data like them
        parts.append(f"Conversation summary:\n{_fenced(summary)}---\n")
    if history:  # what users asked (and answers that quote retrieved text): data, never instructions
        parts.append("Previous conversation:\n")
        parts.append(_fenced("".join(f"User: {t.question}\nAssistant: {t.answer}\n" for t in history)))
        parts.append("---\n")
    parts.append(f"Question: {question}\n")
    parts.append(prompt.instructions + "\n")
    parts.append(f"Available data sources: {', '.join(data_sources)}\n")
    if context.blocks:
        parts.append("Internal Data:\n" + _fenced("Available Data Sources:\n\n" + context.text))
    parts.append("Now provide a comprehensive answer.")
    return system_instruction(prompt, persona), "\n".join(parts)

