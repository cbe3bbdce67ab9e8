"""Packing whole units (sentences, paragraphs) into chunks of min..max characters, with the
previous chunk's last `overlap` units repeated at the start of the next for continuity.

Filling each chunk greedily up to max leaves a short last chunk (often a single sentence)
whenever the text does not divide evenly. Here the split is chosen over the whole
run instead: as few chunks as possible, every chunk within bounds where the unit sizes allow
it, and the slack spread evenly. A unit longer than max stands alone; units are never cut."""
from __future__ import annotations

from itertools import accumulate

from ragmesh.text import split_sentences

_UNDER_MIN_WEIGHT = 10.0  # a chunk below min costs up to ten extra chunks
_SLACK_WEIGHT = 0.1  # among splits with equally many chunks, prefer even ones


def group(lengths: list[int], min_chars: int, max_chars: int, overlap: int = 0, sep: int = 1) -> list[tuple[int, int]]:
    """Ranges [start, end) of units forming each chunk, in order.

    Consecutive chunks share `overlap` units, fewer when the shared units and the next unit
    would not fit in max_chars. `sep` is the length of the separator between joined units."""
    n = len(lengths)
    if n == 0:
        return []
    prefix = [0, *accumulate(lengths)]

    def span(a: int, b: int) -> int:
        return prefix[b] - prefix[a] + sep * (b - a - 1)

    def start_after(end: int) -> int:
        """Where the chunk after one ending at `end` starts: `overlap` units back, if they fit."""
        if end == 0 or end >= n:
            return end
        for k in range(min(overlap, end), 0, -1):
            if span(end - k, end + 1) <= max_chars:
                return end - k
        return end

    def cost(length: int) -> float:
        under = max(0, min_chars - length) / min_chars
        slack = max(0, max_chars - length) / max_chars
        return 1.0 + _UNDER_MIN_WEIGHT * under * under + _SLACK_WEIGHT * slack * slack

    starts = [start_after(e) for e in range(n + 1)]
    best = [float("inf")] * (n + 1)
    back = [0] * (n + 1)
    best[0] = 0.0
    for b in range(n):  # b: where the previous chunk's new units ended
        if best[b] == float("inf"):
            continue
        s = starts[b]
        for e in range(b + 1, n + 1):
            length = span(s, e)
            forced = e == b + 1  # one new unit always goes, however long
            if length > max_chars and not forced:
                break
            if not forced and e < n and starts[e] < b:
                continue  # the next chunk's overlap would reach back past this chunk's new units
            total = best[b] + cost(length)
            if total < best[e]:
                best[e], back[e] = total, b
    ends = [n]
    while ends[-1] > 0:
        ends.append(back[ends[-1]])
    ends.reverse()
    return [(starts[b], e) for b, e in zip(ends, ends[1:])]


def chunk_text(text: str, min_chars: int = 400, max_chars: int = 800, overlap: int = 1) -> list[str]:
    """Whole sentences packed into chunks (see `group`)."""
    sentences = split_sentences(text)
    ranges = group([len(s) for s in sentences], min_chars, max_chars, overlap)
    return [" ".join(sentences[a:b]) for a, b in ranges]
