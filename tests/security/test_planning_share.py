"""The gateway's planning slots (MAX_CONCURRENT_RETRIEVALS), tried as an attacker would take them: one
tenant's users send questions whose searches hang (here the retriever never answers, as a slow
one would; each is planned until RETRIEVAL_TIMEOUT_S). The 16 slots used to be shared by every
tenant, so one tenant's questions in planning refused everyone's. Now a tenant plans at most
TENANT_CALL_SHARE of them at once (a user USER_CALL_SHARE): past it its questions get 429 naming
the share, and another tenant's question is planned and answered. While another tenant has a call in
flight at the gateway (an upload, say), a tenant plans at most half its share: asks in a tight loop leave
the cores to that call."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from ragmesh.serving import ServiceHost
from tests.auth import headers
from tests.stack import HOST, Stack

SEARCHED = "When did Meridian close to new investors?"  # planned with a search of the retriever
GREETING = "hello"  # planned without one: answered while the retriever hangs
USERS, EACH = 8, 2  # within a user's share (2 of 16): the tenant's share is what stops them


@contextmanager
def _hanging_gateway(stack: Stack) -> Iterator[ServiceHost]:
    """A gateway whose retriever takes connections and never answers: every search waits for its deadline."""
    hanging = socket.socket()
    hanging.bind((HOST, 0))
    hanging.listen(256)
    try:
        yield stack.start_variant("gateway", retriever_addr=f"{HOST}:{hanging.getsockname()[1]}",
                                  retrieval_timeout_s=8.0, max_concurrent_retrievals=16)
    finally:
        hanging.close()


def _flood(stack: Stack, gateway: ServiceHost, tenant: str) -> tuple[int, list[httpx.Response], httpx.Response]:
    """USERS x EACH searched questions of `tenant` at once: how many were planned at the height of it, the
    replies, and the reply to another tenant's greeting asked meanwhile."""
    url, planning = f"http://{HOST}:{gateway.app.http_port}", gateway.app.pipeline.planning
    keys = [stack.key(tenant, f"asker-{i}") for i in range(USERS)]
    replies: list[httpx.Response] = []

    def ask(key: str) -> None:
        replies.append(httpx.post(url + "/api/chat/ask", json={"question": SEARCHED}, headers=headers(key),
                                  timeout=60))

    threads = [threading.Thread(target=ask, args=(key,)) for key in keys for _ in range(EACH)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 6  # every question either planned (hanging) or refused
    while planning.in_flight + len(replies) < len(threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    held = planning.in_flight
    other = httpx.post(url + "/api/chat/ask", json={"question": GREETING}, timeout=30,
                       headers=headers(stack.key(f"other-{tenant}", "asker")))
    for thread in threads:
        thread.join(60)
    assert len(replies) == len(threads)
    return held, replies, other


def test_one_tenants_questions_in_planning_leave_planning_slots_to_another_tenant(stack: Stack) -> None:
    with _hanging_gateway(stack) as gateway:
        held, replies, other = _flood(stack, gateway, "planco")
    planning = gateway.app.pipeline.planning
    assert other.status_code == 200 and other.json()["answer"], (held, other.status_code, other.text[:300])
    assert held == 4, held  # a quarter of the 16
    refused = [r for r in replies if r.status_code == 429]
    assert len(refused) == len(replies) - held, sorted(r.status_code for r in replies)
    assert all("TENANT_CALL_SHARE" in r.json()["error"]["message"] for r in refused), refused[0].text
    assert int(refused[0].headers["retry-after"]) >= 1
    assert planning.in_flight == 0 and not planning.by_tenant


def test_while_another_tenant_has_a_call_in_flight_a_tenant_plans_half_its_share(stack: Stack) -> None:
    """Another tenant's upload whose body is still coming holds a gateway slot: meanwhile the flooding
    tenant plans 2 questions (half its 4), the rest refused saying why; once the upload ends, its share
    is whole again."""
    with _hanging_gateway(stack) as gateway:
        admission = gateway.app.admission
        upload = socket.create_connection((HOST, gateway.app.http_port))
        upload.sendall(f"POST /api/documents HTTP/1.1\r\nHost: {HOST}:{gateway.app.http_port}\r\n"
                       f"Authorization: Bearer {stack.key('uploadco', 'analyst', role='admin')}\r\n"
                       "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"documents\": [".encode())
        deadline = time.monotonic() + 10
        while "uploadco" not in admission.by_tenant and time.monotonic() < deadline:
            time.sleep(0.01)
        assert admission.others_busy("floodco") and not admission.others_busy("uploadco")
        held, replies, _ = _flood(stack, gateway, "floodco")
        upload.close()
        while "uploadco" in admission.by_tenant and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert not admission.others_busy("floodco")
        alone, _, _ = _flood(stack, gateway, "floodco-alone")
    assert held == 2, held
    refused = [r.json()["error"]["message"] for r in replies if r.status_code == 429]
    assert len(refused) == len(replies) - held and all("while another tenant has work" in m for m in refused), refused
    assert alone == 4, alone  # the other tenant's greeting is answered at once, after the flood is planned
