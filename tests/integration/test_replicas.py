"""Two gateway replicas sharing one store and one real Redis (REDIS_URL), calls alternating between
them: a stop on one ends the answer streaming from the other (during content and before any), a
follow-up reuses on one the scope the other searched, one rate window counts both, and with Redis
killed answers still come and say what is degraded. A delete or a revoked share reaches every copy
before the next question: a follow-up on the other replica does not quote the document, and a deleted
conversation's scope entry is gone from Redis, from every replica and from the in-process cache.

What Redis holds is input: poison messages on the pub/sub channels leave a working stop, hostile scope
entries (a vector of another length, metadata as a list, truncated, a decompression bomb) are misses
answered by a new search, and a metadata-heavy ask stores an entry within its byte cap."""
from __future__ import annotations

import asyncio
import json
import secrets
import struct
import zlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import httpx
import numpy as np
import orjson
import pytest
import redis as redis_client

from ragmesh import convert
from ragmesh.access import Access
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.types import Document, GenEvent
from services.gateway.history import STOPPED_MARK
from services.gateway.shared_state import codec
from services.gateway.shared_state.redis_state import (ENDED_CHANNEL, FORGOTTEN_CHANNEL, QUIET_AFTER_FAILURE_S,
                                                       STOP_CHANNEL, _key)
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2
from tests.auth import bearer, channel, headers
from tests.conftest import answer_of, one, sse, wait_for
from tests.redis_server import RedisServer
from tests.stack import DEMO, Stack

T = TypeVar("T")
RATE_LIMIT = 4  # a minute per user, on both replicas
QUESTION = "How did Harborview change its net exposure?"
KESTREL = "What did Kestrel do with its Brazil exposure?"  # a demo meeting note answers it
DOCUMENTS, NOTES = ["Documents"], ["Meeting Notes"]


class Replica:
    def __init__(self, stack: Stack, host) -> None:
        self.host = host
        self.url = f"http://{stack.settings.host}:{host.app.http_port}"

    @property
    def pipeline(self):
        return self.host.app.pipeline


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def replicas(stack: Stack, redis: RedisServer) -> Iterator[tuple[Replica, Replica]]:
    hosts = [stack.start_variant("gateway", redis_url=redis.url, rate_limit_per_minute=RATE_LIMIT) for _ in range(2)]
    yield Replica(stack, hosts[0]), Replica(stack, hosts[1])
    for host in hosts:
        stack.extra.remove(host)
        stack.call(host.stop())


@pytest.fixture
def user(stack: Stack, request: pytest.FixtureRequest) -> dict[str, str]:
    """Headers of a user of its own per test, so each test has a fresh rate window."""
    return headers(stack.key(DEMO, f"replicas-{request.node.name.replace('[', '-').rstrip(']')}"[:60]))


def _stream(replica: Replica, body: dict, user: dict[str, str]) -> tuple[threading.Thread, list[dict]]:
    """Reads an answer's events as they arrive, in a thread."""
    events: list[dict] = []

    def read() -> None:
        with httpx.stream("POST", replica.url + "/api/chat/ask/stream", json=body, headers=user, timeout=30) as resp:
            for line in resp.iter_lines():
                if line:
                    events.append(json.loads(line[len("data: "):]))

    reader = threading.Thread(target=read)
    reader.start()
    return reader, events


def _held_generator(replica: Replica, monkeypatch: pytest.MonkeyPatch, first: str) -> threading.Event:
    """The replica's generator says `first` (nothing if empty) and then nothing until it is stopped."""
    generating = threading.Event()

    async def held(**kwargs):
        generating.set()
        if first:
            yield GenEvent("content", text=first)
        await asyncio.Event().wait()
        yield GenEvent("content", text="never")

    monkeypatch.setattr(replica.pipeline.generator, "generate", held)
    return generating


