"""One answer whole, for the clients that want it in one reply (POST /api/chat/ask, Gateway.AskNotes):
the pipeline's events gathered into the answer, its sources and how it was made."""
from __future__ import annotations

from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any

from ragmesh.errors import error_of
from ragmesh.types import Citation
from services.gateway.pipeline import AskPipeline, Prepared
from services.gateway.strategy import Strategy, strategy_json


@dataclass
class WholeAnswer:
    conversation_id: str
    model: str
    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    web_queries: list[str] = field(default_factory=list)
    strategy: Strategy | None = None  # None: the question never reached planning's end
    scores: dict[str, float] = field(default_factory=dict)  # chunk id -> its hit's score
    usage: dict[str, int] = field(default_factory=dict)  # the tokens it took (the generator's counts)


async def whole_answer(pipeline: AskPipeline, prepared: Prepared) -> WholeAnswer:
    """Runs the answer to its end; an error event is raised as the error it names."""
    ask = prepared.ask
    whole, parts = WholeAnswer(ask.conversation_id, ask.model), []
    async with aclosing(pipeline.run(prepared)) as events:
        async for event in events:
            if event.kind == "content":
                parts.append(event.value)
            elif event.kind == "citations":
                whole.citations, whole.web_queries, whole.scores = (event.value.citations, event.value.web_queries,
                                                                    event.value.scores)
            elif event.kind == "strategy":
                whole.strategy = event.value
            elif event.kind == "done":
                whole.model, whole.usage = event.value.model, event.value.usage
            elif event.kind == "error":
                raise error_of(event.value["code"], event.value["message"])
    whole.answer = "".join(parts)
    return whole


def whole_json(whole: WholeAnswer) -> dict[str, Any]:
    """The whole answer in ragmesh's own JSON (POST /api/chat/ask); the notes contract's is
    notes_contract.notes_json."""
    strategy = strategy_json(whole.strategy) if whole.strategy else {}
    return {
        "answer": whole.answer, "citations": [asdict(c) for c in whole.citations],
        "web_queries": whole.web_queries, "conversation_id": whole.conversation_id,
        "meta": {"model": whole.model, "strategy": strategy,
                 "retrieval": {"k": strategy.get("k", 0), "candidateCount": strategy.get("candidate_count", 0),
                               "timeMs": strategy.get("retrieval_ms", 0.0)}},
    }
