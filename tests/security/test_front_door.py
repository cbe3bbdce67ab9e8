"""The gateway's HTTP bridge as an attacker meets it (issue 23): no work before identity, no 500 for
what a client sends, and hardened defaults. Each test is the probe that found the hole."""
from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest

from ragmesh.admission import Admission
from ragmesh.errors import ResourceExhausted, Unauthenticated
from ragmesh.identity import Identity
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.api.auth import Identifier
from tests.auth import channel
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
    """Checks of credentials not yet known to be good (a key lookup in the store) run in a budget of
    their own: past it 429, and the request slots identified callers use are not touched."""

    class SlowStore:
        def __init__(self) -> None:
            self.release = asyncio.Event()

        async def authenticate(self, metadata: dict, certified_peer: bool = False, peer: str = "") -> Identity:
            await self.release.wait()
            raise Unauthenticated("invalid API key (unknown, revoked or expired)")

    async def flood() -> tuple[list[BaseException | Identity], int]:
        auth = SlowStore()
        identifier = Identifier(auth, Admission("credential checks", 4))  # type: ignore[arg-type]
        scope = {"client": ("203.0.113.9", 4711)}
        calls = [asyncio.ensure_future(identifier.identify(scope, {"authorization": f"Bearer {_guess(i)}"}))
                 for i in range(10)]
        await asyncio.sleep(0.01)
        in_flight = identifier.checks.in_flight
        auth.release.set()
        return await asyncio.gather(*calls, return_exceptions=True), in_flight

    outcomes, in_flight = asyncio.run(flood())
    assert in_flight == 4
    assert sum(isinstance(o, ResourceExhausted) for o in outcomes) == 6
    assert sum(isinstance(o, Unauthenticated) for o in outcomes) == 4


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
