"""Detection, redaction and the four chunkers of 003 part 2: sizes, overlaps, parent/child
links, sections and pages on every chunk, and sentences never cut."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ragmesh.text import split_sentences
from services.retriever.ingest.chunker import group
from services.retriever.ingest.detect import BOOK, FAQ, SENSITIVE, USER, detect_document_type
from services.retriever.ingest.parsed import Parsed, Section
from services.retriever.ingest.sanitize import HIGH, LOW, MEDIUM, pii_density, sanitize, sensitivity
from services.retriever.ingest.strategies import Sizes, chunk_document

WORDS = "river mountain village harvest winter council bridge market lantern journey".split()


def sentences(count: int, seed: int = 1, lo: int = 6, hi: int = 25) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "." for _ in range(count)]


def paragraphs(n: int, per: int, seed: int) -> str:
    found = sentences(n * per, seed)
    return "\n\n".join(" ".join(found[i * per:(i + 1) * per]) for i in range(n))


def doc(*sections: Section, source: str = "") -> Parsed:
    return Parsed("d", list(sections), "text", source=source)


def text_doc(text: str) -> Parsed:
    return doc(Section("", text))


def overlap(prev: str, nxt: str) -> int:
    """How many sentences `nxt` starts with that end `prev`."""
    a, b = split_sentences(prev), split_sentences(nxt)
    return max((k for k in range(1, min(len(a), len(b)) + 1) if a[-k:] == b[:k]), default=0)


# -- redaction ---------------------------------------------------------------------------------
def test_each_kind_of_pii_becomes_its_label() -> None:
    text = ("Write to jane.doe@example.com or call (415) 555-0134 or +44 20 7946 0958. SSN 123-45-6789, "
            "card 4111 1111 1111 1111, Amex 3782 822463 10005, account 123456789012.")
    done = sanitize(text)
    assert done.text == (
        "Write to [REDACTED_EMAIL] or call [REDACTED_PHONE] or [REDACTED_PHONE]. SSN [REDACTED_SSN], "
        "card [REDACTED_CARD], Amex [REDACTED_CARD], account [REDACTED_ID].")
    assert done.redactions == 7


def test_figures_dates_and_non_luhn_card_shapes_stay() -> None:
    text = "On 2024-03-31 the fund returned 11.45% with AUM of $3.2bn and 1,234,567,890 shares; ref 4111 1111 1111 1112."
    assert sanitize(text).text == text
    assert pii_density(text) > 0  # the card-shaped reference looks like PII ...
    assert sensitivity(sanitize(text).redactions, pii_density(text)) == MEDIUM  # ... but nothing was redacted
    assert sensitivity(0, 0.0) == LOW and sensitivity(1, 0.0) == HIGH


# -- detection ---------------------------------------------------------------------------------
def test_types_are_checked_in_order_sensitive_faq_book_user() -> None:
    faq = "FAQ\n\n" + "\n\n".join(f"Q: How do I do thing {i}?\nA: Like this." for i in range(4))
    book = "\n\n".join(f"Chapter {c}\n\n" + paragraphs(6, 5, c) for c in range(1, 4))
    pii = faq + "\n" + " ".join(f"c{i}@example.com" for i in range(20))
    assert len(book) > 8000
    assert detect_document_type(faq, pii_density(faq)) == FAQ
    assert detect_document_type(book, pii_density(book)) == BOOK
    assert detect_document_type(pii, pii_density(pii)) == SENSITIVE  # before FAQ
    assert detect_document_type(paragraphs(3, 4, 1), 0.0) == USER
    assert detect_document_type("Short note?\nAnother line?\nAnd more.", 0.0) == USER  # 2 questions, no FAQ cue


# -- grouping ----------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 120), size=st.sampled_from(
    [(400, 800, 1), (225, 450, 0), (400, 700, 2)]))
def test_groups_are_within_bounds_overlap_as_asked_and_cover_everything(seed: int, count: int, size: tuple) -> None:
    lo, hi, k = size
    found = sentences(count, seed, 4, 30)
    lengths = [len(s) for s in found]
    ranges = group(lengths, lo, hi, k)
    texts = [" ".join(found[a:b]) for a, b in ranges]
    assert ranges[0][0] == 0 and ranges[-1][1] == count
    assert all(len(t) <= hi for t in texts)  # no sentence here is longer than max
    under = sum(len(t) < lo for t in texts)
    assert under <= sum(len(t) < lo for t in greedy(found, hi, k))  # never worse than 003's packing
    for (a, b), (c, d) in zip(ranges, ranges[1:]):
        assert b - k <= c <= b and d > b  # at most k units shared, progress made
        if len(" ".join(found[b - k: b + 1])) <= hi:
            assert c == b - k, "exactly k units shared whenever they fit beside the next sentence"


def greedy(found: list[str], hi: int, k: int) -> list[str]:
    """003's _group_sentences_to_size: fill to max, emit, keep the last k sentences."""
    chunks, current = [], []
    for s in found:
        if current and len(" ".join(current + [s])) > hi:
            chunks.append(" ".join(current))
            current = current[-k:] if k and len(" ".join(current[-k:] + [s])) <= hi else []
        current.append(s)
    return chunks + [" ".join(current)]


