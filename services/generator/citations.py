"""Citation checking while the answer streams: a `[n]` marker naming no supplied block
is removed before it reaches the client (citation validation, done on the fly).

Only text that may still turn out to be a marker is held back: an unfinished `[12`
or `[1, `, or a run of invented markers that may continue, at the end of a chunk, with
the spaces before it (so removing a marker leaves no stray space before the full stop).
A finished run that cites a supplied block goes out at once: whatever follows it, its
space stays, so an answer that cites early is not held until the next chunk.
Lists like `[1, 7]` keep their valid numbers, written `[1]`, the one marker form the
gateway resolves to citations. Bracketed numbers of four or more digits (`[2024]`)
are not markers and pass through.
"""
from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import aclosing

from ragmesh.types import GenEvent

log = logging.getLogger(__name__)

_SPACE = r"[ \t]{0,3}"
_LIST = r"\d{1,3}(?:, ?\d{1,3}){0,3}"  # [2] or [1, 2]: at most four numbers
_OPEN = r"\[(?:\d{1,3}(?:, ?\d{1,3}){0,3},? ?)?"  # a marker not closed yet: [ [1 [1, [1, 2
# A run of adjacent markers, with the spaces before it: "[7][2]" is judged as one, so
# removing [7] keeps the space before [2].
_MARKERS = re.compile(rf"{_SPACE}(?:\[{_LIST}\])+")
# The end of a chunk that could still grow into a run of markers: a few characters,
# more only while the model writes nothing but markers.
_UNFINISHED = re.compile(rf"{_SPACE}(?:\[{_LIST}\])*(?:{_OPEN})?\Z")
_NUMBER = re.compile(r"\d+")


class CitationFilter:
    def __init__(self, valid: set[int]) -> None:
        self.valid = valid
        self.removed: list[int] = []
        self._held = ""

    def feed(self, text: str) -> str:
        """The part of the stream so far that is safe to send, with invented markers removed."""
        text = self._held + text
        cut = _UNFINISHED.search(text).start()
        if _MARKERS.fullmatch(text, cut) and any(int(n) in self.valid for n in _NUMBER.findall(text, cut)):
            cut = len(text)  # a finished run citing a supplied block: nothing that follows changes it
        self._held = text[cut:]
        return _MARKERS.sub(self._check, text[:cut])

    def flush(self) -> str:
        """What is still held when the stream ends."""
        text, self._held = self._held, ""
        return _MARKERS.sub(self._check, text)

    def _check(self, run: re.Match[str]) -> str:
        numbers = [int(n) for n in _NUMBER.findall(run.group(0))]
        kept = [n for n in numbers if n in self.valid]
        self.removed += [n for n in numbers if n not in self.valid]
        if not kept:
            return ""
        space = run.group(0)[: len(run.group(0)) - len(run.group(0).lstrip(" \t"))]
        return space + "".join(f"[{n}]" for n in kept)


async def checked(events: AsyncIterator[GenEvent], valid: set[int]) -> AsyncIterator[GenEvent]:
    """`events` with every content event's markers checked against the `valid` block numbers.

    Held-back text goes out before any grounding, usage or done event, so the answer's
    text is complete when they arrive."""
    citations = CitationFilter(valid)
    try:
        async with aclosing(events):
            async for event in events:
                if event.kind == "content":
                    if text := citations.feed(event.text):
                        yield GenEvent("content", text=text)
                    continue
                if event.kind != "thinking" and (held := citations.flush()):
                    yield GenEvent("content", text=held)
                yield event
        if held := citations.flush():
            yield GenEvent("content", text=held)
    finally:
        if citations.removed:
            log.warning("removed citations naming no supplied block", extra={"markers": citations.removed})
