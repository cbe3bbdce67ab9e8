"""The gateway's planning slots (MAX_CONCURRENT_RETRIEVALS), tried as an attacker would take them: one
tenant's users send questions whose searches hang (here the retriever never answers, as a slow
one would; each is planned until RETRIEVAL_TIMEOUT_S). The 16 slots used to be shared by every
tenant, so one tenant's questions in planning refused everyone's. Now a tenant plans at most
TENANT_CALL_SHARE of them at once (a user USER_CALL_SHARE): past it its questions get 429 naming
the share, and another tenant's question is planned and answered."""
from __future__ import annotations

import socket
import threading
import time

import httpx

from ragmesh.serving import ServiceHost
from tests.auth import headers
from tests.stack import HOST, Stack

SEARCHED = "When did Meridian close to new investors?"  # planned with a search of the retriever
GREETING = "hello"  # planned without one: answered while the retriever hangs
USERS, EACH = 8, 2  # within a user's share (2 of 16): the tenant's share is what stops them


def test_one_tenants_questions_in_planning_leave_planning_slots_to_another_tenant(stack: Stack) -> None:
    hanging = socket.socket()  # takes connections and never answers: every search waits for its deadline
    hanging.bind((HOST, 0))
    hanging.listen(256)
    try:
        gateway: ServiceHost = stack.start_variant("gateway", retriever_addr=f"{HOST}:{hanging.getsockname()[1]}",
                                                   retrieval_timeout_s=8.0, max_concurrent_retrievals=16)
        url, planning = f"http://{HOST}:{gateway.app.http_port}", gateway.app.pipeline.planning
        keys = [stack.key("planco", f"asker-{i}") for i in range(USERS)]
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
                           headers=headers(stack.key("otherco-planning", "asker")))
        for thread in threads:
            thread.join(60)
    finally:
        hanging.close()
    assert other.status_code == 200 and other.json()["answer"], (held, other.status_code, other.text[:300])
    assert held == 4, held  # a quarter of the 16
    refused = [r for r in replies if r.status_code == 429]
    assert len(refused) == len(threads) - held, sorted(r.status_code for r in replies)
    assert all("TENANT_CALL_SHARE" in r.json()["error"]["message"] for r in refused), refused[0].text
    assert int(refused[0].headers["retry-after"]) >= 1
    assert planning.in_flight == 0 and not planning.by_tenant
