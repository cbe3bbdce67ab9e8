"""Generation backends: each streams GenEvents for a GenerationRequest."""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from ragmesh.context_budget import ContextBudget
from ragmesh.types import ContextBlock, GenEvent, Turn


@dataclass
class GenerationRequest:
    model: str
    question: str
    blocks: list[ContextBlock] = field(default_factory=list)
    history: list[Turn] = field(default_factory=list)
    system_instruction: str = ""
    prompt: str = ""
    web_search: bool = False
    temperature: float | None = None


class GenerationBackend(Protocol):
    name: str

    def stream(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        """Thinking and content events, then one done event."""

    def budget(self, model: str) -> ContextBudget:
        """How much retrieved context `model` (one this backend serves) takes."""

    async def close(self) -> None:
        """Releases HTTP clients when the service stops."""
