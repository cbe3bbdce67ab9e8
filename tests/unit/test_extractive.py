"""The offline backend quotes the context, cites only given blocks and says when nothing fits."""
import asyncio
import re

from ragmesh.types import Chunk, ContextBlock, Turn
from services.generator.backends import GenerationRequest
from services.generator.backends.extractive import NO_DATA, NOTHING_RELEVANT, ExtractiveBackend


def block(i: int, text: str) -> ContextBlock:
    return ContextBlock(i, text, Chunk(f"c{i}", f"d{i}", "meeting_notes", text), f"Block {i}")


BLOCKS = [
    block(1, "Kestrel cut its Brazil exposure from 12% to 4% in March 2024. The weather was mild."),
    block(2, "Northwind returned 3.2% in Q2. Kestrel moved the Brazil exposure into India."),
    block(3, "Kestrel cut its Brazil exposure from 12% to 4% in March 2024!"),  # the same fact again
]


def run(request: GenerationRequest) -> str:
    async def collect() -> str:
        return "".join([e.text async for e in ExtractiveBackend(delay_ms=0).stream(request) if e.kind == "content"])
    return asyncio.run(collect())


def test_answers_with_relevant_sentences_citing_given_blocks_only() -> None:
    answer = run(GenerationRequest("extractive", "What did Kestrel do with Brazil exposure?", BLOCKS))
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
    assert cited and cited <= {1, 2, 3}
    assert "12% to 4%" in answer
    assert "weather" not in answer
    assert answer.count("12% to 4%") == 1, "the repeated fact is said once"


def test_no_blocks_says_there_is_no_data() -> None:
    assert run(GenerationRequest("extractive", "Anything?", [])) == NO_DATA


def test_irrelevant_blocks_are_not_quoted() -> None:
    assert run(GenerationRequest("extractive", "Who won the football league?", BLOCKS)) == NOTHING_RELEVANT


def test_follow_up_without_blocks_restates_the_conversation() -> None:
    history = [Turn("q1", "- Kestrel cut Brazil to 4%. [1]"), Turn("q2", "- India is now 28% of NAV. [2]")]
    answer = run(GenerationRequest("extractive", "Summarize that", [], history))
    assert "Kestrel cut Brazil to 4%." in answer and "India is now 28% of NAV." in answer
    assert "[" not in answer, "old markers point at blocks this answer was not given"


def test_the_first_piece_cites_a_given_block() -> None:
    """The gateway shows nothing before a valid citation: a first piece that cites is shown at once."""
    async def first() -> str:
        request = GenerationRequest("extractive", "What did Kestrel do with Brazil exposure?", BLOCKS)
        return await anext(e.text async for e in ExtractiveBackend(delay_ms=0).stream(request) if e.kind == "content")

    piece = asyncio.run(first())
    assert piece.startswith("Here is what the sources say:")
    assert {int(n) for n in re.findall(r"\[(\d+)\]", piece)} & {1, 2, 3}


def test_a_question_that_only_says_what_to_do_quotes_each_sources_opening() -> None:
    answer = run(GenerationRequest("extractive", "Summarize that", BLOCKS[:2]))
    assert answer != NOTHING_RELEVANT
    assert "12% to 4% in March 2024. [1]" in answer and "Northwind returned 3.2% in Q2. [2]" in answer
    assert "weather" not in answer and "India" not in answer, "one opening sentence a source"


def test_an_ampersand_term_is_one_word_of_the_question() -> None:
    blocks = [block(1, "Solstice gained 4.1% in August. M&A was the main driver."),
              block(2, "Solstice gained 2.8% in July.")]
    answer = run(GenerationRequest("extractive", "What did Solstice say about M&A?", blocks))
    assert "M&A was the main driver. [1]" in answer


def test_a_sentence_naming_the_subject_is_followed_by_the_one_that_holds_the_fact() -> None:
    blocks = [block(1, "The loss came from Dunmore Auto Components, a parts supplier. Some receivables were pledged "
                       "twice. Altair's facility was marked down from 97 to 55, costing about 70bp. The weather was mild.")]
    answer = run(GenerationRequest("extractive", "What happened with Dunmore Auto Components?", blocks))
    assert "marked down from 97 to 55" in answer and "weather" not in answer