def test_a_short_tail_is_balanced_instead_of_left_alone() -> None:
    # Greedy packing (003) gives 7 units (799 chars) then 2 (199, under the minimum).
    assert group([100] * 9, 400, 800, 0) == [(0, 4), (4, 9)]
    assert group([100] * 9, 400, 800, 1) == [(0, 5), (4, 9)]


def test_a_unit_longer_than_max_stands_alone_and_overlap_gives_way() -> None:
    assert group([100, 2000, 100], 400, 800, 1) == [(0, 1), (1, 2), (2, 3)]


# -- chunkers ----------------------------------------------------------------------------------
def test_user_chunks_are_400_to_800_with_one_sentence_overlap() -> None:
    out = chunk_document(text_doc(paragraphs(6, 5, 3)))
    assert out.doc_type == USER and out.sensitivity == LOW
    texts = [p.text for p in out.pieces]
    assert len(texts) > 2 and all(400 <= len(t) <= 800 for t in texts)
    assert all(overlap(a, b) == 1 for a, b in zip(texts, texts[1:]))
    assert not any(p.is_parent or p.parent is not None for p in out.pieces)


def test_sensitive_chunks_are_225_to_450_without_overlap_and_redacted() -> None:
    people = " ".join(f"Customer {i} can be reached at c{i}@example.com or 415-555-01{i:02d} about the claim."
                      for i in range(20))
    out = chunk_document(text_doc(people))
    assert out.doc_type == SENSITIVE and out.sensitivity == HIGH and out.redactions == 40
    texts = [p.text for p in out.pieces]
    assert all(225 <= len(t) <= 450 for t in texts)
    assert all(overlap(a, b) == 0 for a, b in zip(texts, texts[1:]))
    assert "@" not in " ".join(texts) and all("[REDACTED_EMAIL]" in t for t in texts)


def test_faq_is_one_chunk_per_question_and_answer() -> None:
    pairs = [(f"Q: How do I reset device {i}?", " ".join(sentences(3, i))) for i in range(5)]
    text = "Frequently asked questions about devices.\n\n" + "\n\n".join(f"{q}\nA: {a}" for q, a in pairs)
    out = chunk_document(text_doc(text))
    assert out.doc_type == FAQ
    assert [p.text for p in out.pieces] == ["Frequently asked questions about devices."] + [
        f"{q}\nA: {a}" for q, a in pairs]


def test_a_faq_answer_over_8000_chars_continues_under_its_question() -> None:
    long_answer = " ".join(sentences(140, 9))
    assert len(long_answer) > 8000
    text = f"FAQ\n\nQ: What is in the manual?\nA: {long_answer}\n\nQ: Anything else?\nA: No."
    out = chunk_document(text_doc(text))
    manual = [p.text for p in out.pieces if p.text.startswith("Q: What is in the manual?")]
    assert len(manual) >= 2 and all(len(t) <= 8000 for t in manual)
    body = " ".join(t.partition("\n")[2] for t in manual)
    assert split_sentences(body) == split_sentences("A: " + long_answer)  # nothing lost, nothing cut


