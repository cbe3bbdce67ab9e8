"""A delete or a revoked share reaches every copy of a document's text before the next question, and a
deleted conversation's cached search results go with it: two gateway replicas on one real Redis, as a
user and an admin would try it (ask on one replica, change the document, follow up on the other)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis as redis_sync

from ragmesh import convert
from ragmesh.access import Access
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.types import Document
from ragmesh.v1 import retriever_pb2
from services.gateway.shared_state.redis_state import _key
from tests.auth import headers
from tests.conftest import answer_of, one, sse
from tests.redis_server import RedisServer
from tests.stack import DEMO, Stack

SOURCES, NOTES = ["Documents"], ["Meeting Notes"]
KESTREL = "What did Kestrel do with its Brazil exposure?"  # a demo meeting note answers it


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def replicas(stack: Stack, redis: RedisServer) -> Iterator[tuple]:
    """Two gateways on the stack's services and one Redis: (host, HTTP base URL) each."""
    hosts = [stack.start_variant("gateway", redis_url=redis.url) for _ in range(2)]
    yield tuple((host, f"http://{stack.settings.host}:{host.app.http_port}") for host in hosts)
    for host in hosts:
        stack.extra.remove(host)
        stack.call(host.stop())


def _ingest(stack: Stack, doc_id: str, text: str, access: Access) -> None:
    """The admin stores a document in `documents` readable as `access` says."""
    async def go() -> None:
        client = RetrieverClient(stack.address("retriever"), 30, 120, ClientAuth.key(stack.settings, stack.admin_key))

        async def one_document():
            message = convert.document_to_proto(Document(doc_id=doc_id, collection="documents", text=text))
            message.access.CopyFrom(convert.access_to_proto(access))
            yield message
        try:
            progress = [p async for p in client.ingest(one_document())]
            assert [retriever_pb2.IngestStage.Name(p.stage) for p in progress][-1:] == ["INDEXED"], progress
        finally:
            await client.close()

    stack.call(go())


def _set_access(stack: Stack, doc_id: str, access: Access) -> None:
    async def go() -> None:
        client = RetrieverClient(stack.address("retriever"), 30, 120, ClientAuth.key(stack.settings, stack.admin_key))
        try:
            await client.set_document_access("documents", doc_id, access)
        finally:
            await client.close()

    stack.call(go())


def _ask(url: str, question: str, user: dict[str, str], conversation_id: str = "",
         sources: list[str] = SOURCES) -> tuple[dict, str]:
    body = {"question": question, "data_sources": sources} | ({"conversation_id": conversation_id}
                                                             if conversation_id else {})
    events = sse(url + "/api/chat/ask/stream", body, user)
    assert events[-1].get("done"), events
    return one(events, "strategy"), answer_of(events)


