"""One answer whole, for the clients that want it in one reply (POST /api/chat/ask, Gateway.AskNotes):
the pipeline's events gathered into the answer, its sources and how it was made."""
from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field

from ragmesh.errors import error_of
from ragmesh.types import Citation
from services.gateway.pipeline import AskPipeline, Prepared
from services.gateway.strategy import Strategy


@dataclass
class WholeAnswer:
    conversation_id: str
    model: str
    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    web_queries: list[str] = field(default_factory=list)
    strategy: Strategy | None = None  # None: the question never reached planning's end


async def whole_answer(pipeline: AskPipeline, prepared: Prepared) -> WholeAnswer:
    """Runs the answer to its end; an error event is raised as the error it names."""
    ask = prepared.ask
    whole, parts = WholeAnswer(ask.conversation_id, ask.model), []
    async with aclosing(pipeline.run(prepared)) as events:
        async for event in events:
            if event.kind == "content":
                parts.append(event.value)
            elif event.kind == "citations":
                whole.citations, whole.web_queries = event.value.citations, event.value.web_queries
            elif event.kind == "strategy":
                whole.strategy = event.value
            elif event.kind == "done":
                whole.model = event.value.get("model", whole.model)
            elif event.kind == "error":
                raise error_of(event.value["code"], event.value["message"])
    whole.answer = "".join(parts)
    return whole
