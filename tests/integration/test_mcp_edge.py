"""The MCP server at /mcp as an agent meets it, through the `mcp` SDK's own client over streamable HTTP
(both its modes: the initialize handshake, and the per-request protocol it probes for first): the tools
and their input schemas; each tool called by two tenants' keys and by two members of one tenant, each
getting only what it may read; no or a bad bearer refused before any MCP work; bad arguments as tool
errors naming the field; garbage as protocol errors, not 500s; sessions opened and abandoned holding
nothing on the server; and the bridge's own guards (body size, browser origin) in front of /mcp."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from services.gateway.request import AskRequest
from tests.auth import headers
from tests.conftest import one, sse
from tests.stack import Stack

T = TypeVar("T")
TOOLS = {"search", "ask", "get_chunk", "list_documents", "list_collections"}
NOTES = "mcp_notes"
DOCS = "documents"
TEAM_TEXT = "Kestrel policy: the walrus-lantern desk rebalances on the first Monday of each quarter."
MEMO_TEXT = "Osprey memo: the quokka-teapot bonus pool is 23 percent of salary this year."
RIVAL_TEXT = "Kestrel rival: the walrus-lantern desk of another firm rebalances every Friday."
JSON_RPC = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


class Callers:
    """Keys of tenant A (an admin, `ana` and her colleague `ben`) and of tenant B, with A's team
    policy (every member reads it), ana's private memo, and B's note using the same words as A's."""

    def __init__(self, stack: Stack) -> None:
        self.url = stack.http_url + "/mcp"
        self.boss = stack.key("mcp-a", "boss", "admin")
        self.ana = stack.key("mcp-a", "ana")
        self.ben = stack.key("mcp-a", "ben")
        self.rival = stack.key("mcp-b", "chief", "admin")


def _upload(stack: Stack, key: str, body: dict) -> None:
    events = sse(stack.http_url + "/api/documents", body, headers(key))
    assert one(events, "done") is True and events[-2]["stage"] == "INDEXED", events


@pytest.fixture(scope="module")
def callers(stack: Stack) -> Callers:
    c = Callers(stack)
    _upload(stack, c.boss, {"collection": NOTES, "documents": [
        {"doc_id": "policy", "text": TEAM_TEXT, "title": "Kestrel policy"}]})
    _upload(stack, c.ana, {"collection": DOCS, "access": {}, "documents": [
        {"doc_id": "osprey", "text": MEMO_TEXT, "title": "Osprey memo"}]})
    _upload(stack, c.rival, {"collection": NOTES, "documents": [
        {"doc_id": "rival", "text": RIVAL_TEXT, "title": "Kestrel rival"}]})
    return c


