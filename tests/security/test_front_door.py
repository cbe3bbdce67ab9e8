"""The gateway's HTTP bridge as an attacker meets it (issue 23): no work before identity, no 500 for
what a client sends, and hardened defaults. Each test is the probe that found the hole."""
from __future__ import annotations

import asyncio
import json
import re
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest

from ragmesh import config
from ragmesh.errors import ResourceExhausted, Unauthenticated
from ragmesh.identity import Identity
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2
from services.gateway.api.auth import Identifier
from tests.auth import bearer, channel
from tests.stack import HOST, Stack

QUESTION = "When did Meridian close to new investors?"
ANONYMOUS = 300  # more than the gateway's request slots (MAX_CONCURRENT_CALLS, 256)


def _guess(n: int) -> str:
    """A well-formed API key that was never issued (so it is looked up, and fails)."""
    return f"rmk_{n:016x}_{'A' * 43}"


def _half_sent(port: int, credential: str = "", path: str = "/api/chat/ask") -> socket.socket:
    """A connection that sends a request's headers and the first bytes of its JSON body, then waits."""
    sock = socket.create_connection((HOST, port), timeout=10)
    auth = f"Authorization: Bearer {credential}\r\n" if credential else ""
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
                  f"{auth}Content-Length: 1000\r\n\r\n" + '{"question": "wh').encode())
    return sock


@contextmanager
def _held(sockets: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield sockets
    finally:
        for s in sockets:
            s.close()


def _answered(sockets: list[socket.socket]) -> list[socket.socket]:
    """The connections the server has written to (or closed) by now."""
    readable, _, _ = select.select(sockets, [], [], 0)
    return readable


def _status(sock: socket.socket, wait_s: float = 15) -> int | None:
    """The status of the response on `sock`; None when the server closed it without one."""
    sock.settimeout(wait_s)
    data = b""
    while b"\r\n" not in data:
        part = sock.recv(4096)
        if not part:
            return None
        data += part
    return int(data.split(b" ", 2)[1])


def test_three_hundred_anonymous_half_sent_requests_do_not_lock_out_identified_callers(stack: Stack) -> None:
    """Headers and a few bytes of a JSON body, no credential, the sockets kept open: each is refused
    with 401 without its body being read or a slot taken, so an identified ask (HTTP and gRPC) is served."""
    gateway = stack.app("gateway")
    with _held([_half_sent(gateway.http_port) for _ in range(ANONYMOUS)]) as anonymous:
        deadline = time.monotonic() + 30  # the server has dealt with every one of them, one way or the other
        while gateway.admission.in_flight + len(_answered(anonymous)) < ANONYMOUS and time.monotonic() < deadline:
            time.sleep(0.05)
        reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers,
                           timeout=120)
        assert reply.status_code == 200, reply.text[:300]
        assert reply.json()["answer"]
        answers = list(gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), stack.metadata)).Ask(
            gateway_pb2.AskRequest(question=QUESTION), timeout=120))
        assert answers
        assert {_status(s) for s in anonymous} == {401}
    assert gateway.admission.in_flight == 0


def test_a_bad_credential_with_a_half_sent_body_is_refused_without_waiting_for_the_body(stack: Stack) -> None:
    gateway = stack.app("gateway")
    with _held([_half_sent(gateway.http_port, _guess(1))]) as (sock,):
        assert _status(sock) == 401
        sock.settimeout(10)
        while sock.recv(4096):  # the rest of the 401, then the server closes the connection
            pass


