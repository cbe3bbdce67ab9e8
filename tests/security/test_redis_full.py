"""Redis full under `noeviction` (the manifests' policy), as a tenant filling it would leave it: a real
redis-server past its `maxmemory` refuses every write (OOM command not allowed). The gateway answers
on: a question is answered (no 500), its scope entry is not written (the follow-up searches again),
the rate limit holds (its tiny window still written, or counted by the replica when refused: fails open
to a per-replica limit, as docs/operations.md says), a conversation is still deleted (it used to be 503:
Redis refuses every command queued in a MULTI while full), and a log line and a metric say Redis is full."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_client

from ragmesh import metrics
from ragmesh.serving import ServiceHost
from tests.auth import headers
from tests.conftest import answer_of, one, sse
from tests.redis_server import RedisServer
from tests.stack import HOST, Stack

RATE_LIMIT = 5
KESTREL = "What did Kestrel do with its Brazil exposure?"
FOLLOW_UP = "What did Kestrel say about the Brazil exposure cut?"


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server with 2 MB of room past what it holds, filled until it refuses a write; then its
    `maxmemory` set 1 MB below what it holds, so a write is refused however the server's own buffers
    come and go (just at the limit, one that frees a little lets a small write in)."""
    server = RedisServer(tmp_path).start()
    client = redis_client.Redis(port=server.port)
    try:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 2 * 1024 * 1024)
        with pytest.raises(redis_client.exceptions.OutOfMemoryError):
            for i in range(1000):
                client.set(f"filler:{i}", b"x" * 256 * 1024)
        client.config_set("maxmemory", client.info("memory")["used_memory"] - 1024 * 1024)
        yield server
    finally:
        client.close()
        server.kill()


def refused_full() -> float:
    return metrics.REGISTRY.get_sample_value("ragmesh_shared_state_refused_total", {"reason": "full"}) or 0.0


def test_with_redis_full_asks_are_answered_and_its_refusals_are_said(stack: Stack, full_redis: RedisServer,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    gateway: ServiceHost = stack.start_variant("gateway", redis_url=full_redis.url, rate_limit_per_minute=RATE_LIMIT)
    url, user = f"http://{HOST}:{gateway.app.http_port}", headers(stack.key("redisfull", "asker"))
    refused_before = refused_full()
    with caplog.at_level(logging.WARNING, logger="services.gateway.shared_state.redis_state"):
        events = sse(url + "/api/chat/ask/stream", {"question": KESTREL}, user)
        first = one(events, "strategy")
        assert events[-1].get("done") and answer_of(events), events[-3:]
        assert first["retrieval"] == "RAG_NEW_QUERY", first
        conversation = first["conversation_id"]
        follow_up = one(sse(url + "/api/chat/ask/stream", {"question": FOLLOW_UP, "conversation_id": conversation},
                            user), "strategy")
        assert follow_up["retrieval"] != "RAG_REUSE" and not follow_up["cache_hit"], follow_up  # not written
        codes = [httpx.post(url + "/api/chat/ask", json={"question": "hello"}, headers=user, timeout=60).status_code
                 for _ in range(RATE_LIMIT - 1)]
        assert codes == [200] * (RATE_LIMIT - 2) + [429], codes
        deleted = httpx.delete(f"{url}/api/conversations/{conversation}", headers=user, timeout=30)
        assert deleted.status_code == 200, deleted.text  # deletes free memory: Redis takes them
    full = [r for r in caplog.records if r.getMessage() == "shared state full"]
    assert len(full) == 1, [r.getMessage() for r in caplog.records]  # said once, not at every refused write
    assert "maxmemory" in full[0].__dict__["error"], full[0].__dict__
    assert refused_full() > refused_before
    kept = sorted(k.decode() for k in redis_client.Redis(port=full_redis.port).scan_iter("ragmesh:*"))
    assert not [k for k in kept if k.startswith(("ragmesh:scope", "ragmesh:sizes"))], kept