@asynccontextmanager
async def connected(url: str, key: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client on streamable HTTP, sending `key` as the bearer credential."""
    async with httpx2.AsyncClient(headers=headers(key) if key else {}, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def as_caller(url: str, key: str, use: Callable[[Client], Awaitable[T]], mode: str = "auto") -> T:
    async def go() -> T:
        async with connected(url, key, mode) as client:
            return await use(client)

    return asyncio.run(go())


def call(url: str, key: str, tool: str, arguments: dict[str, Any], mode: str = "auto") -> CallToolResult:
    return as_caller(url, key, lambda client: client.call_tool(tool, arguments), mode)


def found(result: CallToolResult) -> dict:
    """A tool's result: structured, and the same JSON as its text."""
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def refusal(result: CallToolResult) -> str:
    assert result.is_error and result.structured_content is None, result
    return result.content[0].text


def hits(url: str, key: str, query: str, **filters: Any) -> list[dict]:
    return found(call(url, key, "search", {"query": query, **filters}))["hits"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_tools_are_listed_with_the_declarations_as_their_input_schemas(callers: Callers, mode: str) -> None:
    listed = as_caller(callers.url, callers.ana, lambda client: client.list_tools(), mode)
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == TOOLS and all(t.description for t in tools.values())
    schema = {name: t.input_schema for name, t in tools.items()}
    assert set(schema["ask"]["properties"]) == set(AskRequest.model_fields) and schema["ask"]["required"] == [
        "question"]
    assert set(schema["search"]["properties"]) == {"query", "collections", "start_date", "end_date", "selected_funds",
                                                   "document_ids", "top_k"}
    assert schema["search"]["properties"]["top_k"] == schema["ask"]["properties"]["top_k"]  # one declaration
    assert schema["search"]["properties"]["query"]["maxLength"] == schema["ask"]["properties"]["question"]["maxLength"]
    assert schema["get_chunk"]["required"] == ["chunk_id"]
    assert set(schema["list_documents"]["properties"]) == {"collection", "limit", "offset"}
    assert schema["list_collections"].get("properties", {}) == {}
    assert all(s["type"] == "object" and s["additionalProperties"] is False for s in schema.values())
    # and the tools answer in this mode too
    assert found(call(callers.url, callers.ana, "search", {"query": "walrus-lantern desk"}, mode))["hits"]


def test_search_finds_what_the_caller_may_read_and_explains_each_hit(callers: Callers) -> None:
    url = callers.url
    mine = hits(url, callers.boss, "walrus-lantern desk rebalances")
    assert mine and {h["doc_id"] for h in mine} == {"policy"}  # tenant B's note with the same words: not A's
    hit = mine[0]
    assert hit["collection"] == NOTES and hit["chunk_id"].startswith("mcp-a/") and "Kestrel policy" in hit["text"]
    assert hit["score"] > 0 and set(hit["explanation"]) == {"dense_rank", "dense_score", "sparse_rank",
                                                            "sparse_score", "fused_score", "boosts"}
    assert hit["explanation"]["dense_rank"] >= 1 or hit["explanation"]["sparse_rank"] >= 1
    theirs = hits(url, callers.rival, "walrus-lantern desk rebalances", collections=[NOTES, DOCS])
    assert {h["doc_id"] for h in theirs} == {"rival"} and all(h["chunk_id"].startswith("mcp-b/") for h in theirs)
    # the memo: its owner finds it, her colleague (and the other tenant) do not
    assert [h["doc_id"] for h in hits(url, callers.ana, "quokka-teapot bonus pool")][:1] == ["ana:osprey"]
    for other in (callers.ben, callers.rival):
        assert "ana:osprey" not in {h["doc_id"] for h in hits(url, other, "quokka-teapot bonus pool")}
    # filters: a collection, picked documents, top_k
    assert hits(url, callers.ana, "walrus-lantern desk", collections=[DOCS]) == [] or all(
        h["collection"] == DOCS for h in hits(url, callers.ana, "walrus-lantern desk", collections=[DOCS]))
    assert {h["doc_id"] for h in hits(url, callers.boss, "desk", document_ids=[f"{NOTES}/policy"])} == {"policy"}
    assert hits(url, callers.boss, "desk", document_ids=[f"{NOTES}/no-such-doc"]) == []
    assert hits(url, callers.boss, "walrus-lantern desk", selected_funds=["Nowhere Fund"]) == []
    assert len(hits(url, callers.boss, "desk bonus pool Kestrel", top_k=1)) <= 1
    # the conversation memory is never searched here
    assert hits(url, callers.ana, "quokka-teapot", collections=["conversations"]) == []


def test_get_chunk_opens_only_the_callers_chunks_and_answers_others_as_unknown(callers: Callers) -> None:
    url = callers.url
    memo = hits(url, callers.ana, "quokka-teapot bonus pool")[0]["chunk_id"]
    opened = found(call(url, callers.ana, "get_chunk", {"chunk_id": memo}))
    assert opened["chunk_id"] == memo and "quokka-teapot" in opened["text"] and opened["document"]["title"] == \
        "Osprey memo"
    unknown = memo.replace("osprey", "no-such-memo")
    for other in (callers.ben, callers.rival):
        theirs, none = (refusal(call(url, other, "get_chunk", {"chunk_id": cid})) for cid in (memo, unknown))
        assert theirs.startswith("NOT_FOUND: ") and "not found" in theirs
        assert theirs == none.replace("no-such-memo", "osprey")  # the same words as an unknown id
    policy = hits(url, callers.boss, "walrus-lantern desk")[0]["chunk_id"]
    assert found(call(url, callers.ben, "get_chunk", {"chunk_id": policy}))["doc_id"] == "policy"  # the team's
    assert refusal(call(url, callers.rival, "get_chunk", {"chunk_id": policy})).startswith("NOT_FOUND: ")


def test_documents_and_collections_are_listed_as_the_caller_may_read_them(callers: Callers) -> None:
    url = callers.url

    def listed(key: str, **arguments: Any) -> set[str]:
        return {d["doc_id"] for d in found(call(url, key, "list_documents", arguments))["documents"]}

    assert {"ana:osprey", "policy"} <= listed(callers.ana)
    assert "ana:osprey" not in listed(callers.ben) and "policy" in listed(callers.ben, collection=NOTES)
    assert listed(callers.ana, collection=DOCS) >= {"ana:osprey"} and listed(callers.rival) == {"rival"}
    assert listed(callers.rival, collection=DOCS) == set()
    page = found(call(url, callers.ana, "list_documents", {"limit": 1}))
    assert len(page["documents"]) == 1 and page["next_offset"] == 1
    a = {c["name"]: c for c in found(call(url, callers.boss, "list_collections", {}))["collections"]}
    b = {c["name"]: c for c in found(call(url, callers.rival, "list_collections", {}))["collections"]}
    assert a[NOTES]["documents"] == 1 and set(b) == {NOTES} and b[NOTES]["documents"] == 1
    assert "conversations" not in a and {"members_upload", "default_access"} <= set(a[NOTES])


def test_ask_answers_as_the_caller_with_citations_and_keeps_nothing(callers: Callers, stack: Stack) -> None:
    url, question = callers.url, {"question": "What is the quokka-teapot bonus pool?", "data_sources": ["Documents"]}

    def conversations(key: str) -> list[str]:
        reply = httpx.get(stack.http_url + "/api/conversations", headers=headers(key), timeout=30)
        return [c["conversation_id"] for c in reply.json()["conversations"]]

    kept = conversations(callers.ana)
    answer = found(call(url, callers.ana, "ask", question))
    assert "23 percent" in answer["answer"] and "[1]" in answer["answer"]
    assert [c["doc_id"] for c in answer["citations"]][:1] == ["ana:osprey"] and answer["citations"][0]["chunk_id"]
    assert "conversation_id" not in answer  # held: nothing is stored to continue
    for other in (callers.ben, callers.rival):
        theirs = found(call(url, other, "ask", question))
        assert "23 percent" not in theirs["answer"] and "ana:osprey" not in {c["doc_id"] for c in theirs["citations"]}
    # the notes contract, as POST /api/chat/ask answers it
    notes = found(call(url, callers.ana, "ask", {**question, "format": "notes"}))
    assert notes["citations"] and "[N1]" in notes["answer"]
    assert conversations(callers.ana) == kept
    # a conversation of her own is continued; to her colleague it is as unknown as one that never was
    started = httpx.post(stack.http_url + "/api/chat/ask", json=question, headers=headers(callers.ana), timeout=60)
    conversation = started.json()["conversation_id"]
    followed = found(call(url, callers.ana, "ask", {"question": "And last year?", "conversation_id": conversation}))
    assert followed["conversation_id"] == conversation
    theirs, none = (refusal(call(url, callers.ben, "ask", {"question": "And last year?", "conversation_id": c}))
                    for c in (conversation, "c" * 32))
    assert theirs.startswith("NOT_FOUND: ") and theirs == none.replace("c" * 32, conversation)


def test_bad_arguments_are_tool_errors_naming_the_field(callers: Callers) -> None:
    url, key = callers.url, callers.ana
    bad = {
        ("search", "top_k"): {"query": "x", "top_k": 0},
        ("search", "query"): {"query": " "},
        ("search", "collections[0]"): {"query": "x", "collections": ["../etc"]},
        ("search", "end_date"): {"query": "x", "start_date": "2024-05-01", "end_date": "2024-01-01"},
        ("search", "temperature"): {"query": "x", "temperature": 2},
        ("ask", "question"): {"question": "x" * 2001},
        ("ask", "model"): {"question": "x", "model": "no-such-model"},
        ("ask", "conversation_history"): {"question": "x", "conversation_id": "abc",
                                          "conversation_history": [{"question": "q", "answer": "a"}]},
        ("ask", "data_sources[0]"): {"question": "x", "data_sources": ["Everything"]},
        ("ask", "stream"): {"question": "x", "stream": True},
        ("get_chunk", "chunk_id"): {"chunk_id": ""},
        ("list_documents", "limit"): {"limit": 100_000},
        ("list_documents", "collection"): {"collection": "a/b"},
        ("list_collections", "tenant"): {"tenant": "mcp-b"},
    }

    async def each(client: Client) -> dict[tuple[str, str], str]:
        return {(tool, field): refusal(await client.call_tool(tool, arguments))
                for (tool, field), arguments in bad.items()}

    for (tool, field), message in as_caller(url, key, each).items():
        assert message.startswith(f"INVALID_ARGUMENT: {field}"), (tool, message)

    async def unknown(client: Client) -> None:  # not a tool's error: the protocol's (invalid params)
        with pytest.raises(MCPError, match="unknown tool 'drop_tables'"):
            await client.call_tool("drop_tables", {})

    as_caller(url, key, unknown)
    # another user's or tenant's name in an ask: refused, not acted on
    assert refusal(call(url, key, "ask", {"question": "x", "tenant": "mcp-b"})).startswith("PERMISSION_DENIED")
    # an unknown conversation: as one of another user's would be
    assert refusal(call(url, key, "ask", {"question": "x", "conversation_id": "nope"})).startswith("NOT_FOUND")


@pytest.mark.parametrize("credential", [None, "not-a-key", "rag_0000000000000000000000000000000000000000"])
def test_no_or_a_bad_bearer_is_refused_401_before_any_mcp_work(callers: Callers, credential: str | None) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    sent = {**JSON_RPC, **(headers(credential) if credential else {})}
    for extra in ({}, {"mcp-protocol-version": "2026-07-28"}):
        reply = httpx.post(callers.url, json=initialize, headers={**sent, **extra}, timeout=30)
        assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer", reply.text
        assert reply.json()["error"]["code"] == "UNAUTHENTICATED" and "mcp-session-id" not in reply.headers
    # the SDK's client (both modes): every request it sends is refused
    for mode in ("auto", "legacy"):
        statuses: list[int] = []

        async def seen(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        async def go() -> None:
            async with httpx2.AsyncClient(headers=headers(credential) if credential else {},
                                          event_hooks={"response": [seen]}) as http:
                async with Client(streamable_http_client(callers.url, http_client=http), mode=mode) as client:
                    await client.list_tools()

        with pytest.raises(Exception):
            asyncio.run(go())
        assert statuses and set(statuses) == {401}, (mode, statuses)  # auto: the probe, then initialize


def test_garbage_is_a_protocol_error_not_a_server_error(callers: Callers) -> None:
    sent = {**JSON_RPC, **headers(callers.ana)}
    bodies = [b"{garbage", b"[]", b'{"jsonrpc": "2.0"}', b'{"jsonrpc": "2.0", "id": 1, "method": 7}', b"\xff\xfe",
              b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": 5}}',
              b"[" * 100_000]
    for era in ({}, {"mcp-protocol-version": "2026-07-28"}):
        for body in bodies:
            reply = httpx.post(callers.url, content=body, headers={**sent, **era}, timeout=30)
            # a JSON-RPC error (parse error, invalid request or invalid params): a 400, or a 200 carrying it
            assert reply.status_code in (200, 400), (era, body[:40], reply.status_code, reply.text)
            assert reply.json()["error"]["code"] in (-32700, -32600, -32602), (era, body[:40], reply.text)
    # an unknown method: a JSON-RPC error too
    reply = httpx.post(callers.url, json={"jsonrpc": "2.0", "id": 3, "method": "tables/drop"}, headers=sent,
                       timeout=30)
    assert reply.status_code < 500 and reply.json()["error"]["code"] == -32601, reply.text


def test_the_bridge_guards_stand_in_front_of_mcp(callers: Callers, stack: Stack) -> None:
    sent = {**JSON_RPC, **headers(callers.ana)}
    limit = stack.settings.http_max_body_bytes
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "search", "arguments": {"query": "x" * limit}}})
    reply = httpx.post(callers.url, content=big, headers=sent, timeout=30)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "INVALID_ARGUMENT", reply.text
    page = httpx.post(callers.url, content=b"{}", headers={**sent, "origin": "http://evil.example"}, timeout=30)
    assert page.status_code == 403 and page.json()["error"]["code"] == "PERMISSION_DENIED"
    # no stream to hold open, no session to end: GET and DELETE are 405
    for method in ("GET", "DELETE"):
        assert httpx.request(method, callers.url, headers=sent, timeout=30).status_code == 405


