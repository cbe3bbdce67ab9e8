"""Answers running in this gateway, so a stop request can end one and wait until it has ended."""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Run:
    """An answer under way in a conversation: `stop` asks it to stop, `ended` says it has."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class Runs(Protocol):
    async def begin(self, conversation_id: str) -> Run:
        """Registers an answer starting in the conversation."""

    def end(self, conversation_id: str, run: Run) -> None:
        """The answer has ended and what it left is stored (sync: called from a `finally`)."""

    async def stop(self, conversation_id: str, wait_s: float) -> bool:
        """Stops the conversation's running answer and waits (at most `wait_s`) until it has ended;
        False when none runs."""


class LocalRuns:
    """Answers running in this process: with one gateway, every answer there is."""

    def __init__(self) -> None:
        self.running: dict[str, Run] = {}

    async def begin(self, conversation_id: str) -> Run:
        run = self.running.setdefault(conversation_id, Run())
        run.stop.clear()
        run.ended.clear()
        return run

    def end(self, conversation_id: str, run: Run) -> None:
        self.running.pop(conversation_id, None)
        run.ended.set()

    async def stop(self, conversation_id: str, wait_s: float) -> bool:
        run = self.running.get(conversation_id)
        if run is None:
            return False
        run.stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.ended.wait(), wait_s)
        return True
