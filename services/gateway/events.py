"""The events of one answer, as the pipeline yields them and the SSE bridge sends them (one JSON object
per `data:` line): searching -> strategy -> generating -> thinking/content -> citations -> done, or error."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ragmesh.types import Citation
from services.gateway.strategy import strategy_json


@dataclass
class Event:
    kind: str  # searching | strategy | generating | thinking | content | citations | done | error
    value: Any  # strategy: a Strategy; citations: Sources; done: Done; error: {code, message}; else bool or text


@dataclass(frozen=True)
class Sources:
    """The citations event: what the answer cites, and the web searches behind its web citations.
    `scores` (chunk id -> the hit's score) is for the notes contract's citations; the event does not send it."""

    citations: list[Citation]
    web_queries: list[str]
    scores: dict[str, float]


@dataclass(frozen=True)
class Done:
    """The answer's end: where it is stored (no message id when it was stopped before any content, or the
    client holds the conversation), the model that answered, whether the user stopped it, and the tokens it
    took."""

    conversation_id: str
    message_id: str
    model: str
    stopped: bool
    usage: dict[str, int]
    held: bool = False  # the client holds the conversation: the id is derived, nothing was stored


def event_json(event: Event) -> dict[str, Any]:
    if event.kind == "strategy":
        return {"strategy": strategy_json(event.value)}
    if event.kind == "citations":
        return {"citations": [asdict(c) for c in event.value.citations], "web_queries": event.value.web_queries}
    if event.kind == "done":
        return {"done": True, **asdict(event.value)}
    return {event.kind: event.value}
