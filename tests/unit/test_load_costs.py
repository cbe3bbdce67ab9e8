"""The load part's cost figures (bench/load_bench.py): CPU per answer and per search from the services'
snapshots, and issue 37's two ratios with their bounds."""
from __future__ import annotations

import pytest

from bench.load_bench import Usage, add_cost_figures, cpu_ms
from bench.search_bench import Section


def _snap(**cpu: tuple[int, float]) -> dict[str, Usage]:
    return {name: Usage(pid, 100.0, 10, seconds) for name, (pid, seconds) in cpu.items()}


def test_cpu_is_summed_over_the_services_named_and_a_restarted_one_counts_from_its_start() -> None:
    before = _snap(gateway=(1, 10.0), embedder=(2, 5.0), retriever=(3, 1.0))
    after = _snap(gateway=(1, 10.5), embedder=(9, 0.25), retriever=(3, 1.5))
    assert cpu_ms(before, after) == pytest.approx(1250.0)
    assert cpu_ms(before, after, ("embedder", "retriever")) == pytest.approx(750.0)


def test_the_two_ratios_are_measured_in_one_run_and_judged_against_the_issues_bounds() -> None:
    section = Section("load")
    add_cost_figures(section, 50, answer=(1000, 50.0, 87_000.0), search=(10_000, 20.0, 70_000.0), judged=True)
    figures = {f.name: f for f in section.figures}
    assert figures["chat x50: CPU-ms an answer (all services)"].value == pytest.approx(87.0)
    ratio = figures["CPU-ms an answer / CPU-ms a search with its embedding"]
    assert ratio.value == pytest.approx(12.4, abs=0.05) and not ratio.target.met(ratio.value)
    rates = figures["answers/s at 50 chats / searches/s with the embedder in the path"]
    assert rates.value == pytest.approx(20 / 500) and not rates.target.met(rates.value)


def test_searches_that_fell_back_without_their_embedding_are_named_beside_the_figure() -> None:
    section = Section("load")
    add_cost_figures(section, 10, answer=(10, 5.0, 900.0), search=(20, 5.0, 600.0), judged=False, keyword_only=20)
    figure = next(f for f in section.figures if f.name.startswith("search, embedder in the path"))
    assert "20 fell back to keyword-only" in figure.note
