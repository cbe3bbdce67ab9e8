"""Who the caller is and what a client should offer it (GET /api/meta, Gateway.GetMeta): the models
served now (and which search the web), the data sources, the tenant's funds."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ragmesh.identity import Identity
from ragmesh.models import WEB_SEARCH_MODELS
from services.gateway.library import Library
from services.gateway.request import DATA_SOURCES


@dataclass(frozen=True)
class Meta:
    models: list[str]
    default_model: str
    web_search_models: list[str]
    data_sources: list[str]
    funds: list[str]
    identity: Identity


async def describe(who: Identity, models: Callable[[], Awaitable[list[str]]], default_model: str,
                   library: Library) -> Meta:
    offered = await models()
    return Meta(offered, default_model, [m for m in offered if m in WEB_SEARCH_MODELS], list(DATA_SOURCES),
                await library.funds(who), who)
