"""Two gateway replicas sharing one store and one real Redis (REDIS_URL), calls alternating between
them: a stop on one ends the answer streaming from the other (during content and before any), a
follow-up reuses on one the scope the other searched, one rate window counts both, and with Redis
killed answers still come and say what is degraded."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from ragmesh.types import GenEvent
from services.gateway.history import STOPPED_MARK
from services.gateway.shared_state.redis_state import QUIET_AFTER_FAILURE_S
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import one, sse
from tests.redis_server import RedisServer
from tests.stack import DEMO, Stack

RATE_LIMIT = 4  # a minute per user, on both replicas
QUESTION = "How did Harborview change its net exposure?"


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
    return headers(stack.key(DEMO, f"replicas-{request.node.name}"[:60]))


def _wait_for(check: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


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
    assert _wait_for(lambda: any("content" in e for e in events))
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
    assert generating.wait(20) and _wait_for(lambda: any("strategy" in e for e in events))
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