def _wait_for(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_deleted_document_is_not_quoted_by_a_follow_up_on_the_other_replica(stack: Stack, replicas) -> None:
    (_, a), (_, b) = replicas
    user = headers(stack.key(DEMO, "copies-deleted"))
    _ingest(stack, "copies-quarry", "Zephyrine quarry memo. The Zephyrine quarry raised its copper reserve "
            "estimate to 41 million tonnes after the Altamira survey.", Access(tenant=True))
    first, said = _ask(a, "What did the Altamira survey find at the Zephyrine quarry?", user)
    assert first["retrieval"] == "RAG_NEW_QUERY" and "41 million" in said, said
    deleted = httpx.delete(f"{b}/api/documents/documents/copies-quarry", headers=stack.headers, timeout=30)
    assert deleted.status_code == 200 and deleted.json()["documents"] == 1, deleted.text
    strategy, said = _ask(b, "What did the Altamira survey say about the Zephyrine quarry reserve?", user,
                          first["conversation_id"])
    assert strategy["retrieval"] != "RAG_REUSE" and not strategy["cache_hit"], strategy["reason"]
    assert "the cached sources changed" in strategy["reason"], strategy["reason"]
    assert "41 million" not in said and "Zephyrine quarry raised" not in said, said


def test_a_revoked_share_is_not_quoted_by_a_follow_up_on_the_other_replica(stack: Stack, replicas) -> None:
    (_, a), (_, b) = replicas
    user = headers(stack.key(DEMO, "copies-revoked"))
    _ingest(stack, "copies-lagoon", "Marisol lagoon memo. The Marisol lagoon desalination plant will cost 77 "
            "million euros, the Ostrava consultants estimate.", Access(users=("copies-revoked",)))
    first, said = _ask(a, "What will the Marisol lagoon desalination plant cost?", user)
    assert "77 million" in said, said
    _set_access(stack, "copies-lagoon", Access())  # its owner's (the admin's) alone again
    strategy, said = _ask(b, "What did the Ostrava consultants estimate the Marisol lagoon desalination plant "
                             "would cost?", user, first["conversation_id"])
    assert strategy["retrieval"] != "RAG_REUSE" and "the cached sources changed" in strategy["reason"], \
        strategy["reason"]
    assert "77 million" not in said and "Marisol lagoon desalination plant will" not in said, said


def test_a_deleted_conversations_scope_entry_is_gone_from_redis_and_every_replica(
        stack: Stack, replicas, redis: RedisServer) -> None:
    (host_a, a), (host_b, b) = replicas
    user_name = "copies-conversation"
    user = headers(stack.key(DEMO, user_name))
    first, _ = _ask(a, KESTREL, user, sources=NOTES)
    conv, key = first["conversation_id"], _key("scope", DEMO, first["conversation_id"])
    _ask(b, "What did Kestrel say about the Brazil exposure cut?", user, conv, NOTES)  # B reads (and decodes) it
    client = redis_sync.Redis.from_url(redis.url)
    try:
        assert _wait_for(lambda: client.exists(key) == 1), "the scope entry is written beside the answer"
        assert client.zscore(_key("scopes", DEMO), conv) is not None
        decoded = [host.app.shared.scopes._decoded for host in (host_a, host_b)]
        assert all(key in d and d[key][1].hits for d in decoded), "each replica holds the entry, hits and all"
        reply = httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30)
        assert reply.status_code == 200, reply.text
        assert client.exists(key) == 0 and client.zscore(_key("scopes", DEMO), conv) is None, \
            "gone from Redis when the delete answers"
        assert not any(k.decode().endswith(conv) for k in client.scan_iter(match="ragmesh:*"))
        assert _wait_for(lambda: not any(key in d for d in decoded)), "and from every replica's decoded copies"
    finally:
        client.close()


def test_a_deleted_conversations_scope_entry_is_gone_from_the_in_process_cache(stack: Stack) -> None:
    user = headers(stack.key(DEMO, "copies-in-process"))
    first, _ = _ask(stack.http_url, KESTREL, user, sources=NOTES)
    cache, conv = stack.app("gateway").pipeline.cache, first["conversation_id"]
    assert stack.call(cache.get(DEMO, conv)).hits
    reply = httpx.delete(f"{stack.http_url}/api/conversations/{conv}", headers=user, timeout=30)
    assert reply.status_code == 200, reply.text
    assert stack.call(cache.get(DEMO, conv)) is None


def test_a_conversation_is_not_deleted_while_its_scope_entry_cannot_be(
        stack: Stack, replicas, redis: RedisServer) -> None:
    (_, a), (_, b) = replicas
    user = headers(stack.key(DEMO, "copies-redis-away"))
    first, _ = _ask(a, KESTREL, user, sources=NOTES)
    conv = first["conversation_id"]
    redis.kill()
    try:
        reply = httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30)
        assert reply.status_code == 503 and "try again" in reply.json()["error"]["message"], reply.text
        assert httpx.get(f"{b}/api/conversations/{conv}", headers=user).status_code == 200, "nothing was deleted"
    finally:
        redis.start()
    time.sleep(1.0)  # QUIET_AFTER_FAILURE_S: Redis is tried again after this
    assert httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30).status_code == 200
    assert httpx.get(f"{a}/api/conversations/{conv}", headers=user).status_code == 404
