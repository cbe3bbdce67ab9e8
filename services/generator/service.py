"""Picks the backend for a model name, checks the citations of every backend's answer
while it streams, and keeps the counts operators read from Stats, per tenant (and the time to the
first token and the tokens per model, as metrics)."""
from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

from ragmesh import metrics
from ragmesh.context_budget import ContextBudget
from ragmesh.errors import InvalidArgument
from ragmesh.identity import Identity
from ragmesh.models import KNOWN_MODELS, not_configured
from ragmesh.types import GenEvent
from services.generator.backends import GenerationBackend, GenerationRequest
from services.generator.citations import checked
from services.generator.coalesce import coalesced

log = logging.getLogger(__name__)


@dataclass
class Counts:
    """Answers begun, finished, and stopped by their caller."""

    started: int = 0
    completed: int = 0
    cancelled: int = 0


class GenerationService:
    def __init__(self, backends: dict[str, GenerationBackend], default_model: str, piece_window_s: float = 0.0) -> None:
        self.backends = backends
        self.default_model = default_model
        self.piece_window_s = piece_window_s  # the text that comes within this of the last piece goes out with the next
        self.by_tenant: defaultdict[str, Counts] = defaultdict(Counts)  # "": calls that name no tenant

    def counts(self, who: Identity | None) -> Counts:
        """What the caller may see: its tenant's answers; the whole deployment's only for the platform
        itself (the service credential naming no tenant, or a test server that identifies nobody)."""
        if who is not None and not (who.is_service and not who.tenant):
            found = self.by_tenant.get(who.tenant, Counts())
            return Counts(found.started, found.completed, found.cancelled)
        every = self.by_tenant.values()
        return Counts(sum(c.started for c in every), sum(c.completed for c in every), sum(c.cancelled for c in every))

    @property
    def completed(self) -> int:
        return self.counts(None).completed

    @property
    def cancelled(self) -> int:
        return self.counts(None).cancelled

    def backend_for(self, model: str) -> GenerationBackend:
        if model not in KNOWN_MODELS:
            shown = model if len(model) <= 100 else model[:100] + "..."  # the reply's details stay within gRPC's limit
            raise InvalidArgument("model", f"unknown model {shown!r}; known: {', '.join(KNOWN_MODELS)}")
        backend = self.backends.get(model)
        if backend is None:  # never a silent answer from another backend than the one asked for
            raise InvalidArgument("model", not_configured(model, [m for m in KNOWN_MODELS if m in self.backends]))
        return backend

    def budget(self, model: str) -> ContextBudget:
        """The context `model` (the default model when empty) takes, as its backend declares it."""
        model = model or self.default_model
        return self.backend_for(model).budget(model)

    async def generate(self, request: GenerationRequest, tenant: str = "") -> AsyncIterator[GenEvent]:
        """The answer's events, counted for `tenant` (the caller's)."""
        request.model = request.model or self.default_model
        backend = self.backend_for(request.model)
        counts = self.by_tenant[tenant]
        counts.started += 1
        began, waiting = time.perf_counter(), True
        try:
            pieces = coalesced(backend.stream(request), self.piece_window_s)
            async with aclosing(checked(pieces, {b.index for b in request.blocks})) as events:
                async for event in events:
                    if waiting and event.kind in ("thinking", "content"):
                        waiting = False
                        metrics.first_token(request.model, time.perf_counter() - began)
                    elif event.kind == "usage":
                        metrics.tokens(request.model, event.usage)
                    yield event
            counts.completed += 1
        except (asyncio.CancelledError, GeneratorExit):
            counts.cancelled += 1
            log.info("generation cancelled by the caller", extra={"model": request.model})
            raise