def test_a_stop_on_one_replica_ends_the_answer_streaming_from_the_other(
        stack: Stack, replicas, user, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = replicas
    _held_generator(a, monkeypatch, "Harborview cut its net exposure [1]. ")
    reader, events = _stream(a, {"question": QUESTION}, user)
    assert wait_for(lambda: any("content" in e for e in events))
    conv = one(events, "strategy")["conversation_id"]
    reply = httpx.post(b.url + "/api/chat/stop", json={"conversation_id": conv}, headers=user, timeout=10)
    assert reply.json() == {"stopped": True}
    messages = httpx.get(f"{b.url}/api/conversations/{conv}", headers=user).json()["messages"]
    assert messages[-1]["content"].endswith(STOPPED_MARK), "the partial answer is stored before the reply"
    reader.join(10)
    assert events[-1]["done"] and events[-1]["stopped"] is True
    assert httpx.post(a.url + "/api/chat/stop", json={"conversation_id": conv}, headers=user).json() == {
        "stopped": False}


def test_a_stop_before_any_content_on_the_other_replica_drops_the_question(
        stack: Stack, replicas, user, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = replicas
    generating = _held_generator(b, monkeypatch, "")
    reader, events = _stream(b, {"question": QUESTION}, user)
    assert generating.wait(20) and wait_for(lambda: any("strategy" in e for e in events))
    conv = one(events, "strategy")["conversation_id"]
    with channel(a.host.address, bearer(user["authorization"].removeprefix("Bearer "))) as grpc_channel:
        reply = gateway_pb2_grpc.GatewayStub(grpc_channel).Stop(gateway_pb2.StopRequest(conversation_id=conv),
                                                                 timeout=10)
    assert reply.stopped, "Gateway.Stop on the other replica"
    assert httpx.get(f"{a.url}/api/conversations/{conv}", headers=user).status_code == 404, \
        "the question, and the conversation it opened, are gone when the reply comes"
    reader.join(10)
    assert events[-1]["done"] and events[-1]["stopped"] is True and not any("content" in e for e in events)


def test_a_follow_up_on_the_other_replica_reuses_the_scope(stack: Stack, replicas, user) -> None:
    a, b = replicas
    first = one(sse(a.url + "/api/chat/ask/stream", {"question": "What did Kestrel do with its Brazil exposure?"},
                    user), "strategy")
    assert first["retrieval"] == "RAG_NEW_QUERY"
    conv = first["conversation_id"]
    follow_up = {"question": "What did Kestrel say about the Brazil exposure cut?", "conversation_id": conv}
    on_b = one(sse(b.url + "/api/chat/ask/stream", follow_up, user), "strategy")
    assert on_b["retrieval"] == "RAG_REUSE" and on_b["cache_hit"], on_b["reason"]
    on_a = one(sse(a.url + "/api/chat/ask/stream", follow_up, user), "strategy")
    assert on_a["retrieval"] == "RAG_REUSE" and on_a["chunks"] == on_b["chunks"]


def test_one_rate_window_counts_the_requests_on_both_replicas(stack: Stack, replicas, user) -> None:
    a, b = replicas
    for i in range(RATE_LIMIT):
        reply = httpx.post((a, b)[i % 2].url + "/api/chat/ask", json={"question": "hello"}, headers=user, timeout=30)
        assert reply.status_code == 200, reply.text
    refused = httpx.post(a.url + "/api/chat/ask", json={"question": "hello"}, headers=user, timeout=30)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0


def test_with_redis_killed_answers_still_come_and_say_what_is_degraded(
        stack: Stack, replicas, user, redis: RedisServer) -> None:
    a, b = replicas
    first = one(sse(a.url + "/api/chat/ask/stream", {"question": QUESTION}, user), "strategy")
    redis.kill()
    try:
        events = sse(b.url + "/api/chat/ask/stream", {"question": QUESTION, "conversation_id":
                                                      first["conversation_id"]}, user)
        strategy = one(events, "strategy")
        assert "shared state unreachable" in strategy["reason"] and "scopes are not reused" in strategy["reason"]
        assert strategy["retrieval"] == "RAG_NEW_QUERY" and events[-1]["done"]
        assert any("content" in e for e in events)
        stop = httpx.post(a.url + "/api/chat/stop", json={"conversation_id": first["conversation_id"]},
                          headers=user, timeout=10)
        assert stop.status_code == 503 and "another gateway replica cannot be reached" in stop.json()["error"]["message"]
    finally:
        redis.start()
    time.sleep(QUIET_AFTER_FAILURE_S)  # Redis is tried again after this
    again = one(sse(a.url + "/api/chat/ask/stream", {"question": QUESTION}, user), "strategy")
    assert "shared state" not in again["reason"], "shared again once Redis is back"


def test_scope_entries_in_redis_expire_with_the_ttl_and_are_bounded_per_tenant(redis: RedisServer) -> None:
    from services.gateway.scope_cache import ScopeEntry
    from services.gateway.shared_state.redis_state import RedisLink, RedisScopes, _key

    async def scenario() -> None:
        link = RedisLink(redis.url, 1.0)
        scopes = RedisScopes(link, ttl_s=900, max_entries=2)
        try:
            for conv in ("a", "b", "c"):
                await scopes.put("bounded", conv, ScopeEntry("k", ["c"], conv, None, [], 0))
                await link.drain()  # written beside the answer: here, before it is read
                await asyncio.create_task(scopes.get("bounded", "a"))  # another request uses it: a goes last
            await scopes.put("neighbour", "x", ScopeEntry("k", ["c"], "x", None, [], 0))
            await link.drain()
            found = [await asyncio.create_task(scopes.get("bounded", c)) for c in ("a", "b", "c")]
            assert [entry is not None for entry in found] == [True, False, True]
            assert (await asyncio.create_task(scopes.get("neighbour", "x"))).question == "x", \
                "one tenant's bound is its own"
            assert 0 < await link.client.pttl(_key("scope", "bounded", "a")) <= 900_000
        finally:
            await link.client.aclose()

    asyncio.run(scenario())


def test_scope_entries_in_redis_are_bounded_per_tenant_in_bytes(redis: RedisServer) -> None:
    from ragmesh.types import Chunk, Hit
    from services.gateway.scope_cache import ScopeEntry
    from services.gateway.shared_state.redis_state import RedisLink, RedisScopes

    def entry(conv: str) -> ScopeEntry:  # ~10 KB stored: hex digits compress to half
        return ScopeEntry("k", ["c"], conv, None, [Hit(Chunk("c", "d", "c", secrets.token_hex(10_000)), 1.0)], 1)

    cap = len(codec.encode(entry("a"))) * 5 // 2  # two entries, not three

    async def scenario() -> None:
        link = RedisLink(redis.url, 1.0)
        scopes = RedisScopes(link, ttl_s=900, max_entries=100, max_bytes=cap)
        try:
            for conv in ("a", "b", "c"):
                await scopes.put("bytes", conv, entry(conv))
                await link.drain()
            found = [await asyncio.create_task(scopes.get("bytes", c)) for c in ("a", "b", "c")]
            assert [e is not None for e in found] == [False, True, True], "the least recently used went"
            sizes = await link.client.hgetall(_key("sizes", "bytes"))
            assert set(sizes) == {b"b", b"c"} and sum(map(int, sizes.values())) <= cap
            await scopes.forget("bytes", "b")
            assert set(await link.client.hgetall(_key("sizes", "bytes"))) == {b"c"}
        finally:
            await link.client.aclose()

    asyncio.run(scenario())


def test_keys_of_another_type_fail_their_call_alone(redis: RedisServer) -> None:
    """A rate window or a scope entry a Redis writer replaced by a list: that window is counted here,
    that entry is a miss, and Redis is not taken for unreachable (other calls go on sharing)."""
    from services.gateway.shared_state.redis_state import RedisLink, RedisScopes, RedisWindows

    async def scenario() -> None:
        link = RedisLink(redis.url, 1.0)
        try:
            await link.client.rpush(_key("rate", "typed", "u"), "x")
            await link.client.rpush(_key("scope", "typed", "c"), "x")
            assert await RedisWindows(link).count("typed", "u", 5, 60) == 0
            assert await RedisScopes(link, 900, 10).get("typed", "c") is None
            assert not link.problem
            assert await RedisWindows(link).count("typed", "v", 5, 60) == 0
            assert await link.client.zcard(_key("rate", "typed", "v")) == 1, "shared as before"
        finally:
            await link.client.aclose()

    asyncio.run(scenario())


def _as_admin(stack: Stack, work: Callable[[RetrieverClient], Awaitable[T]]) -> T:
    """`work` done with a retriever client holding the tenant's admin key."""
    async def go() -> T:
        client = RetrieverClient(stack.address("retriever"), 30, 120, ClientAuth.key(stack.settings, stack.admin_key))
        try:
            return await work(client)
        finally:
            await client.close()

    return stack.call(go())


def _ingest(stack: Stack, doc_id: str, text: str, access: Access, metadata: dict[str, str] | None = None) -> None:
    """The admin stores a document in `documents`, readable as `access` says."""
    async def one_document() -> AsyncIterator[retriever_pb2.Document]:
        message = convert.document_to_proto(Document(doc_id=doc_id, collection="documents", text=text,
                                                      metadata=metadata or {}))
        message.access.CopyFrom(convert.access_to_proto(access))
        yield message

    async def ingest(client: RetrieverClient) -> list[str]:
        return [retriever_pb2.IngestStage.Name(p.stage) async for p in client.ingest(one_document())]

    assert _as_admin(stack, ingest)[-1:] == ["INDEXED"]


def _ask(url: str, question: str, user: dict[str, str], conversation_id: str = "",
         sources: list[str] = DOCUMENTS) -> tuple[dict, str]:
    body = {"question": question, "data_sources": sources} | ({"conversation_id": conversation_id}
                                                             if conversation_id else {})
    events = sse(url + "/api/chat/ask/stream", body, user)
    assert events[-1].get("done"), events
    return one(events, "strategy"), answer_of(events)


def test_a_deleted_document_is_not_quoted_by_a_follow_up_on_the_other_replica(stack: Stack, replicas, user) -> None:
    a, b = (r.url for r in replicas)
    _ingest(stack, "replicas-quarry", "Zephyrine quarry memo. The Zephyrine quarry raised its copper reserve "
            "estimate to 41 million tonnes after the Altamira survey.", Access(tenant=True))
    first, said = _ask(a, "What did the Altamira survey find at the Zephyrine quarry?", user)
    assert first["retrieval"] == "RAG_NEW_QUERY" and "41 million" in said, said
    deleted = httpx.delete(f"{b}/api/documents/documents/replicas-quarry", headers=stack.headers, timeout=30)
    assert deleted.status_code == 200 and deleted.json()["documents"] == 1, deleted.text
    strategy, said = _ask(b, "What did the Altamira survey say about the Zephyrine quarry reserve?", user,
                          first["conversation_id"])
    assert strategy["retrieval"] != "RAG_REUSE" and not strategy["cache_hit"], strategy["reason"]
    assert "the cached sources changed" in strategy["reason"], strategy["reason"]
    assert "41 million" not in said and "Zephyrine quarry raised" not in said, said


def test_a_revoked_share_is_not_quoted_by_a_follow_up_on_the_other_replica(stack: Stack, replicas) -> None:
    a, b = (r.url for r in replicas)
    user = headers(stack.key(DEMO, "replicas-revoked"))
    _ingest(stack, "replicas-lagoon", "Marisol lagoon memo. The Marisol lagoon desalination plant will cost 77 "
            "million euros, the Ostrava consultants estimate.", Access(users=("replicas-revoked",)))
    first, said = _ask(a, "What will the Marisol lagoon desalination plant cost?", user)
    assert "77 million" in said, said
    revoked = Access()  # its owner's (the admin's) alone again
    _as_admin(stack, lambda client: client.set_document_access("documents", "replicas-lagoon", revoked))
    strategy, said = _ask(b, "What did the Ostrava consultants estimate the Marisol lagoon desalination plant "
                             "would cost?", user, first["conversation_id"])
    assert strategy["retrieval"] != "RAG_REUSE" and "the cached sources changed" in strategy["reason"], \
        strategy["reason"]
    assert "77 million" not in said and "Marisol lagoon desalination plant will" not in said, said


def test_a_deleted_conversations_scope_entry_is_gone_from_redis_and_every_replica(
        stack: Stack, replicas, user, redis: RedisServer) -> None:
    a, b = (r.url for r in replicas)
    first, _ = _ask(a, KESTREL, user, sources=NOTES)
    conv, key = first["conversation_id"], _key("scope", DEMO, first["conversation_id"])
    _ask(b, "What did Kestrel say about the Brazil exposure cut?", user, conv, NOTES)  # B reads (and decodes) it
    client = redis_client.Redis.from_url(redis.url)
    try:
        assert wait_for(lambda: client.exists(key) == 1), "the scope entry is written beside the answer"
        assert client.zscore(_key("scopes", DEMO), conv) is not None
        decoded = [host.app.shared.scopes._decoded for host in (r.host for r in replicas)]
        assert all(key in d and d[key][1].hits for d in decoded), "each replica holds the entry, hits and all"
        reply = httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30)
        assert reply.status_code == 200, reply.text
        assert client.exists(key) == 0 and client.zscore(_key("scopes", DEMO), conv) is None, \
            "gone from Redis when the delete answers"
        assert not any(k.decode().endswith(conv) for k in client.scan_iter(match="ragmesh:*"))
        assert wait_for(lambda: not any(key in d for d in decoded)), "and from every replica's decoded copies"
    finally:
        client.close()


def test_a_deleted_conversations_scope_entry_is_gone_from_the_in_process_cache(stack: Stack, user) -> None:
    first, _ = _ask(stack.http_url, KESTREL, user, sources=NOTES)
    cache, conv = stack.app("gateway").pipeline.cache, first["conversation_id"]
    assert stack.call(cache.get(DEMO, conv)).hits
    reply = httpx.delete(f"{stack.http_url}/api/conversations/{conv}", headers=user, timeout=30)
    assert reply.status_code == 200, reply.text
    assert stack.call(cache.get(DEMO, conv)) is None


def test_a_conversation_is_not_deleted_while_its_scope_entry_cannot_be(
        stack: Stack, replicas, user, redis: RedisServer) -> None:
    a, b = (r.url for r in replicas)
    first, _ = _ask(a, KESTREL, user, sources=NOTES)
    conv = first["conversation_id"]
    redis.kill()
    try:
        reply = httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30)
        assert reply.status_code == 503 and "try again" in reply.json()["error"]["message"], reply.text
        assert httpx.get(f"{b}/api/conversations/{conv}", headers=user).status_code == 200, "nothing was deleted"
    finally:
        redis.start()
    time.sleep(QUIET_AFTER_FAILURE_S)  # Redis is tried again after this
    assert httpx.delete(f"{b}/api/conversations/{conv}", headers=user, timeout=30).status_code == 200
    assert httpx.get(f"{a}/api/conversations/{conv}", headers=user).status_code == 404


