"""Picks the backend for a model name, checks the citations of every backend's answer
while it streams, and keeps the counts operators read from Stats (and the time to the first
token and the tokens per model, as metrics)."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

from ragmesh import metrics
from ragmesh.errors import InvalidArgument
from ragmesh.models import KNOWN_MODELS, not_configured
from ragmesh.types import GenEvent
from services.generator.backends import GenerationBackend, GenerationRequest
from services.generator.citations import checked

log = logging.getLogger(__name__)


class GenerationService:
    def __init__(self, backends: dict[str, GenerationBackend], default_model: str) -> None:
        self.backends = backends
        self.default_model = default_model
        self.started = self.completed = self.cancelled = 0

    def backend_for(self, model: str) -> GenerationBackend:
        if model not in KNOWN_MODELS:
            raise InvalidArgument("model", f"unknown model {model!r}; known: {', '.join(KNOWN_MODELS)}")
        backend = self.backends.get(model)
        if backend is None:  # never a silent answer from another backend than the one asked for
            raise InvalidArgument("model", not_configured(model, [m for m in KNOWN_MODELS if m in self.backends]))
        return backend

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        request.model = request.model or self.default_model
        backend = self.backend_for(request.model)
        self.started += 1
        began, waiting = time.perf_counter(), True
        try:
            async with aclosing(checked(backend.stream(request), {b.index for b in request.blocks})) as events:
                async for event in events:
                    if waiting and event.kind in ("thinking", "content"):
                        waiting = False
                        metrics.first_token(request.model, time.perf_counter() - began)
                    elif event.kind == "usage":
                        metrics.tokens(request.model, event.usage)
                    yield event
            self.completed += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            log.info("generation cancelled by the caller", extra={"model": request.model})
            raise
