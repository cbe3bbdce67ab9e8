"""The models this deployment offers: those the generator has a backend for, asked of the generator
(its Stats) and refreshed at most once a minute. A question naming a known model that is not
configured is refused before anything is written (400 / INVALID_ARGUMENT naming the model and the
setting that enables it), never answered by another backend; Web Search asked of a model that
cannot search is said in the strategy event."""
from __future__ import annotations

import asyncio
import logging
import time

from ragmesh.clients import GeneratorClient
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.models import KNOWN_MODELS, WEB_SEARCH_MODELS, not_configured

log = logging.getLogger(__name__)

REFRESH_S = 60.0
ASK_TIMEOUT_S = 2.0  # a question naming a model waits at most this long for the generator's list


class ModelCatalog:
    def __init__(self, generator: GeneratorClient, default_model: str) -> None:
        self.generator = generator
        self.default_model = default_model
        self._fetched, self._models = 0.0, []  # the generator's configured models, in KNOWN_MODELS order

    async def configured(self) -> list[str]:
        """The configured models; just the default model while the generator cannot say."""
        if time.monotonic() - self._fetched > REFRESH_S or not self._models:
            try:
                served = set((await asyncio.wait_for(self.generator.stats(), ASK_TIMEOUT_S)).models)
                self._fetched, self._models = time.monotonic(), [m for m in KNOWN_MODELS if m in served]
            except (RagmeshError, asyncio.TimeoutError) as exc:
                log.warning("generator models unavailable", extra={"error": str(exc) or "timed out"})
        return self._models or [self.default_model]

    def offered_now(self) -> list[str]:
        """The configured models as last asked, without asking; every known model before the first answer."""
        return list(self._models or KNOWN_MODELS)

    async def check(self, model: str) -> None:
        """Refuses a known model the generator does not serve (as it last said). Until the generator has
        said, the question goes on and the generator itself refuses it (the same error, in the stream)."""
        if not model:
            return
        configured = await self.configured()
        if self._models and model not in configured:
            raise InvalidArgument("model", not_configured(model, configured))


def web_search_note(model: str, web_search: bool) -> str:
    """What the strategy event says when Web Search is asked of a model that cannot search ('' otherwise)."""
    if not web_search or model in WEB_SEARCH_MODELS:
        return ""
    return (f"Web Search asked, but model {model!r} cannot search the web (Gemini models can: "
            f"{', '.join(WEB_SEARCH_MODELS)}): answered from internal data only")
