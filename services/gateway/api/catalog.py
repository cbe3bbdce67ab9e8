"""What pickers offer: the tenant's collections (with the data sources that search them and their
access rules; not the conversation memory, which is personal) and its fund names. An admin changes a
collection's rules: whether members may upload into it, and who reads a document whose upload names
no access."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from fastapi import APIRouter, Depends

from ragmesh.identity import Identity
from services.gateway.api.documents import Collection
from services.gateway.api.schemas import CollectionAccess, Collections, Funds, access_json, returns
from services.gateway.document_request import CollectionAccessRequest
from services.gateway.library import CollectionLine, CollectionRules, Library


def collection_line(c: CollectionLine) -> dict:
    """A collection as a picker (and the MCP edge's list_collections) shows it."""
    return {"name": c.name, "documents": c.documents, "chunks": c.chunks, "data_source": c.data_source,
            "members_upload": c.members_upload, "default_access": access_json(c.default_access)}


def _rules(r: CollectionRules) -> dict:
    return {"collection": r.collection, "members_upload": r.members_upload,
            "default_access": access_json(r.default_access)}


def catalog_router(library: Library, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/collections", summary="The tenant's collections, for pickers, with their access rules",
                **returns(Collections, 502))
    async def list_collections(who: Identity = Depends(caller)) -> dict:
        return {"collections": [collection_line(c) for c in await library.collections(who)]}

    @router.put("/api/collections/{collection}/access", summary="A collection's access rules in the tenant (admin "
                                                                "keys)", **returns(CollectionAccess, 403, 502))
    async def set_collection_access(collection: Collection, rules: CollectionAccessRequest,
                                    who: Identity = Depends(caller)) -> dict:
        done = await library.set_collection_access(who, CollectionRules(
            collection, rules.members_upload, rules.default_access.to_access()))
        return _rules(done)

    @router.get("/api/funds", summary="The tenant's fund names, for pickers", **returns(Funds))
    async def list_funds(who: Identity = Depends(caller)) -> dict:
        return {"funds": await library.funds(who)}

    return router