def test_poison_messages_on_the_channels_leave_a_working_stop(
        stack: Stack, replicas, user, redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis_client.Redis.from_url(redis.url)
    try:
        for channel in (STOP_CHANNEL, ENDED_CHANNEL, FORGOTTEN_CHANNEL):
            for poison in (b"\xff\xfe not UTF-8", b'{"conversation_id": ["x"]}', b"x" * 100_000, b""):
                assert client.publish(channel, poison) == 2, "both replicas listen"
    finally:
        client.close()
    time.sleep(0.3)
    test_a_stop_on_one_replica_ends_the_answer_streaming_from_the_other(stack, replicas, user, monkeypatch)


def test_after_redis_restarts_the_replicas_listen_again(
        stack: Stack, replicas, user, redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    redis.kill()
    redis.start()
    client = redis_client.Redis.from_url(redis.url)
    try:
        assert wait_for(lambda: client.pubsub_numsub(STOP_CHANNEL)[0][1] == 2), "both replicas subscribed again"
    finally:
        client.close()
    time.sleep(QUIET_AFTER_FAILURE_S)  # a replica that saw the failure tries Redis again after this
    test_a_stop_on_one_replica_ends_the_answer_streaming_from_the_other(stack, replicas, user, monkeypatch)


def _tampered(blob: bytes, change: Callable[[list], None]) -> bytes:
    """The entry's bytes with `change` made to its JSON fields, as a Redis writer could."""
    data = zlib.decompress(blob[1:])
    (size,) = struct.unpack_from("<I", data)
    fields = orjson.loads(data[4:4 + size])
    change(fields)
    body = orjson.dumps(fields)
    return codec.FORMAT + zlib.compress(struct.pack("<I", len(body)) + body + data[4 + size:])


def _other_length(blob: bytes) -> bytes:
    entry = codec.decode(blob)
    entry.question_vector = np.ones(3, dtype=np.float32)
    return codec.encode(entry)


def _bomb(_: bytes) -> bytes:
    packer = zlib.compressobj(1)
    return codec.FORMAT + b"".join(packer.compress(bytes(1 << 20)) for _ in range(64)) + packer.flush()


HOSTILE: dict[str, Callable[[bytes], bytes]] = {
    "vector": _other_length,
    "metadata": lambda blob: _tampered(blob, lambda f: f[5][0][0].__setitem__(4, ["fund_name", "Kestrel"])),
    "score": lambda blob: _tampered(blob, lambda f: f[5][0].__setitem__(1, "high")),
    "truncated": lambda blob: blob[:len(blob) // 2],
    "bomb": _bomb,
}


@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_hostile_entry(stack: Stack, replicas, user, redis: RedisServer, hostile: str) -> None:
    """A scope entry rewritten in Redis is a miss on the other replica: searched again, answered."""
    a, b = (r.url for r in replicas)
    first, _ = _ask(a, KESTREL, user, sources=NOTES)
    key = _key("scope", DEMO, first["conversation_id"])
    client = redis_client.Redis.from_url(redis.url)
    try:
        assert wait_for(lambda: client.exists(key) == 1), "the scope entry is written beside the answer"
        client.set(key, HOSTILE[hostile](client.get(key)), keepttl=True)
    finally:
        client.close()
    strategy, said = _ask(b, "What did Kestrel say about the Brazil exposure cut?", user,
                          first["conversation_id"], NOTES)
    assert strategy["retrieval"] == "RAG_NEW_QUERY" and not strategy["cache_hit"], strategy["reason"]
    assert said, "answered from a new search"


def test_a_metadata_heavy_asks_scope_entry_is_within_its_byte_cap(stack: Stack, replicas, user,
                                                                   redis: RedisServer) -> None:
    # the most metadata a document may carry (MAX_METADATA_BYTES): 12 KB a hit, 600 KB for 50 hits uncut
    metadata = {f"field{i:02}": secrets.token_hex(2000) for i in range(3)} | {"fund_name": "Quillmere"}
    text = " ".join(f"Quillmere lighthouse memo part {i}. The Quillmere lighthouse fund bought {i} more "
                    f"turbines for the Skerry wind farm in quarter {i % 4 + 1}." * 6 for i in range(60))
    _ingest(stack, "replicas-heavy", text, Access(tenant=True), metadata)
    body = {"question": "How many turbines did the Quillmere lighthouse fund buy?", "data_sources": DOCUMENTS,
            "top_k": 50}
    events = sse(replicas[0].url + "/api/chat/ask/stream", body, user)
    conv = one(events, "strategy")["conversation_id"]
    client = redis_client.Redis.from_url(redis.url)
    try:
        key = _key("scope", DEMO, conv)
        assert wait_for(lambda: client.exists(key) == 1), "the scope entry is written beside the answer"
        stored = client.strlen(key)
        entry = codec.decode(client.get(key))
        assert len(entry.hits) >= 15 and all(h.chunk.metadata.get("fund_name") == "Quillmere" for h in entry.hits)
        assert stored <= 64 << 10, f"{stored} bytes stored for one ask"
        assert int(client.hget(_key("sizes", DEMO), conv)) == stored, "counted in the tenant's bytes"
    finally:
        client.close()
