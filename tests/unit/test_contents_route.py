"""Asked for a document's chapters, the planner answers from its outline (the section titles), even when
the document has a summary; asked for a summary, from the summary; asked for chapters of a document with no
sections, it searches instead."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ragmesh import config
from ragmesh.clients import SearchResult
from ragmesh.models import EXTRACTIVE
from ragmesh.types import DocumentRecord, SectionOutline
from services.gateway import router
from services.gateway.history import Recent
from services.gateway.planner import Planner
from services.gateway.request import AskInput
from services.gateway.scope_cache import ScopeCache

BOOK = "keepers.md"
SECTIONS = [SectionOutline("1 The lamp", "How the lamp burns."), SectionOutline("2 The log", "What a keeper writes.")]


class FakeRetriever:
    def __init__(self, sections: list[SectionOutline]) -> None:
        self.record = DocumentRecord(BOOK, "documents", "t", "h", "Keepers", summary="A book about lighthouse keepers.",
                                     sections=sections)
        self.searches = 0

    async def get_document(self, collection: str, doc_id: str) -> DocumentRecord:
        return self.record

    async def search(self, *args, **kwargs) -> SearchResult:
        self.searches += 1
        return SearchResult([], 0, {})


class FakeEmbedder:
    async def embed(self, texts: list[str], kind: str, timeout: float) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)


def _planned(question: str, sections: list[SectionOutline] = SECTIONS) -> tuple:
    settings = config.load().replace(quality_rewrite=False, quality_rerank=False, quality_compress=False,
                                     quality_history=False, scope_llm_check=False, retrieval_timeout_s=5.0)

    async def no_funds(tenant: str) -> list[str]:
        return []

    retriever = FakeRetriever(sections)
    planner = Planner(retriever, None, FakeEmbedder(), ScopeCache(), no_funds, settings, EXTRACTIVE, {})
    ask = AskInput(question, data_sources=["Documents"], document_ids=[f"documents/{BOOK}"], tenant="t",
                   conversation_id="c")
    return asyncio.run(planner.plan(ask, Recent(0, []))), retriever


@pytest.mark.parametrize("question", ["List the chapters", "What is the table of contents?",
                                      "What chapters does this book have?"])
def test_the_chapters_asked_for_are_the_outline_not_the_summary(question: str) -> None:
    plan, retriever = _planned(question)
    assert plan.route == router.SUMMARY and "table of contents of documents/keepers.md" in plan.reason, plan.reason
    assert [h.chunk.text for h in plan.hits] == ["Sections: 1 The lamp; 2 The log"]
    assert retriever.searches == 0


def test_a_summary_asked_for_is_still_the_summary() -> None:
    plan, _ = _planned("Summarize this book")
    assert plan.route == router.SUMMARY and "; summary of documents/keepers.md" in plan.reason, plan.reason
    assert plan.hits[0].chunk.text == "A book about lighthouse keepers."


def test_the_chapters_of_a_document_without_sections_are_searched_for() -> None:
    plan, retriever = _planned("List the chapters", sections=[])
    assert plan.route == router.SPECIFIC and "contents asked, but the document has no outline" in plan.reason
    assert retriever.searches > 0
