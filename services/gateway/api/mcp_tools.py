"""The MCP server on the HTTP bridge: `POST /mcp`, streamable HTTP (the `mcp` SDK's low-level server and
session manager), with tools that search and ask as the caller.

The caller is who the bearer credential says, checked before any MCP work by the guards of every /api
route (services/gateway/api/limits.py: identity, admission, the body's size and deadline), and every
tool runs as that caller with its access: what it may not read answers exactly as what does not exist.

Stateless, with JSON responses: each POST is one whole exchange and nothing is kept between them, so
there are no sessions to open and abandon, no stream held open (GET and DELETE are 405), and any
gateway replica answers any request.

Each tool's arguments are the declarations the other edges check (TOOL_ARGUMENTS; ASK_FIELDS says
which Ask field each argument is): a bad argument is a tool error (isError) naming the field, as a 400
names it on the HTTP edge."""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import (INVALID_PARAMS, CallToolRequestParams, CallToolResult, ListToolsResult,
                       PaginatedRequestParams, TextContent, Tool, ToolAnnotations)
from pydantic import BaseModel, Field, create_model
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmesh.clients import RetrieverClient
from ragmesh.errors import RagmeshError, Unauthenticated
from ragmesh.identity import Identity
from ragmesh.paging import DEFAULT_PAGE
from ragmesh.request_context import identity_var, request_id_var
from ragmesh.types import Hit
from ragmesh.validation import COLLECTION_NAME, MAX_COLLECTIONS, shown
from services.gateway import direct_search
from services.gateway.api.auth import IDENTITY_SCOPE_KEY
from services.gateway.api.catalog import collection_line
from services.gateway.api.chunks import ChunkId, chunk_json
from services.gateway.api.documents import Collection, document_line
from services.gateway.api.paging import Limit, Offset
from services.gateway.context import label
from services.gateway.library import Library
from services.gateway.notes_contract import notes_answer, notes_json
from services.gateway.pipeline import AskPipeline
from services.gateway.request import AskRequest, Dated, Declared
from services.gateway.whole_answer import whole_answer, whole_json

log = logging.getLogger(__name__)

# Tool -> {its argument: the AskRequest field it is}: every Ask field `ask` takes (AskRequest itself),
# and the filters `search` takes (its `query` is the question).
ASK_FIELDS: dict[str, dict[str, str]] = {
    "ask": {name: name for name in AskRequest.model_fields},
    "search": {"query": "question", "start_date": "start_date", "end_date": "end_date",
               "selected_funds": "selected_funds", "document_ids": "document_ids", "top_k": "top_k"},
}


def _of_ask(name: str, tool: str, **own: Any) -> type[Declared]:
    """A tool's arguments: those ASK_FIELDS names, as AskRequest declares them, and `own`'s."""
    fields = AskRequest.model_fields
    taken = {arg: (fields[f].annotation, fields[f]) for arg, f in ASK_FIELDS[tool].items()}
    return create_model(name, __base__=Dated, **taken, **own)


SearchArguments = _of_ask("SearchArguments", "search", collections=(
    list[Annotated[str, Field(pattern=COLLECTION_NAME)]],
    Field(default_factory=list, max_length=MAX_COLLECTIONS, description=(
        "Collections to search (list_collections); none: every collection of the caller's tenant"))))
ChunkArguments = create_model("ChunkArguments", __base__=Declared, chunk_id=(ChunkId, ...))
DocumentsArguments = create_model("DocumentsArguments", __base__=Declared, collection=(
    Collection | None, Field(None, description="One collection's documents; none: every collection's")),
    limit=(Limit, DEFAULT_PAGE), offset=(Offset, 0))
NoArguments = create_model("NoArguments", __base__=Declared)

# Tool -> the declaration its arguments are checked by (AskRequest: as POST /api/chat/ask checks them).
TOOL_ARGUMENTS: dict[str, type[BaseModel]] = {
    "search": SearchArguments, "ask": AskRequest, "get_chunk": ChunkArguments,
    "list_documents": DocumentsArguments, "list_collections": NoArguments,
}
DESCRIPTIONS = {
    "search": "Search the caller's documents, meeting notes and factsheets: the best passages for a query, each with "
              "its chunk id, document, text, score and how it ranked (dense and keyword ranks and scores, the fused "
              "score, boosts). Optional filters: collections, dates, funds, document ids, top_k.",
    "ask": "Ask a question: an answer from the caller's sources with [n] citations. Nothing is stored unless a "
           "conversation_id of the caller's is given; conversation_history carries earlier turns the client holds.",
    "get_chunk": "One chunk by its chunk_id (from search hits or citations): its text, its parent's text and its "
                 "document.",
    "list_documents": "The documents the caller may read (one collection's or all), most recently written first, "
                      "paged with limit and offset.",
    "list_collections": "The caller's tenant's collections with their document and chunk counts and access rules.",
}
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


