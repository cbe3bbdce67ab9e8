"""The context follows the model: each backend's declared budget (the offline answerer's today's 4,000
characters, a model's from its window), the gateway's reading of it (operator caps, the default when the
generator cannot say, asked once per model), and complete factsheets keeping their room when notes compete."""
from __future__ import annotations

import asyncio

import pytest

from ragmesh.config import GatewaySettings
from ragmesh.context_budget import MAX_HITS, OFFLINE, OFFLINE_CHARS, ContextBudget, for_window
from ragmesh.errors import Unavailable
from ragmesh.models import EXTRACTIVE
from ragmesh.types import Chunk, Hit
from services.gateway.context import build
from services.gateway.context_budgets import ContextBudgets
from services.generator.backends.extractive import ExtractiveBackend
from services.generator.backends.openai_compat import OpenAICompatGenerator
from services.generator.service import GenerationService


def test_the_offline_answerer_keeps_todays_figures_and_a_window_gives_a_model_more() -> None:
    assert ExtractiveBackend().budget(EXTRACTIVE) == OFFLINE == ContextBudget(4_000, 0)
    small, large = for_window(8_192), for_window(128_000)
    assert small.chars == 12_288 and small.hits == 15 and small.complete_records
    assert large.chars > 300_000 and large.hits == MAX_HITS
    assert for_window(2_048).chars == OFFLINE_CHARS, "a window smaller than the rest of a prompt: today's figure"
    assert for_window(0) == OFFLINE, "no window declared"


def test_the_generator_answers_the_declared_budget_of_the_model_asked() -> None:
    openai = OpenAICompatGenerator("http://127.0.0.1:9", "", "served", context_tokens=32_768)
    service = GenerationService({EXTRACTIVE: ExtractiveBackend(), "openai": openai}, EXTRACTIVE)
    assert service.budget("openai") == for_window(32_768)
    assert service.budget("") == OFFLINE, "no model: the default model's"
    asyncio.run(openai.close())


class Generator:
    """Answers Budget from a script of budgets or errors, counting the calls."""

    def __init__(self, *answers: ContextBudget | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def budget(self, model: str, timeout: float | None = None) -> ContextBudget:
        self.asked.append(model)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _budgets(generator: Generator | None, **settings: object) -> ContextBudgets:
    return ContextBudgets(generator, GatewaySettings(**settings))  # type: ignore[arg-type]


def test_a_models_budget_is_capped_by_the_operator_and_asked_once() -> None:
    generator = Generator(for_window(1_048_576))
    budgets = _budgets(generator, context_max_chars=50_000)

    async def twice() -> list[ContextBudget]:
        return [await budgets.get("gemini-2.5-flash"), await budgets.get("gemini-2.5-flash")]

    first, second = asyncio.run(twice())
    assert first == second and first.chars == 50_000 and first.hits == 50_000 // 800 and first.complete_records
    assert generator.asked == ["gemini-2.5-flash"]


def test_context_char_budget_sets_the_offline_answerers_up_to_the_hard_cap() -> None:
    assert asyncio.run(_budgets(Generator(OFFLINE), context_char_budget=6_000).get(EXTRACTIVE)).chars == 6_000
    assert asyncio.run(_budgets(Generator(OFFLINE), context_char_budget=50_000).get(EXTRACTIVE)).chars == 12_000


@pytest.mark.parametrize("failure", [Unavailable("generator: UNIMPLEMENTED"), None])
def test_a_generator_that_cannot_say_gives_todays_budget(failure: Exception | None) -> None:
    generator = None if failure is None else Generator(failure)
    assert asyncio.run(_budgets(generator).get("openai")) == ContextBudget(4_000, 0)


def _sheet(n: int, score: float) -> Hit:
    record = '{"fund_name": "Orion", "report_date": "2024-0%d-30", "commentary": "%s"}' % (n, f"figure{n} " * 150)
    said = ["Orion returned four percent in the first quarter.", "Emerging debt led the second half rally."][n - 1]
    return Hit(Chunk(f"factsheets/fs{n}#0", f"fs{n}", "factsheets", said,
                     parent_chunk_id=f"fs{n}#p", metadata={"factsheet_id": f"fs{n}", "fund_name": "Orion"},
                     date=f"2024-0{n}-30"), score, parent_text=record)


def _note(n: int, score: float) -> Hit:
    text = " ".join(f"Point{n}x{i} moved{n}x{i} weight{n}x{i} market{n}x{i}." for i in range(24))
    return Hit(Chunk(f"meeting_notes/n{n}", f"n{n}", "meeting_notes", text, metadata={"fund_name": "Orion"},
                     date="2024-05-01"), score)


def test_complete_factsheets_keep_their_room_when_notes_ranked_above_them_compete() -> None:
    hits = [_note(n, 0.9 - n / 100) for n in range(1, 11)] + [_sheet(1, 0.5), _sheet(2, 0.4)]
    chars = 9_000
    lean = build(hits, ContextBudget(chars))
    assert "Complete Factsheet Data" not in lean.text, "notes took the room: no record (the offline layout)"
    whole = build(hits, ContextBudget(chars, complete_records=True))
    assert len(whole.text) <= chars
    assert all(f"Complete Factsheet Data: {h.parent_text}" in whole.text for h in hits[-2:])
    assert any(b.chunk.collection == "meeting_notes" for b in whole.blocks), "the notes have the rest"
    assert [b.index for b in whole.blocks] == list(range(1, len(whole.blocks) + 1))
    assert whole.budget.complete_records and lean.budget == ContextBudget(chars)
