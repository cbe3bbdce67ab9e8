"""The offline backend leads with what the question asks for: a name for "who", a figure for "how much",
a date for "when", from the blocks' text or their metadata (a fund's manager, a report's date)."""
from __future__ import annotations

import pytest

from ragmesh.types import Chunk, ContextBlock
from services.generator.backends import GenerationRequest
from ragmesh.question_kinds import DATE, FIGURE, PERSON, REASON, asked
from services.generator.backends.extractive import ExtractiveBackend

ALTAIR = {"fund_name": "Altair Credit Opportunities", "manager": "Priya Raman"}


def block(i: int, text: str, collection: str = "meeting_notes", date: str = "2024-03-27", **meta: str) -> ContextBlock:
    return ContextBlock(i, text, Chunk(f"c{i}", f"d{i}", collection, text, metadata=meta, date=date), f"Block {i}")


def first_line(question: str, blocks: list[ContextBlock]) -> str:
    return ExtractiveBackend(delay_ms=0).compose(GenerationRequest("extractive", question, blocks)).split("\n")[2]


@pytest.mark.parametrize(("question", "kinds"), [
    ("Who manages Altair Credit Opportunities?", {PERSON}),
    ("Which Altair executive left in June 2024?", {PERSON}),
    ("How much did Northwind lose in August 2024, and what caused it?", {FIGURE, REASON}),
    ("Why did Kestrel rally in September 2024?", {REASON}),
    ("What did Solstice gain from M&A?", {FIGURE}),
    ("What was Kestrel's 2025 full-year return?", {FIGURE}),
    ("When did Meridian close to new investors, and at what capacity?", {DATE, FIGURE}),
    ("What did Kestrel say about Brazil?", set()),
])
def test_what_a_question_asks_for(question: str, kinds: set[str]) -> None:
    assert asked(question) == kinds


def test_who_is_answered_with_the_name_the_text_gives() -> None:
    blocks = [block(1, "Altair Credit Opportunities returned 8.69% net in 2023 and Altair Credit Opportunities "
                       "is up 2.01% through February 2024. On-site meeting with Priya Raman at the New York office.",
                    **ALTAIR)]
    assert "Priya Raman" in first_line("Who manages Altair Credit Opportunities?", blocks)


def test_who_is_answered_from_the_metadata_when_the_text_names_no_one() -> None:
    blocks = [block(1, "Altair Credit Opportunities returned 8.69% net in 2023. Altair Credit Opportunities "
                       "holds 68 issuers.", **ALTAIR)]
    line = first_line("Who manages Altair Credit Opportunities?", blocks)
    assert line == "- **Block 1**: Altair Credit Opportunities is managed by Priya Raman. [1]"


def test_why_prefers_the_sentence_that_tells_the_cause() -> None:
    blocks = [block(1, "September was the fund's best month, up 5.8%. "
                       "In late September, Chinese policymakers announced broad monetary and fiscal support.",
                    fund_name="Kestrel Emerging Markets")]
    assert "announced" in first_line("Why did Kestrel rally in September 2024?", blocks)


def test_how_much_prefers_the_sentence_with_the_figure() -> None:
    blocks = [block(1, "Northwind said August 2024 was hard, and that it would lose more if the yen kept rising. "
                       "Northwind fell 4.1% in August 2024.", fund_name="Northwind Global Macro Fund")]
    assert "4.1%" in first_line("How much did Northwind lose in August 2024?", blocks)


def test_when_prefers_the_sentence_with_the_date_and_offers_the_report_date() -> None:
    blocks = [block(1, "Meridian's decision to close to new investors was discussed at length. "
                       "Meridian closed on 1 March 2025.", fund_name="Meridian Quant Systematic")]
    assert "1 March 2025" in first_line("When did Meridian close to new investors?", blocks)
    sheet = [block(1, "Month return 1.9%. Year-to-date 6.43%.", "factsheets", "2024-03-31",
                   fund_name="Harborview Long/Short Equity")]
    assert "2024-03-31" in first_line("When is the latest Harborview factsheet from?", sheet)