def hit_json(h: Hit) -> dict[str, Any]:
    """A search hit with its explanation: each list's rank and score, the fused score and the boosts."""
    c = h.chunk
    return {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "collection": c.collection, "title": label(c),
            "date": c.date, "text": c.text, "score": h.score,
            "explanation": {"dense_rank": h.dense_rank, "dense_score": h.dense_score, "sparse_rank": h.sparse_rank,
                            "sparse_score": h.sparse_score, "fused_score": h.fused_score, "boosts": h.boosts}}


@dataclass(frozen=True)
class McpEndpoint:
    """The ASGI app serving /mcp, and the context its session manager runs in (the bridge's lifespan)."""

    app: ASGIApp
    running: Callable[[], AbstractAsyncContextManager[None]]


def mcp_endpoint(pipeline: AskPipeline, library: Library, retriever: Callable[[], RetrieverClient],
                 max_body_bytes: int) -> McpEndpoint:
    """`retriever` returns the gateway's client (made once its event loop runs)."""

    async def search(who: Identity, a: Any) -> dict:
        ask = AskRequest.checked({f: getattr(a, arg) for arg, f in ASK_FIELDS["search"].items()}).to_input()
        ask.tenant, ask.user_id = who.tenant, who.user
        return {"hits": [hit_json(h) for h in await direct_search.search(retriever(), ask, a.collections)]}

    async def ask(who: Identity, a: AskRequest) -> dict:
        asked = a.to_input()
        asked.held = asked.held or not asked.conversation_id  # nothing stored unless the caller names its conversation
        prepared = await pipeline.prepare(asked, who)
        whole = await whole_answer(pipeline, prepared)
        if asked.notes_contract:
            return notes_json(notes_answer(whole))
        answer = whole_json(whole)
        if asked.held:
            del answer["conversation_id"]  # made up for this answer alone: nothing can be asked in it
        return answer

    async def get_chunk(who: Identity, a: Any) -> dict:
        return chunk_json(await library.chunk(who, a.chunk_id))

    async def list_documents(who: Identity, a: Any) -> dict:
        found = await library.documents(who, a.collection or "", a.limit, a.offset)
        return {"documents": [document_line(e) for e in found.items], "next_offset": found.next_offset}

    async def list_collections(who: Identity, a: Any) -> dict:
        return {"collections": [collection_line(c) for c in await library.collections(who)]}

    tools: dict[str, Callable[[Identity, Any], Awaitable[dict]]] = {
        "search": search, "ask": ask, "get_chunk": get_chunk, "list_documents": list_documents,
        "list_collections": list_collections}
    listed = ListToolsResult(tools=[
        Tool(name=name, description=DESCRIPTIONS[name], input_schema=TOOL_ARGUMENTS[name].model_json_schema(),
             annotations=READ_ONLY if name != "ask" else None)
        for name in tools])

    async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
        return listed

    async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
        run = tools.get(params.name)
        if run is None:
            raise MCPError(INVALID_PARAMS, f"name: unknown tool {shown(params.name)}; the tools are "
                                           f"{', '.join(tools)}")
        try:
            who = _caller(ctx)
            found = await run(who, TOOL_ARGUMENTS[params.name].checked(params.arguments or {}))
        except RagmeshError as exc:  # a bad argument, something not found, a limit: the caller's to read
            return _tool_error(f"{exc.code}: {exc}")
        except Exception:  # a fault of ours: the request id to quote, the details in the log only
            log.exception("mcp tool failed", extra={"tool": params.name})
            return _tool_error(f"INTERNAL: internal error (request id {request_id_var.get()})")
        return CallToolResult(content=[TextContent(text=json.dumps(found, ensure_ascii=False))],
                              structured_content=found)

    server: Server = Server("ragmesh", instructions=(
        "ragmesh answers from the caller's meeting notes, factsheets and documents, with citations. search finds "
        "passages; ask answers a question; get_chunk opens a cited passage."),
        on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(server, json_response=True, stateless=True,
                                           max_request_body_size=max_body_bytes)
    return McpEndpoint(_EndsWithItsClient(StreamableHTTPASGIApp(manager)), manager.run)


class _EndsWithItsClient:
    """An ASGI app whose work for a request is cancelled when the client goes (an `ask` stops
    generating, and its request slot is freed): the body arrives whole (AdmissionGuard read it), so
    what comes after it on the connection can only be its end, watched for while the request is served."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, gone = [await receive()], anyio.Event()

        async def replayed() -> Message:
            if body:
                return body.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async with anyio.create_task_group() as watching:
            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone.set()
                watching.cancel_scope.cancel()

            watching.start_soon(watch)
            await self.app(scope, replayed, send)
            watching.cancel_scope.cancel()


def _caller(ctx: ServerRequestContext) -> Identity:
    """Who sent the request: AdmissionGuard's identity, from its bearer credential. The internal
    services are called as this caller from here on."""
    who = None if ctx.request is None else ctx.request.scope.get(IDENTITY_SCOPE_KEY)
    if who is None:  # only past the guards, which refuse a request without a credential
        raise Unauthenticated("missing credential: send 'authorization: Bearer <API key or token>'")
    identity_var.set(who)
    return who


def _tool_error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=message)], is_error=True)
