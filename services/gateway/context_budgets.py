"""Each model's context budget as the gateway uses it: what the generator's backend for the model declares
(its Budget call), kept per model for REFRESH_S, capped by the operator's settings. A generator that cannot
say (older than the call, unreachable, slower than ASK_TIMEOUT_S) gets the offline answerer's budget, today's
figures, asked again after RETRY_S: a question never waits on it for longer than that once."""
from __future__ import annotations

import asyncio
import logging
import time

from ragmesh.clients import GeneratorClient
from ragmesh.config import AnsweringSettings
from ragmesh.context_budget import OFFLINE, OFFLINE_HARD_CAP, ContextBudget
from ragmesh.errors import RagmeshError

log = logging.getLogger(__name__)

REFRESH_S = 300.0  # a generator redeployed with another window is followed within this
RETRY_S = 10.0  # after a failed ask, the default is used this long before asking again
ASK_TIMEOUT_S = 1.0


class ContextBudgets:
    def __init__(self, generator: GeneratorClient | None, settings: AnsweringSettings) -> None:
        """`generator`: None when there is none to ask (the default budget for every model)."""
        self.generator = generator
        self.settings = settings
        self._known: dict[str, tuple[float, ContextBudget]] = {}  # model -> (asked again after, budget)

    async def get(self, model: str) -> ContextBudget:
        """The budget of `model` (a configured model's name)."""
        now = time.monotonic()
        if (known := self._known.get(model)) and now < known[0]:
            return known[1]
        declared, until = OFFLINE, now + RETRY_S
        if self.generator is not None:
            try:
                declared = await asyncio.wait_for(self.generator.budget(model, ASK_TIMEOUT_S), ASK_TIMEOUT_S)
                until = now + REFRESH_S
            except (RagmeshError, asyncio.TimeoutError) as exc:
                log.warning("context budget unavailable: the default is used",
                            extra={"model": model, "error": str(exc) or "timed out"})
        budget = self.sized(declared)
        self._known[model] = (until, budget)
        return budget

    def sized(self, declared: ContextBudget) -> ContextBudget:
        """The declared budget within the operator's settings: CONTEXT_CHAR_BUDGET (at most 12,000) sets an
        answerer's with no window (the offline one, or any while the generator cannot say), CONTEXT_MAX_CHARS caps
        a model's."""
        if not declared.window_tokens:
            return ContextBudget(min(self.settings.context_char_budget, OFFLINE_HARD_CAP), declared.hits)
        return declared.capped(self.settings.context_max_chars)
