"""Held streams, tried as an attacker would: one tenant opens client streams (Gateway.Ingest,
Retriever.Ingest, /api/documents uploads) and sends nothing, to hold every admission slot of a
service. Each used to hold its slot for up to 600 s, and the slots were shared by all tenants: 260
idle Retriever.Ingest streams made every ask fail. Now a stream that sends nothing for
STREAM_IDLE_TIMEOUT_S ends with DEADLINE_EXCEEDED and frees its slot, and a tenant holds at most
TENANT_CALL_SHARE of a service's slots (a user USER_CALL_SHARE; its client streams TENANT_STREAM_SHARE),
so another tenant's ask and upload go through while the first holds all it may."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh.admission import Admission
from ragmesh.serving import ServiceHost
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.stack import HOST, Stack

OTHER = "otherco"  # each test's holder is a tenant of its own: streams of one end after it
COLLECTION = "held_streams"
IDLE_S = 0.5  # the test services' STREAM_IDLE_TIMEOUT_S
RECEIVING = 4096  # MB: room to receive 80 files at once, so the shares of slots are what stops the holder
# (a tenant's share of receiving gRPC files, one at a time by default: tests/security/test_upload_receive.py)


@dataclass
class Held:
    """One stream opened by the holder: admitted (holding a slot) or refused (its code, text, retry-after)."""

    admitted: bool
    code: str = ""
    message: str = ""
    retry_after: str = ""


class Holder:
    """Opens idle streams, keeps them until `release()`."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.cleanup = ExitStack()

    def idle(self) -> Iterator[retriever_pb2.Document]:
        """A request stream that sends nothing until released (then ends)."""
        self.stop.wait(60)
        yield from ()

    def grpc_stream(self, admission: Admission, method: Callable) -> Held:
        """Opens one idle Ingest stream; waits until it holds a slot or is refused."""
        before = admission.in_flight
        call = method(self.idle(), timeout=60)
        self.cleanup.callback(call.cancel)
        while admission.in_flight == before and not call.done():
            time.sleep(0.005)
        if not call.done():
            return Held(True)
        trailers = dict(call.trailing_metadata() or ())
        return Held(False, call.code().name, call.details(), trailers.get("retry-after", ""))

    def http_upload(self, admission: Admission, port: int, key: str) -> Held:
        """Opens one upload whose body never comes; waits until it holds a slot or is refused."""
        before = admission.in_flight
        sock = socket.create_connection((HOST, port), timeout=30)
        self.cleanup.callback(sock.close)
        sock.sendall(f"POST /api/documents HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode())
        sock.settimeout(0.005)
        data = b""
        while admission.in_flight == before:
            try:
                data += sock.recv(65536)
            except TimeoutError:
                continue
            if b"\r\n\r\n" in data:
                head, _, body = data.partition(b"\r\n\r\n")
                status = head.split(b" ", 2)[1].decode()
                retry = next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                              if line.lower().startswith(b"retry-after:")), "")
                return Held(False, status, body.decode(), retry)
        return Held(True)

    def ingest(self, address: str, metadata, service: str) -> Callable:
        """The Ingest method of `service` at `address`, on a channel of its own sending `metadata`."""
        ch = self.cleanup.enter_context(channel(address, metadata))
        stub = gateway_pb2_grpc.GatewayStub if service == "gateway" else retriever_pb2_grpc.RetrieverStub
        return stub(ch).Ingest

    def release(self) -> None:
        self.stop.set()
        self.cleanup.close()


@pytest.fixture
def holder() -> Iterator[Holder]:
    held = Holder()
    try:
        yield held
    finally:
        held.release()


def settle(admission: Admission, within_s: float = 5) -> int:
    """The calls in flight once those ending (a previous test's) are done."""
    deadline = time.monotonic() + within_s
    while admission.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return admission.in_flight


def other_tenant_works(stack: Stack, url: str, gateway_address: str) -> None:
    """The other tenant's ask (HTTP and gRPC) and upload (HTTP) succeed."""
    key = stack.key(OTHER, "other-admin", "admin")
    asked = httpx.post(url + "/api/chat/ask", json={"question": "What is the revenue?"}, headers=headers(key),
                       timeout=60)
    assert asked.status_code == 200, asked.text[:300]
    uploaded = httpx.post(url + "/api/documents", headers=headers(key), timeout=60, json={
        "collection": COLLECTION, "documents": [{"doc_id": f"note-{time.monotonic_ns()}", "text": "Okapi notes."}]})
    assert uploaded.status_code == 200 and '"INDEXED"' in uploaded.text, uploaded.text[:300]
    with channel(gateway_address, bearer(key)) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(question="What is the revenue?"),
                                                           timeout=60))
    assert events, "the other tenant's gRPC ask answered nothing"


def assert_share_refusal(held: Held, grpc_code: bool, share: str) -> None:
    assert not held.admitted
    assert held.code == ("RESOURCE_EXHAUSTED" if grpc_code else "429"), held
    assert share in held.message and int(held.retry_after) >= 1, held


