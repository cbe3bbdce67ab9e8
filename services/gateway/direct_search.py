"""A search as the caller, without an answer (the MCP edge's `search` tool): the question's hits in
the caller's collections, each with how it ranked. The retriever searches with the caller's credential
(ragmesh.request_context.identity_var), in the caller's tenant only, and admits only chunks the caller
may read: a collection named that is not the caller's holds nothing, and the conversation memory
(personal, reached only through Ask) is never searched here."""
from __future__ import annotations

import asyncio
import dataclasses

from ragmesh.clients import RetrieverClient
from ragmesh.types import MEMORY_COLLECTION, Hit
from services.gateway.collection_merge import by_rank
from services.gateway.request import AskInput
from services.gateway.scope import Scope

DEFAULT_TOP_K = 10  # hits when the caller names no top_k


async def search(retriever: RetrieverClient, ask: AskInput, collections: list[str]) -> list[Hit]:
    """The best `ask.top_k` hits of `ask.question` in `collections` (none named: every collection of the
    caller's tenant), one search per collection side by side, merged by rank (collection_merge.by_rank: the
    collections' scores are not on one scale). Picked
    documents (`ask.document_ids`) confine each collection's search to those in it."""
    if not collections:
        collections = sorted(c.name for c in await retriever.own_collections())
    top_k = ask.top_k or DEFAULT_TOP_K
    base = Scope.asked(ask).search_filter(ask.tenant)  # the filters the caller set, as an Ask's start
    searches = [retriever.search(ask.question, [c], dataclasses.replace(base, doc_ids=picked), top_k)
                for c in dict.fromkeys(collections) if c != MEMORY_COLLECTION
                if (picked := ask.picked(c)) is None or picked]
    return by_rank([found.hits for found in await asyncio.gather(*searches)])[:top_k]