def test_an_identified_caller_whose_body_trickles_in_is_cut_off_and_its_slot_freed(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", http_body_timeout_s=1.0)
    with _held([_half_sent(gateway.app.http_port, stack.admin_key)]) as (sock,):
        sock.sendall(b"at")  # a trickle, then nothing
        assert _status(sock) == 408
    deadline = time.monotonic() + 10
    while gateway.app.admission.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.app.admission.in_flight == 0


def test_one_identified_caller_trickling_many_bodies_holds_only_a_few_slots(stack: Stack) -> None:
    """A member's key, 300 requests whose bodies never finish: past HTTP_BODIES_PER_USER they are
    refused at once, so the member's colleagues (and the member's own finished requests) are served."""
    gateway = stack.start_variant("gateway", http_bodies_per_user=4)
    port = gateway.app.http_port
    trickler = stack.key("demo", "trickler")
    with _held([_half_sent(port, trickler) for _ in range(ANONYMOUS)]) as held:
        deadline = time.monotonic() + 30
        while len(_answered(held)) < ANONYMOUS - 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gateway.app.admission.in_flight == 4
        reply = httpx.post(f"http://{HOST}:{port}/api/chat/ask", json={"question": QUESTION}, headers=stack.headers,
                           timeout=120)
        assert reply.status_code == 200, reply.text[:300]
        statuses = [_status(s, 0.5) for s in _answered(held)]
        assert statuses == [429] * (ANONYMOUS - 4)


def test_a_connection_that_never_finishes_its_headers_is_closed(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", http_header_timeout_s=1.0)
    sock = socket.create_connection((HOST, gateway.app.http_port), timeout=15)
    with _held([sock]):
        sock.sendall(f"POST /api/chat/ask HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: a".encode())
        sock.settimeout(15)
        assert sock.recv(4096) == b""  # closed by the server, without a response


def test_a_connection_that_sends_nothing_is_closed(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", http_header_timeout_s=1.0)
    sock = socket.create_connection((HOST, gateway.app.http_port), timeout=15)
    with _held([sock]):
        assert sock.recv(4096) == b""


def test_the_credential_checks_have_their_own_small_budget() -> None:
    """Checks of credentials not yet known to be good (a key lookup in a slow store) run in a budget of
    their own, which holds none of the request slots identified callers use: so many at once, so many
    waiting, past that 429."""

    class SlowStore:
        def __init__(self) -> None:
            self.running = 0
            self.release = asyncio.Event()

        async def authenticate(self, metadata: dict, certified_peer: bool = False, peer: str = "") -> Identity:
            self.running += 1
            await self.release.wait()
            raise Unauthenticated("invalid API key (unknown, revoked or expired)")

    async def flood() -> tuple[list[BaseException | Identity], int]:
        store = SlowStore()
        identifier = Identifier(store, 2, 8)  # type: ignore[arg-type]
        scope = {"client": ("203.0.113.9", 4711)}
        calls = [asyncio.ensure_future(identifier.identify(scope, {"authorization": f"Bearer {_guess(i)}"}))
                 for i in range(30)]
        await asyncio.sleep(0.05)
        running = store.running
        store.release.set()
        return await asyncio.gather(*calls, return_exceptions=True), running

    outcomes, running = asyncio.run(flood())
    assert running == 2
    assert sum(isinstance(o, ResourceExhausted) for o in outcomes) == 20
    assert sum(isinstance(o, Unauthenticated) for o in outcomes) == 10


def test_failed_credentials_are_throttled_per_client_address(stack: Stack) -> None:
    """The bridge tells the authenticator who is guessing: past AUTH_FAILURES_PER_MINUTE bad keys from
    one address, its requests are refused (429) before their credential is looked at."""
    gateway = stack.start_variant("gateway", auth_failures_per_minute=3)
    url = f"http://{HOST}:{gateway.app.http_port}/api/meta"
    codes = [httpx.get(url, headers={"authorization": f"Bearer {_guess(i)}"}, timeout=30).status_code
             for i in range(3)]
    assert codes == [401, 401, 401]
    refused = httpx.get(url, headers=stack.headers, timeout=30)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1


def test_a_same_host_guesser_cannot_rotate_forwarded_addresses_past_the_throttle(stack: Stack) -> None:
    """No proxy is trusted unless FORWARDED_ALLOW_IPS names it: a client on the gateway's own host
    that sends a new X-Forwarded-For with each guess is still one address (and cannot name another
    address to lock it out). Behind a proxy that is named, each forwarded client counts on its own."""
    gateway = stack.start_variant("gateway", auth_failures_per_minute=3)
    url = f"http://{HOST}:{gateway.app.http_port}/api/meta"
    codes = [httpx.get(url, headers={"authorization": f"Bearer {_guess(i)}", "x-forwarded-for": f"10.9.0.{i}"},
                       timeout=30).status_code for i in range(3)]
    assert codes == [401, 401, 401]
    refused = httpx.get(url, headers={**stack.headers, "x-forwarded-for": "10.9.0.99"}, timeout=30)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    behind = stack.start_variant("gateway", auth_failures_per_minute=3, forwarded_allow_ips=HOST)
    url = f"http://{HOST}:{behind.app.http_port}/api/meta"
    for i in range(3):
        httpx.get(url, headers={"authorization": f"Bearer {_guess(i)}", "x-forwarded-for": "10.9.0.1"}, timeout=30)
    assert httpx.get(url, headers={**stack.headers, "x-forwarded-for": "10.9.0.1"}, timeout=30).status_code == 429
    assert httpx.get(url, headers={**stack.headers, "x-forwarded-for": "10.9.0.2"}, timeout=30).status_code == 200


# -- what a client sends is never a 500 -------------------------------------------------------------

def _raw(port: int, request: bytes) -> tuple[int, bytes]:
    """A request sent as bytes (httpx would refuse to send some of these headers); its status and body."""
    with socket.create_connection((HOST, port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while part := sock.recv(65536):
            data += part
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize("path", ["/", "/api/meta"])
def test_a_host_header_that_is_not_a_host_is_400(stack: Stack, path: str) -> None:
    port = stack.app("gateway").http_port
    status, body = _raw(port, f"GET {path} HTTP/1.1\r\nHost: [\r\nAuthorization: Bearer {stack.admin_key}\r\n"
                              f"Connection: close\r\n\r\n".encode())
    assert status == 400, body
    assert json.loads(body)["error"]["message"].startswith("host:")


@pytest.mark.parametrize("port", ["-1", "0", "65536", "99999999999", "http", "8o", "+80", "\u0663"])
def test_a_host_header_with_a_port_that_is_not_a_port_is_400(stack: Stack, port: str) -> None:
    status, body = _raw(stack.app("gateway").http_port,  # uvicorn lets each through
                        f"GET /api/meta HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer {stack.admin_key}\r\n"
                        f"Connection: close\r\n\r\n".encode())
    assert status == 400, body
    assert json.loads(body)["error"]["message"].startswith("host:")


def test_an_origin_header_that_is_not_an_origin_is_400(stack: Stack) -> None:
    reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION}, timeout=60,
                       headers={**stack.headers, "origin": "http://["})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith("origin:")


BIG = "9" * 5000  # past Python's int-string limit (4,300 digits)


def test_a_huge_integer_in_json_metadata_is_400_naming_the_field(stack: Stack) -> None:
    for body, field in [(f'{{"collection": "big", "metadata": {{"n": {BIG}}}, "documents": [{{"doc_id": "a", '
                         f'"text": "x"}}]}}', "metadata.n"),
                        (f'{{"collection": "big", "documents": [{{"doc_id": "a", "text": "x", "metadata": '
                         f'{{"n": -{BIG}}}}}]}}', "documents[0].metadata.n")]:
        reply = httpx.post(stack.http_url + "/api/documents", content=body, timeout=60,
                           headers={**stack.headers, "content-type": "application/json"})
        assert reply.status_code == 400, reply.text[:300]
        assert reply.json()["error"]["message"].startswith(field), reply.text[:300]


def test_a_huge_integer_in_multipart_metadata_is_400_naming_the_field(stack: Stack) -> None:
    reply = httpx.post(stack.http_url + "/api/documents", headers=stack.headers, timeout=60,
                       files=[("files", ("a.txt", b"hello", "text/plain"))],
                       data={"collection": "big", "metadata": f'{{"n": {BIG}}}'})
    assert reply.status_code == 400, reply.text[:300]
    assert reply.json()["error"]["message"].startswith("metadata"), reply.text[:300]


def test_any_request_id_is_sanitised_never_a_500(stack: Stack) -> None:
    """On routes that call the services (the id travels in gRPC metadata, which takes only ASCII)."""
    port = stack.app("gateway").http_port
    for request_id in ("café-☕".encode(), b"r" * 5000, b"a b\tc"):
        for request in (b"GET /api/collections HTTP/1.1\r\n", b"GET /api/documents HTTP/1.1\r\n"):
            status, body = _raw(port, request + f"Host: {HOST}\r\nAuthorization: Bearer {stack.admin_key}\r\n"
                                                f"Connection: close\r\n".encode() + b"X-Request-Id: " + request_id
                                + b"\r\n\r\n")
            assert status == 200, (request_id[:20], body[:300])
    reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION}, timeout=120,
                       headers={**stack.headers, "x-request-id": "r" * 5000})
    assert reply.status_code == 200, reply.text[:300]
    assert len(reply.headers["x-request-id"]) <= 64


# -- hardened defaults ------------------------------------------------------------------------------

def test_a_huge_id_is_not_echoed_whole(stack: Stack) -> None:
    huge = "x" * 60_000
    for path in (f"/api/documents/documents/{huge}", f"/api/chunks/{huge}", f"/api/conversations/{huge}"):
        for method in ("GET", "DELETE"):
            reply = httpx.request(method, stack.http_url + path, headers=stack.headers, timeout=60)
            if reply.status_code == 405:
                continue
            assert reply.status_code in (400, 404), reply.text[:300]
            assert len(reply.text) < 500, (method, path[:30], reply.text[:300])


@pytest.mark.parametrize("path", ["/", "/docs"])
def test_the_pages_cannot_be_framed_and_load_nothing_from_elsewhere(stack: Stack, path: str) -> None:
    reply = httpx.get(stack.http_url + path, timeout=30)
    assert reply.status_code == 200
    policy = reply.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy and "unsafe" not in policy
    assert reply.headers["x-frame-options"] == "DENY" and reply.headers["x-content-type-options"] == "nosniff"
    assert "//" not in "".join(re.findall(r'(?:src|href)="([^"]*)"', reply.text)), "no CDN, no other origin"


def test_the_api_page_can_be_turned_off_and_the_document_stays(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", api_docs=False)
    url = f"http://{HOST}:{gateway.app.http_port}"
    assert httpx.get(url + "/docs", timeout=30).status_code == 404
    assert httpx.get(url + "/openapi.json", timeout=30).json()["paths"]


def test_one_key_is_rate_limited_by_default(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment's default (the test stack turns it off): one key cannot ask without bound."""
    monkeypatch.delenv("RATE_LIMIT_PER_MINUTE", raising=False)
    default = config.Settings().rate_limit_per_minute
    assert 0 < default <= 120
    gateway = stack.start_variant("gateway", rate_limit_per_minute=default)
    url = f"http://{HOST}:{gateway.app.http_port}/api/chat/ask"
    key = stack.key("demo", "eager")
    codes = [httpx.post(url, json={"question": "hello"}, headers={"authorization": f"Bearer {key}"},
                        timeout=60).status_code for _ in range(default + 1)]
    assert codes == [200] * default + [429], codes


def test_a_flood_of_uploads_is_rate_limited_like_asks(stack: Stack) -> None:
    """Files refused in milliseconds (a zip bomb, a broken PDF) can be sent again at line rate: uploads,
    over HTTP and Gateway.Ingest, count against the same per-user limit as asks, checked before the
    body is read."""
    gateway = stack.start_variant("gateway", rate_limit_per_minute=3)
    url = f"http://{HOST}:{gateway.app.http_port}/api/documents"
    key = stack.key("floodco", "flooder", "admin")
    body = {"collection": "documents", "documents": [{"doc_id": "x", "text": "not a bomb"}]}
    codes = [httpx.post(url, json=body, headers={"authorization": f"Bearer {key}"}, timeout=60).status_code
             for _ in range(3)]
    assert codes == [200] * 3, codes
    refused = httpx.post(url, json=body, headers={"authorization": f"Bearer {key}"}, timeout=60)
    assert refused.status_code == 429 and "rate limit" in refused.json()["error"]["message"], refused.text
    assert int(refused.headers["retry-after"]) >= 1
    with channel(gateway.address, bearer(key)) as ch:
        with pytest.raises(grpc.RpcError) as over:
            list(gateway_pb2_grpc.GatewayStub(ch).Ingest(iter([retriever_pb2.Document(
                doc_id="y", collection="documents", text="not a bomb")]), timeout=30))
    assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, over.value
