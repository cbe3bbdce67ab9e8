"""The context follows the model, read from the prompts models receive: the broad questions of
tests/data/broad_questions.yaml asked through POST /api/chat/ask of a gateway whose generator serves an
OpenAI-compatible model declaring no window (today's budget, the offline answerer's: 4,000 characters and the
route's hits) and Gemini (about a million tokens), both fakes that record their prompts. The large window's
prompts carry more of the facts each question needs, and the complete factsheets it names; the offline
answerer's budget is what it was (its answers: tests/integration/test_conversations_labelled.py)."""
from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from bench.conversations_bench import (LARGE_WINDOW_MODEL, TODAYS_BUDGET_MODEL, Reached, RecordedModels,
                                       broad_questions, context_recall, http_asker, reach)
from ragmesh.context_budget import OFFLINE
from ragmesh.models import EXTRACTIVE
from ragmesh.v1 import generator_pb2, generator_pb2_grpc
from tests.auth import channel
from tests.conftest import QUALITY_OFF
from tests.stack import Stack


@pytest.fixture(scope="module")
def reached(stack: Stack) -> Iterator[dict[str, list[Reached]]]:
    with RecordedModels() as models:
        generator = stack.start_variant("generator", openai_base_url=models.openai.url, openai_model="served-model",
                                        openai_context_tokens=0, gemini_api_key="test-key",
                                        gemini_base_url=models.gemini.url)
        gateway = stack.start_variant("gateway", generator_addr=generator.address, retrieval_timeout_s=30.0,
                                      **QUALITY_OFF)
        try:
            asker = http_asker(f"http://{stack.settings.host}:{gateway.app.http_port}", stack.headers)
            yield {m: reach(asker, m, broad_questions(), models.prompts) for m in (TODAYS_BUDGET_MODEL,
                                                                                  LARGE_WINDOW_MODEL)}
        finally:
            for host in (gateway, generator):
                stack.extra.remove(host)
                stack.call(host.stop())


def test_a_large_window_model_receives_more_of_what_broad_questions_need(reached: dict[str, list[Reached]]) -> None:
    today, large = reached[TODAYS_BUDGET_MODEL], reached[LARGE_WINDOW_MODEL]
    assert context_recall(today) < context_recall(large), (
        [r.missing for r in today], [r.missing for r in large])
    for small, big in zip(today, large):
        assert len(big.missing) <= len(small.missing), (big.ask, small.missing, big.missing)
        assert len(big.prompt) > len(small.prompt)
    assert context_recall(large) >= 0.7, [(r.ask, r.missing) for r in large]


def test_the_complete_factsheet_reaches_the_large_window_model(reached: dict[str, list[Reached]]) -> None:
    wanted = [r for r in reached[LARGE_WINDOW_MODEL] if r.factsheets]
    assert wanted and not [(r.ask, r.records_missing) for r in wanted if r.records_missing]
    assert any(r.records_missing for r in reached[TODAYS_BUDGET_MODEL]), "today's budget left it out"


def test_the_offline_answerers_budget_is_todays(stack: Stack) -> None:
    budgets = stack.app("gateway").pipeline.planner.budgets
    assert stack.call(budgets.get(EXTRACTIVE)) == OFFLINE


def test_a_generator_that_cannot_answer_the_budget_call_gives_todays_budget(stack: Stack) -> None:
    """A gateway whose generator address serves no Generator (as one older than the Budget call would not
    answer it): every model gets the offline answerer's budget, and questions are still answered."""
    gateway = stack.start_variant("gateway", generator_addr=stack.address("retriever"))
    try:
        budgets = gateway.app.pipeline.planner.budgets
        assert stack.call(budgets.get("gemini-2.5-flash")) == stack.call(budgets.get(EXTRACTIVE)) == OFFLINE
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())


@pytest.mark.parametrize("model", ["no-such-model", "x" * 100_000])
def test_the_budget_of_a_model_the_generator_does_not_know_is_invalid_argument(stack: Stack, model: str) -> None:
    """An unknown or oversized model name is the caller's mistake, named, never UNKNOWN."""
    with channel(stack.address("generator"), stack.service_metadata()) as ch:
        with pytest.raises(grpc.RpcError) as refused:
            generator_pb2_grpc.GeneratorStub(ch).Budget(generator_pb2.ContextBudgetRequest(model=model), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details().startswith("model")