def test_book_parents_hold_children_that_overlap_by_two_sentences() -> None:
    text = "\n\n".join(f"Chapter {c}\n\n" + paragraphs(8, 5, c) for c in range(1, 5))
    out = chunk_document(text_doc(text))
    assert out.doc_type == BOOK
    parents = [i for i, p in enumerate(out.pieces) if p.is_parent]
    assert out.pieces[0].is_parent and len(parents) >= 3
    for i in parents[:-1]:
        assert 2000 <= len(out.pieces[i].text) <= 3500
    for i, piece in enumerate(out.pieces):
        if piece.is_parent:
            continue
        parent = out.pieces[piece.parent]
        assert parent.is_parent and piece.parent == max(j for j in parents if j < i)  # [P1, C1, C2, P2, C3 ...]
        assert 0 < len(piece.text) <= 700
        assert all(s in parent.text for s in split_sentences(piece.text))
    siblings = [[p.text for p in out.pieces if p.parent == i] for i in parents]
    for kids in siblings:
        full = [t for t in kids if len(t) >= 400]
        assert len(full) >= len(kids) - 1  # only a section's last child may be short
        for a, b in zip(kids, kids[1:]):
            assert overlap(a, b) == 2 or split_sentences(b)[0].startswith("Chapter")  # a new section starts fresh


def test_chunks_name_their_section_and_first_and_last_page() -> None:
    first = Section("Intro")
    first.add(" ".join(sentences(4, 1)), page=1)
    first.add(" ".join(sentences(4, 2)), page=2, sep="\n")
    second = Section("Methods")
    second.add(" ".join(sentences(3, 3)), page=3)
    out = chunk_document(doc(first, second))
    assert {p.section for p in out.pieces} == {"Intro", "Methods"}
    for piece in out.pieces:
        expected = {s: page for page, seed, n in ((1, 1, 4), (2, 2, 4), (3, 3, 3)) for s in sentences(n, seed)}
        pages = [expected[s] for s in split_sentences(piece.text)]
        assert (piece.page, piece.page_end) == (pages[0], pages[-1])
    assert any(p.page != p.page_end for p in out.pieces)  # a chunk running over a page break


def test_a_records_source_is_the_parent_of_its_sections() -> None:
    out = chunk_document(doc(Section("performance", "Month 1.2. Year 4.5."), Section("commentary", "Calm month."),
                             source='{"fund_name": "K", "email": "pm@example.com"}'))
    assert out.pieces[0].is_parent and out.pieces[0].text == '{"fund_name": "K", "email": "[REDACTED_EMAIL]"}'
    assert [(p.section, p.parent) for p in out.pieces[1:]] == [("performance", 0), ("commentary", 0)]
    assert out.redactions == 1


# -- EMBED_MAX_CHARS ---------------------------------------------------------------------------
def test_a_faq_answer_longer_than_the_embedding_window_continues_under_its_question() -> None:
    long_answer = " ".join(sentences(30, 4))
    assert len(long_answer) > 3000
    text = f"FAQ\n\nQ: What is in the manual?\nA: {long_answer}\n\nQ: Anything else?\nA: No."
    out = chunk_document(text_doc(text), Sizes(embed_max=800))
    manual = [p.text for p in out.pieces if p.text.startswith("Q: What is in the manual?")]
    assert len(manual) >= 4 and all(len(t) <= 800 for t in manual)
    body = " ".join(t.partition("\n")[2] for t in manual)
    assert split_sentences(body) == split_sentences("A: " + long_answer)  # the tail is in a chunk of its own


@given(st.lists(st.sampled_from([*WORDS, "x" * 1200, "\n\n", "Q: why?\n", "A:", "."]), min_size=1, max_size=400),
       st.integers(120, 1500))
@settings(max_examples=60, deadline=None)
def test_no_embedded_chunk_is_longer_than_embed_max_and_no_word_is_lost(tokens: list[str], embed_max: int) -> None:
    text = " ".join(tokens)
    out = chunk_document(text_doc(text), Sizes(embed_max=embed_max))
    embedded = [p.text for p in out.pieces if not p.is_parent]
    assert all(len(t) <= embed_max for t in embedded)
    words = {w for w in sanitize(text).text.split() if len(w) <= embed_max // 2}  # a repeated question leaves less
    assert words <= set(" ".join(embedded).split())
    assert "".join(embedded).count("x") >= text.count("x")  # a word longer than the window is cut, not lost


def test_a_sentence_longer_than_the_window_is_split_at_words() -> None:
    run_on = " ".join(WORDS * 40)  # 2,700 characters, no full stop
    out = chunk_document(text_doc(run_on), Sizes(embed_max=500))
    texts = [p.text for p in out.pieces]
    assert len(texts) >= 6 and all(len(t) <= 500 for t in texts)
    assert " ".join(texts).split() == run_on.split()  # cut between words, never inside one
