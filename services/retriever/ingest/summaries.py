"""Per-document summaries made at ingest, for the gateway's summary route (global summary questions):
a concise summary of each section, then a global summary from those (or, for a document
without sections, from its text). Made through the generator service: the extractive backend
offline, an LLM where one is configured. A generator failure leaves the document with its
section titles only (the ToC fallback), it never fails the ingest."""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ragmesh.errors import RagmeshError
from ragmesh.text import sentence_spans, split_sentences, strip_citations, tokenize
from ragmesh.types import ContextBlock, SectionOutline
from services.retriever.ingest.chunker import group
from services.retriever.ingest.parsed import Section

log = logging.getLogger(__name__)

SECTION_INPUT_CHARS = 5_000  # input of one section summary
GLOBAL_INPUT_CHARS = 10_000  # input of the global summary (the section summaries joined)
SECTION_SUMMARY_CHARS = 700
GLOBAL_SUMMARY_CHARS = 2_500
MIN_SECTION_CHARS = 200  # shorter sections are read whole, not summarised
MAX_SECTIONS = 50  # a table of contents reads at most 30 chapters and 50 topics
SECTION_TEMPERATURE = 0.3  # section summaries
GLOBAL_TEMPERATURE = 0.4  # the document's summary from the section summaries

INSTRUCTION = (
    "You summarise documents faithfully and concisely. Use only the text you are given, keep "
    "names, figures and dates exact, and write plain prose without headings, lists or citations."
)


@dataclass
class SummaryPrompt:
    """One summary request, in the shapes both backend kinds read: blocks and a question for
    the extractive backend, instruction and prompt for LLMs."""

    question: str
    prompt: str
    blocks: list[ContextBlock]
    temperature: float
    instruction: str = INSTRUCTION


Generate = Callable[[SummaryPrompt], Awaitable[str]]


def table_of_contents(sections: list[Section]) -> list[SectionOutline]:
    """Chapter and section titles in reading order, with their first pages: what the summary route falls
    back on. A chapter whose heading opens its first section (no text of its own before it) is listed too."""
    out: list[SectionOutline] = []
    chapter = ""
    for s in sections:
        if s.chapter and s.chapter != chapter and s.title != s.chapter:
            out.append(SectionOutline(s.chapter, "", s.first_page))
        chapter = s.chapter
        if s.title:
            out.append(SectionOutline(s.title, "", s.first_page))
    return out


def _key_terms(text: str, n: int = 8) -> list[str]:
    return [t for t, _ in Counter(tokenize(text)).most_common(n)]


def _request(text: str, what: str, sentences: str, temperature: float) -> SummaryPrompt:
    return SummaryPrompt(
        # The extractive backend quotes sentences that share terms with the question.
        question=f"Summarize {what}: {', '.join(_key_terms(text))}",
        prompt=f"Summarize {what} in {sentences} sentences.\n\n<text>\n{text}\n</text>",
        blocks=[ContextBlock(1, text)],
        temperature=temperature,
    )


def _clean(answer: str, limit: int) -> str:
    """Plain prose: no [n] markers, no lead-in line, no bullets; cut at a sentence within limit."""
    lines = [line.strip().lstrip("-*• ").strip() for line in strip_citations(answer).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = lines[1:]
    kept, size = [], 0
    for sentence in split_sentences(" ".join(lines)):
        if kept and size + len(sentence) + 1 > limit:
            break
        kept.append(sentence)
        size += len(sentence) + 1
    return " ".join(kept)[: max(limit, 0)]


def _parts(section: Section) -> list[Section]:
    """A long untitled text as parts of at most SECTION_INPUT_CHARS, for its summary only."""
    spans = sentence_spans(section.text)
    parts = []
    for i, (a, b) in enumerate(group([b - a for a, b in spans], SECTION_INPUT_CHARS // 2, SECTION_INPUT_CHARS), 1):
        parts.append(section.slice(spans[a][0], spans[b - 1][1]))
        parts[-1].title = f"Part {i}"
    return parts


def _units(sections: list[Section]) -> list[Section]:
    """What gets a concise summary: the sections, or parts of a long text that has none."""
    if any(s.title for s in sections):
        return sections
    parts = _parts(sections[0]) if sections else []
    return parts if len(parts) > 1 else []


class Summarizer:
    def __init__(self, generate: Generate, concurrency: int = 4) -> None:
        self.generate = generate
        self.concurrency = concurrency

    async def outline(self, title: str, sections: list[Section]) -> tuple[str, list[SectionOutline]]:
        """(global summary, sections in order with their concise summaries)."""
        units = _units(sections)
        try:
            summaries = await self._sections(title, units)
            outline = [SectionOutline(u.title or "Opening", s, u.first_page) for u, s in zip(units, summaries)]
            written = [f"{o.title}: {o.summary}" for o in outline if o.summary]
            source = "\n\n".join(written) if len(written) > 1 else "\n\n".join(s.text for s in sections)
            what = f'the document "{title}"' if title else "this document"
            answer = await self.generate(_request(source[:GLOBAL_INPUT_CHARS], what, "5 to 8", GLOBAL_TEMPERATURE))
            return _clean(answer, GLOBAL_SUMMARY_CHARS), outline
        except RagmeshError as exc:
            log.warning("summaries not made: the generator failed", extra={"title": title, "error": str(exc)})
            return "", table_of_contents(sections)

    async def _sections(self, title: str, units: list[Section]) -> list[str]:
        """One concise summary per unit (the first MAX_SECTIONS); none for a single unit, whose
        summary would repeat the global one."""
        if len(units) < 2:
            return [""] * len(units)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(unit: Section) -> str:
            if len(unit.text) < MIN_SECTION_CHARS:
                return ""
            async with gate:
                what = f'the section "{unit.title}" of "{title}"' if title else f'the section "{unit.title}"'
                answer = await self.generate(_request(unit.text[:SECTION_INPUT_CHARS], what, "3 to 4", SECTION_TEMPERATURE))
            return _clean(answer, SECTION_SUMMARY_CHARS)

        tasks = [asyncio.create_task(one(u)) for u in units[:MAX_SECTIONS]]
        try:
            head = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:  # one failed: the generator is down, stop asking it
                task.cancel()
            raise
        return [*head, *([""] * len(units[MAX_SECTIONS:]))]
