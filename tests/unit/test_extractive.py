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


def labelled(i: int, label: str, text: str) -> ContextBlock:
    return ContextBlock(i, text, Chunk(f"c{i}", f"d{i}", "meeting_notes", text), label)


def test_the_fund_every_source_is_about_counts_less_than_the_rare_words_of_the_question() -> None:
    """Every block is Orion's, so "Orion" tells no sentence apart: the sentence with the question's rare word
    leads, followed by its figure, above openers that hold a figure and the fund's name."""
    note = ("Quarterly review with the manager. Orion gained 3.6% in June, 2.8% in July and 4.1% in August, and is up "
            "8.26% net year-to-date through August. AUM has recovered to $1.4bn. M&A was the main driver. On 11 August "
            "a large buyer agreed to buy Bexa at an 88% premium. Orion's 3.8% position added about 310bp, and the "
            "fund sold all of it within two days. Net exposure is back up to 50% from 38%. The fund holds 40 longs.")
    blocks = [labelled(1, "Meeting note, Orion Health, 2025-09-24", note),
              labelled(2, "Orion Health Factsheet (2025-08-31)", "Orion Health commentary for the period ending "
                       "2025-08-31: Orion gained 4.1% in August and 7.01% quarter-to-date, and is up 8.26% "
                       "year-to-date. Medtech added 120bp."),
              labelled(3, "Meeting note, Orion Health, 2025-05-07", "Orion lost 2.5% in March and 1.9% in April and "
                       "is down 3.03% net year-to-date through April. Policy headlines caused the losses. Shorts in "
                       "large-cap pharma offset part of the damage. Net exposure is 38%."),
              labelled(4, "Orion Health Factsheet (2025-03-31)", "Orion Health top holdings as of 2025-03-31: Bexa "
                       "3.6%, Novar 3.3%, Lumen 3.0%. Net exposure 40%, gross 180%."),
              labelled(5, "Meeting note, Orion Health, 2025-01-15", "Annual review with the manager. The team hired "
                       "a medtech analyst. The binary cap is now 2% of NAV. Valuations are close to 20-year lows.")]
    answer = run(GenerationRequest("extractive", "What did Orion gain from M&A?", blocks))
    assert "310bp" in answer, answer


def test_the_fund_s_name_does_not_outweigh_the_rare_word_it_is_asked_with() -> None:
    """No kind asked: sentences naming the fund and "position" would outrank the one naming Tarn."""
    note = ("Urgent call with the manager after the failure of Tarn's trial. On 15 October Tarn announced that the "
            "trial had missed its endpoint, and the stock fell 74% that day. Orion had increased the position from "
            "2.6% to 3.1% of NAV in August. Orion's position sizing rule caps a single binary position at 4%.")
    blocks = [labelled(1, "Meeting note, Orion Health, 2024-10-29", note),
              labelled(2, "Orion Health Factsheet (2024-10-31)", "Orion lost 5.7% in October. Orion cut every "
                       "binary position to 2% of NAV. Orion's largest position is Novar."),
              labelled(3, "Meeting note, Orion Health, 2024-02-28", "Orion holds a position in Bexa. Orion's "
                       "position in Novar is 5%. Orion likes metabolic disease.")]
    answer = run(GenerationRequest("extractive", "What happened to Orion's Tarn position?", blocks))
    assert "74%" in answer, answer


def test_a_noun_in_y_meets_its_verb() -> None:
    blocks = [labelled(1, "Meeting note, Vega Credit, 2024-10-15",
                       "Tarn Cable emerged from bankruptcy in September. Holders received most of the equity. "
                       "At current marks, that gives Vega a recovery of about 71 cents, against a cost of 38 cents."),
              labelled(2, "Meeting note, Vega Credit, 2024-07-10", "Tarn Cable filed for bankruptcy in May. "
                       "Tarn Cable is a regional fibre operator. The Tarn Cable notes are marked at 52 cents.")]
    answer = run(GenerationRequest("extractive", "What did Vega recover on Tarn Cable?", blocks))
    assert "71 cents" in answer.split("\n")[2], answer
