"""003 step 1.3: a sentence an earlier block already said (Jaccard of their words >= 0.8) is dropped;
a block whose every sentence repeats goes. The check skips pairs whose sizes alone rule it out, which
must never change a verdict."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ragmesh.context_budget import ContextBudget
from ragmesh.types import Chunk, Hit
from services.gateway.context import DEDUPE_JACCARD, _said, build


def _note(n: int, text: str, score: float) -> Hit:
    return Hit(Chunk(f"meeting_notes/{n}", f"doc-{n}", "meeting_notes", text, date="2024-03-14"), score)


WORDS = [f"w{i}" for i in range(10)]


def _sentence(words: list[str]) -> str:
    return " ".join(words).capitalize() + "."  # a capital after the full stop: a new sentence


TEN = _sentence(WORDS)


def test_repeated_sentences_are_dropped_from_later_blocks_and_an_empty_block_goes() -> None:
    near = _sentence(WORDS[:8] + ["other", "words"])  # 8 shared of 12: 0.67, kept
    same_but_one = _sentence(WORDS[:9])  # 9 of 10: 0.9, dropped
    ctx = build([_note(1, f"{TEN} Fresh start here.", 0.9), _note(2, f"{same_but_one} {near}", 0.8),
                 _note(3, TEN, 0.7), _note(4, "Entirely new remark.", 0.6)], ContextBudget(12_000))
    assert [b.text for b in ctx.blocks] == [f"{TEN} Fresh start here.", near, "Entirely new remark."]
    assert [b.index for b in ctx.blocks] == [1, 2, 3]  # the repeating block took no number


def test_a_context_built_twice_from_the_same_hits_is_the_same() -> None:
    hits = [_note(1, f"{TEN} Fresh start here.", 0.9), _note(2, TEN, 0.8), _note(3, "Another one.", 0.7)]
    first, second = build(hits, ContextBudget(12_000)), build(hits, ContextBudget(12_000))  # the second from the remembered sentences
    assert first == second and len(first.blocks) == 2


WORD_SETS = st.frozensets(st.integers(0, 12), min_size=1)


@given(WORD_SETS, st.lists(WORD_SETS, max_size=6))
def test_the_shortcuts_never_change_the_jaccard_verdict(words: frozenset[int], earlier: list[frozenset[int]]) -> None:
    expected = any(len(words & e) / len(words | e) >= DEDUPE_JACCARD for e in earlier)
    assert _said(_strings(words), [_strings(e) for e in earlier]) == expected


def _strings(numbers: frozenset[int]) -> frozenset[str]:
    return frozenset(map(str, numbers))