@pytest.mark.parametrize("share", ["TENANT_STREAM_SHARE", "TENANT_CALL_SHARE"])
def test_a_tenant_holding_idle_streams_at_its_share_leaves_the_gateway_to_others(stack: Stack, holder: Holder,
                                                                                share: str) -> None:
    """gRPC Ingest streams and HTTP uploads of the holder's users, until the gateway refuses the
    tenant: at its streams' share (an eighth of 16 slots; its asks still find room), or without one
    at its share of the calls (a quarter), never every slot."""
    tenant = f"holdco-gateway-{share}"
    streams = {} if share == "TENANT_STREAM_SHARE" else {"tenant_stream_share": 0}
    gateway: ServiceHost = stack.start_variant("gateway", max_concurrent_calls=16,
                                               upload_memory_per_tenant_mb=RECEIVING, **streams)
    admission, port = gateway.app.admission, gateway.app.http_port
    keys = [stack.key(tenant, f"holder-{i}", "admin") for i in range(8)]
    refused: Held | None = None
    for attempt in range(admission.limit + 1):
        key = keys[attempt // 2 % len(keys)]  # two streams a user: within the user's share (2 of 16)
        if attempt % 2:
            held = holder.http_upload(admission, port, key)
        else:
            held = holder.grpc_stream(admission, holder.ingest(gateway.address, bearer(key), "gateway"))
        if not held.admitted:
            refused = held
            break
    assert refused is not None and admission.in_flight < admission.limit, admission.in_flight
    by_grpc = not refused.code.isdigit()
    assert_share_refusal(refused, by_grpc, share)
    other = keys[-1]  # the other kind of call is refused too
    if by_grpc:
        assert_share_refusal(holder.http_upload(admission, port, other), False, share)
    else:
        assert_share_refusal(holder.grpc_stream(admission, holder.ingest(
            gateway.address, bearer(other), "gateway")), True, share)
    if not streams:
        own = httpx.post(f"http://{HOST}:{port}/api/chat/ask", json={"question": "What is the revenue?"},
                         headers=headers(other), timeout=60)
        assert own.status_code == 200, own.text[:300]
    other_tenant_works(stack, f"http://{HOST}:{port}", gateway.address)


def test_a_tenant_holding_idle_retriever_streams_at_its_share_leaves_asks_to_others(stack: Stack,
                                                                                   holder: Holder) -> None:
    """The service credential acting for the holder's users (as a gateway would): the retriever
    counts those calls against the holder, which stops at its streams' share of the 256 slots."""
    tenant = "holdco-retriever"
    retriever: ServiceHost = stack.hosts["retriever"]
    admission = retriever.admission
    settle(admission)
    refused: Held | None = None
    for attempt in range(admission.limit + 1):
        metadata = stack.service_metadata(tenant, f"holder-{attempt // 16}")  # 16 a user: within its share
        held = holder.grpc_stream(admission, holder.ingest(retriever.address, metadata, "retriever"))
        if not held.admitted:
            refused = held
            break
    assert refused is not None and admission.in_flight < admission.limit, admission.in_flight
    assert_share_refusal(refused, True, "TENANT_STREAM_SHARE")
    other_tenant_works(stack, stack.http_url, stack.address("gateway"))


@pytest.mark.parametrize("service", ["gateway", "retriever"])
def test_an_idle_stream_ends_with_deadline_exceeded_and_frees_its_slot(stack: Stack, holder: Holder,
                                                                       service: str) -> None:
    tenant = f"holdco-idle-{service}"
    host: ServiceHost = stack.start_variant(service, stream_idle_timeout_s=IDLE_S)
    metadata = bearer(stack.key(tenant, "idler", "admin"))
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as ended:
        list(holder.ingest(host.address, metadata, service)(holder.idle(), timeout=20))
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, ended.value
    assert "STREAM_IDLE_TIMEOUT_S" in ended.value.details() and time.monotonic() - started < 5
    for admission in (host.admission, stack.hosts["retriever"].admission):  # the gateway's call on to it too
        assert settle(admission) == 0


def test_an_idle_upload_body_ends_with_408_and_frees_its_slot(stack: Stack, holder: Holder) -> None:
    gateway: ServiceHost = stack.start_variant("gateway", stream_idle_timeout_s=IDLE_S)
    key = stack.key("holdco-upload", "slow-uploader", "admin")
    started = time.monotonic()
    with socket.create_connection((HOST, gateway.app.http_port), timeout=20) as sock:
        sock.sendall(f"POST /api/documents HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"collection\"".encode())
        data = b""
        while part := sock.recv(65536):
            data += part
    assert data.startswith(b"HTTP/1.1 408") and b"STREAM_IDLE_TIMEOUT_S" in data, data[:300]
    assert time.monotonic() - started < 5 and gateway.admission.in_flight == 0


def test_a_service_with_no_free_slot_says_not_serving_until_one_is_free(stack: Stack, holder: Holder) -> None:
    """Health follows admission: a load balancer sends calls elsewhere (it said SERVING throughout)."""
    gateway: ServiceHost = stack.start_variant("gateway", max_concurrent_calls=4, tenant_call_share=1,
                                               user_call_share=1, tenant_stream_share=1,
                                               upload_memory_per_tenant_mb=RECEIVING)
    key = stack.key("holdco-health", "filler", "admin")

    def health() -> tuple[str, str, int]:
        with grpc.insecure_channel(gateway.address) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        page = httpx.get(f"http://{HOST}:{gateway.app.http_port}/healthz", timeout=10)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(status), page.json()["services"]["gateway"], \
            page.status_code

    for _ in range(4):
        assert holder.grpc_stream(gateway.admission, holder.ingest(gateway.address, bearer(key), "gateway")).admitted
    assert health() == ("NOT_SERVING", "NOT_SERVING", 503)
    holder.release()
    settle(gateway.admission)
    deadline = time.monotonic() + 5
    while health()[0] != "SERVING" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert health() == ("SERVING", "SERVING", 200)