def test_a_meeting_date_answers_when_the_meeting_was_not_when_its_news_happened() -> None:
    blocks = [block(1, "Sofia Lindgren joined Harborview in January 2025 as head of short research.",
                    fund_name="Harborview Long/Short Equity", manager="Daniel Marchetti")]
    backend = ExtractiveBackend(delay_ms=0)
    news = backend.compose(GenerationRequest("extractive", "Who joined Harborview as head of short research, and when?",
                                             blocks))
    assert "dated" not in news and "managed by" not in news and "Sofia Lindgren" in news.split("\n")[2]
    meeting = backend.compose(GenerationRequest("extractive", "When did we last meet Harborview?", blocks))
    assert "The Harborview Long/Short Equity meeting notes are dated 2024-03-27." in meeting


NORTHWIND = {"fund_name": "Northwind Global Macro Fund", "manager": "Eleanor Whitcombe"}
NORTHWIND_NOTE = ("Operationally, Northwind moved OTC collateral management to a second administrator in June, and the "
                  "managed-account sleeve has grown to $1.1bn. Whitcombe confirmed that the 10% FX carry cap is "
                  "permanent. The team is unchanged.")


def answer(question: str, blocks: list[ContextBlock]) -> str:
    return ExtractiveBackend(delay_ms=0).compose(GenerationRequest("extractive", question, blocks))


def northwind(i: int, text: str, collection: str = "meeting_notes", date: str = "2025-10-08") -> ContextBlock:
    return ContextBlock(i, text, Chunk(f"c{i}", f"d{i}", collection, text, metadata=NORTHWIND, date=date),
                        f"Meeting note, Northwind Global Macro Fund, {date}")


def test_a_sleeves_size_is_not_the_funds_assets() -> None:
    """The measure asked (AUM) is stated in other words than the question's: the sentence that states it
    answers, the sleeve's size (which shares "manage" with the question) is left out."""
    blocks = [northwind(1, NORTHWIND_NOTE), northwind(2, "Annual review at the London office. AUM is $6.2bn.",
                                                      date="2025-01-22")]
    said = answer("How much money does Northwind Global Macro manage?", blocks)
    assert "$6.2bn" in said and "$1.1bn" not in said


def test_a_figure_the_sources_do_not_state_is_said_to_be_missing() -> None:
    blocks = [northwind(1, NORTHWIND_NOTE)]
    for question, what in (("How much is Northwind's management fee?", "the management fee"),
                           ("What was Northwind's return in 2019?", "the return"),
                           ("Who audits Northwind Global Macro Fund?", "a name"),
                           ("When was Northwind Global Macro Fund launched?", "a date")):
        said = answer(question, blocks)
        assert said.startswith("The sources found do not say this") and what in said, said
        assert "$1.1bn" not in said and "10%" not in said
        assert "Meeting note, Northwind Global Macro Fund, 2025-10-08 [1]" in said, "what was found, cited"


def test_another_years_figure_does_not_answer_for_the_year_asked() -> None:
    blocks = [northwind(1, "The fund closed 2023 up 9.53% net. Rafael Osei, co-PM since 2019, produced about 40% "
                           "of 2023 P&L.", date="2024-02-20")]
    assert "do not say" in answer("What was Northwind's return in 2019?", blocks)
    assert "9.53%" in answer("What was Northwind's return in 2023?", blocks)


def test_a_factsheets_figures_are_of_its_month() -> None:
    """"month return -4.1%" of the factsheet of 2024-08-31 is August's, though the sentence names no month."""
    fs = northwind(1, "Northwind Global Macro Fund performance as of 2024-08-31: month return -4.1%.",
                   collection="factsheets", date="2024-08-31")
    assert "-4.1%" in answer("How much did Northwind lose in August 2024?", [fs])


def test_how_many_is_answered_by_a_bare_count_not_a_year() -> None:
    """A count has no unit ("37 beehives"); the sentence saying it answers, and the year beside it does not."""
    blocks = [block(1, "Zephyr Orchard Fund: estate report. The hives were counted in April 2024 by the estate "
                       "manager. The Zephyr Orchard Fund keeps exactly 37 beehives on its Valencia estate.",
                    collection="documents")]
    assert first_line("How many beehives does the Zephyr Orchard Fund keep?", blocks).endswith(
        "The Zephyr Orchard Fund keeps exactly 37 beehives on its Valencia estate. [1]")