def test_sessions_opened_and_abandoned_hold_nothing_on_the_server(callers: Callers, stack: Stack) -> None:
    """Clients that initialize, call, and go without ending their session (no DELETE): the gateway keeps
    no task, stream or session for any of them."""

    async def tasks() -> int:
        return len(asyncio.all_tasks())

    async def abandon(count: int) -> None:
        for _ in range(count):
            http = httpx2.AsyncClient(headers=headers(callers.ana), timeout=60)
            transport = streamable_http_client(callers.url, http_client=http, terminate_on_close=False)
            async with http, Client(transport, mode="legacy") as client:
                await client.list_tools()

    asyncio.run(abandon(3))
    before = stack.call(tasks())
    asyncio.run(abandon(40))
    assert stack.call(tasks()) <= before + 5


@pytest.mark.parametrize("era", ["handshake", "per-request"])
def test_a_client_that_goes_mid_ask_stops_the_generation(stack: Stack, slow_generation: None, era: str) -> None:
    generator = stack.app("generator").service
    cancelled = generator.cancelled
    params: dict[str, Any] = {"name": "ask", "arguments": {"question": "How did Harborview change its net exposure?"}}
    sent = {**JSON_RPC, **stack.headers}
    if era == "per-request":
        sent |= {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "ask"}
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientCapabilities": {}}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up mid-answer and closes its connection
        httpx.post(stack.http_url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                  "params": params}, headers=sent, timeout=3)
    deadline = time.monotonic() + 15
    while generator.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert generator.cancelled == cancelled + 1, "the generator never saw the cancellation"


def test_a_jwt_is_a_bearer_credential_here_too(callers: Callers, stack: Stack) -> None:
    """A gateway that takes JWTs: the token's user reads what that user may read; an expired one is 401."""
    import jwt

    secret = "s" * 48
    gateway = stack.start_variant("gateway", jwt_secret=secret, jwt_audience="ragmesh")
    url = f"http://127.0.0.1:{gateway.app.http_port}/mcp"
    now = int(time.time())

    def token(user: str, expires: int = 60) -> str:
        return jwt.encode({"tenant": "mcp-a", "sub": user, "aud": "ragmesh", "exp": now + expires}, secret,
                          algorithm="HS256")

    def listed(user: str) -> set[str]:
        return {d["doc_id"] for d in found(call(url, token(user), "list_documents", {}))["documents"]}

    assert "ana:osprey" in listed("ana") and "ana:osprey" not in listed("ben") and "policy" in listed("ben")
    reply = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={**JSON_RPC, **headers(token("ana", -120))}, timeout=30)
    assert reply.status_code == 401 and reply.json()["error"]["code"] == "UNAUTHENTICATED"
