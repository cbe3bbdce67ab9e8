"""The gRPC edge, tried as an attacker would: no work before identity, and bounded messages.

Without a credential, a message of any size or shape is refused UNAUTHENTICATED before it is read
(60 MB Search messages used to be received and parsed first: the retriever grew from 357 to 986 MB
and kept 896); with one, garbage is INVALID_ARGUMENT in one log line (it was UNKNOWN with a
traceback per request), and a message over its method's limit is refused naming the limit. Failed
credentials are counted per client address, and a caller's request id is never carried on as sent."""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh import clients
from ragmesh.request_context import request_id_var
from ragmesh.message_limits import MiB
from ragmesh.serving import ServiceApp, ServiceHost
from ragmesh.v1 import (
    common_pb2, embedder_pb2, embedder_pb2_grpc, gateway_pb2, generator_pb2, retriever_pb2, retriever_pb2_grpc,
)
from tests.auth import bearer
from tests.fakes.serving import settings
from tests.security import processes
from tests.stack import Stack

UNARY_LIMIT = 4 * MiB  # GRPC_UNARY_MAX_BYTES's default
GARBAGE = b"\xff\xff\xff\xff" * 8  # no protobuf message starts like this (field 0 is never valid)

# One method of each kind on every service: (service, full method name, streams requests).
METHODS = [
    ("embedder", "/ragmesh.v1.Embedder/Embed", False),
    ("retriever", "/ragmesh.v1.Retriever/Search", False),
    ("retriever", "/ragmesh.v1.Retriever/Ingest", True),
    ("retriever", "/ragmesh.v1.Retriever/Upsert", True),
    ("generator", "/ragmesh.v1.Generator/Generate", False),
    ("gateway", "/ragmesh.v1.Gateway/Ask", False),
    ("gateway", "/ragmesh.v1.Gateway/Ingest", True),
]


def raw_call(address: str, method: str, message: bytes, metadata=(), streams: bool = False, timeout: float = 60):
    """(code, details) of one call carrying `message` as it is on the wire: nothing serialized by us."""
    with grpc.insecure_channel(address) as channel:
        try:
            if streams:  # a client stream: the one message, then the end of the stream
                for _ in channel.stream_stream(method)(iter([message]), metadata=metadata, timeout=timeout):
                    pass
            else:
                answers = method.endswith(("/Generate", "/Ask"))  # a stream of events
                call = channel.unary_stream(method) if answers else channel.unary_unary(method)
                reply = call(message, metadata=metadata, timeout=timeout)
                if not isinstance(reply, bytes):
                    list(reply)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""


@pytest.mark.parametrize("service,method,streams", METHODS)
def test_anonymous_garbage_and_big_messages_are_refused_before_they_are_read(stack: Stack, service: str, method: str,
                                                                           streams: bool) -> None:
    address = stack.address(service)
    for message in (GARBAGE, b"\x0a" + b"\xff" * 9 + b"x" * (6 * MiB)):  # the second: a 6 MB field, cut short
        code, details = raw_call(address, method, message, streams=streams)
        assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, details)
        assert "credential" in details


@pytest.mark.parametrize("service,method,streams", METHODS)
def test_malformed_protobuf_with_a_credential_is_invalid_argument_in_one_log_line(
        stack: Stack, service: str, method: str, streams: bool, caplog: pytest.LogCaptureFixture) -> None:
    metadata = stack.metadata if service == "gateway" else stack.service_metadata()
    caplog.set_level(logging.INFO)
    caplog.clear()
    code, details = raw_call(stack.address(service), method, GARBAGE, metadata, streams)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, details)
    assert details.startswith("request: ") and "malformed protobuf" in details and method.lstrip("/") in details
    logged = [r for r in caplog.records if method in str(getattr(r, "method", "")) or method in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.INFO, [r.getMessage() for r in logged]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged for the client's garbage"


def test_a_message_over_its_methods_limit_is_refused_naming_the_limit(stack: Stack) -> None:
    search = retriever_pb2.SearchRequest(query="x" * (UNARY_LIMIT + 1), collections=["meeting_notes"])
    code, details = raw_call(stack.address("retriever"), "/ragmesh.v1.Retriever/Search", search.SerializeToString(),
                             stack.metadata)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert f"at most {UNARY_LIMIT:,}" in details and "GRPC_UNARY_MAX_BYTES" in details, details
    # A streamed Upsert message is one chunk: 8 MiB at most.
    chunk = common_pb2.Chunk(chunk_id="big#0", doc_id="big", collection="edge", text="y" * (8 * MiB + 1))
    code, details = raw_call(stack.address("retriever"), "/ragmesh.v1.Retriever/Upsert",
                             retriever_pb2.UpsertRequest(chunk=chunk).SerializeToString(), stack.metadata, streams=True)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and f"at most {8 * MiB:,}" in details, details
    # The embedder and the generator take no message over 4 MiB: gRPC itself refuses it, unread.
    huge = embedder_pb2.EmbedRequest(texts=["z" * (5 * MiB)]).SerializeToString()
    code, details = raw_call(stack.address("embedder"), "/ragmesh.v1.Embedder/Embed", huge, stack.service_metadata())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and str(UNARY_LIMIT) in details, details
    # What the services send each other still goes through: a question with a long prompt.
    prompt = generator_pb2.GenerateRequest(model="extractive", question="What is Kestrel?", prompt="p" * (2 * MiB))
    code, details = raw_call(stack.address("generator"), "/ragmesh.v1.Generator/Generate",
                             prompt.SerializeToString(), stack.service_metadata())
    assert code == grpc.StatusCode.OK, details


# -- one retriever as its own process: its memory ---------------------------------------------------
@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[processes.Service, str]]:
    """(the retriever process, an admin key of tenant edge) on a DATA_DIR of its own."""
    data_dir = tmp_path_factory.mktemp("edge") / "data"
    made = processes.cli(data_dir, "keys", "create", "--tenant", "edge", "--user", "root", "--role", "admin")
    assert made.returncode == 0, made.stderr
    service = processes.start("retriever", data_dir)
    yield service, made.stdout.strip().splitlines()[-1]
    service.stop()


@pytest.mark.slow
def test_eight_anonymous_60_mb_searches_leave_the_retrievers_memory_where_it_was(retriever) -> None:
    service, key = retriever
    before, peak_before = service.memory_kb(), service.memory_kb("VmHWM")
    payload = retriever_pb2.SearchRequest(query="x" * (60 * MiB), collections=["edge"]).SerializeToString()
    outcomes: list[grpc.StatusCode] = []
    answered: list[grpc.StatusCode] = []
    flooding = threading.Event()

    def anonymous() -> None:
        outcomes.append(raw_call(service.address, "/ragmesh.v1.Retriever/Search", payload)[0])

    def tenant() -> None:  # an operator's calls meanwhile
        with grpc.insecure_channel(service.address) as channel:
            stub = retriever_pb2_grpc.RetrieverStub(channel)
            while flooding.is_set() or not answered:
                try:
                    stub.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True), timeout=30,
                                         metadata=bearer(key))
                    answered.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    answered.append(exc.code())

    flooding.set()
    threads = [threading.Thread(target=anonymous) for _ in range(8)]
    watcher = threading.Thread(target=tenant)
    for thread in [watcher, *threads]:
        thread.start()
    for thread in threads:
        thread.join(120)
    flooding.clear()
    watcher.join(60)
    assert outcomes == [grpc.StatusCode.UNAUTHENTICATED] * 8
    assert answered and set(answered) == {grpc.StatusCode.OK}, answered
    after, peak = service.memory_kb(), service.memory_kb("VmHWM")
    # 8 x 60 MB held or parsed would be 480 MB at the very least; a flow-control window each is not.
    assert peak - peak_before < 120_000, f"peak RSS grew {peak - peak_before:,} kB ({peak_before:,} -> {peak:,})"
    assert after - before < 60_000, f"RSS grew {after - before:,} kB and stayed ({before:,} -> {after:,})"
    # With the key, the same message is refused by gRPC itself: no method takes 60 MB.
    code, details = raw_call(service.address, "/ragmesh.v1.Retriever/Search", payload, bearer(key))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)


# -- failed credentials per address; the caller's request id ---------------------------------------
def test_wrong_keys_from_one_address_are_throttled_over_grpc(stack: Stack) -> None:
    """A generator of its own (its own count of failures), so the stack's 127.0.0.1 is not throttled."""
    host = stack.start_variant("generator", auth_failures_per_minute=5)
    try:
        guess = "rmk_0000000000000000_" + "A" * 43
        codes = []
        for _ in range(7):  # a new connection (a new port) each time: the address is what counts
            codes.append(raw_call(host.address, "/ragmesh.v1.Generator/Stats",
                                  generator_pb2.GeneratorStatsRequest().SerializeToString(), bearer(guess))[0])
        assert codes[:5] == [grpc.StatusCode.UNAUTHENTICATED] * 5
        assert codes[5:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2, codes
    finally:
        stack.extra.remove(host)
        stack.call(host.stop())


class _RequestIds(embedder_pb2_grpc.EmbedderServicer):
    """Keeps the request id a handler sees, and the one its next hop would be sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def Embed(self, request, context):
        self.seen.append((request_id_var.get(), dict(clients.call_metadata())["x-request-id"]))
        return embedder_pb2.EmbedResponse(model="ids")


class _RequestIdApp(ServiceApp):
    service_name = "ragmesh.v1.Embedder"

    def __init__(self) -> None:
        self.servicer = _RequestIds()

    def register(self, server: grpc.aio.Server) -> None:
        embedder_pb2_grpc.add_EmbedderServicer_to_server(self.servicer, server)


def test_a_forged_request_id_is_replaced_at_the_grpc_edge_and_on_the_next_hop() -> None:
    forged = ['" } {"level": "error", "msg": "forged line', "x" * 5000, "id with spaces", "ok-id.1:2_3"]

    async def scenario() -> list[tuple[str, str]]:
        app = _RequestIdApp()
        host = ServiceHost(app, settings(), 0, grace=0.1)
        await host.start()
        try:
            async with grpc.aio.insecure_channel(host.address) as channel:
                stub = embedder_pb2_grpc.EmbedderStub(channel)
                for request_id in forged:
                    await stub.Embed(embedder_pb2.EmbedRequest(texts=["x"]), metadata=(("x-request-id", request_id),))
        finally:
            await host.stop()
        return app.servicer.seen

    seen = asyncio.run(scenario())
    for (handler_id, next_hop_id), sent in zip(seen[:3], forged[:3]):
        assert handler_id != sent and len(handler_id) == 16 and next_hop_id == handler_id
    assert seen[3] == ("ok-id.1:2_3", "ok-id.1:2_3"), "a clean id is kept"
    # And whatever another edge (the HTTP bridge) put in the context, only a clean id is sent on.
    token = request_id_var.set("é\nforged")
    try:
        sent = dict(clients.call_metadata())["x-request-id"]
    finally:
        request_id_var.reset(token)
    assert sent.isascii() and sent.isalnum() and len(sent) == 16


async def _watch(address: str, n: int, service: str = "") -> tuple[list[str], list[str]]:
    """`n` anonymous health Watch streams held open on one channel: the first status (or refusal) of
    each, and the retry-after of each refusal. The streams end when the channel closes."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        calls = [stub.Watch(health_pb2.HealthCheckRequest(service=service)) for _ in range(n)]
        firsts, waits = [], []
        for call in calls:
            try:
                reply = await call.read()
                firsts.append(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
            except grpc.aio.AioRpcError as exc:
                firsts.append(exc.code().name)
                waits.append(dict(exc.trailing_metadata() or ()).get("retry-after", ""))
        return firsts, waits


def test_anonymous_health_watches_from_one_address_are_bounded(stack: Stack) -> None:
    """3,000 anonymous Watch streams left 69 MB in the retriever: one address holds at most
    HEALTH_WATCHES_PER_ADDRESS (16) at once, the rest are refused with a retry-after, and a closed
    stream's place is free again."""
    address = stack.address("retriever")
    firsts, waits = stack.call(_watch(address, 40))
    assert sorted(firsts) == ["RESOURCE_EXHAUSTED"] * 24 + ["SERVING"] * 16  # in whatever order they arrived
    assert set(waits) == {"1"}
    assert stack.call(_watch(address, 16, "x" * 100_000))[0] == ["SERVICE_UNKNOWN"] * 16


def test_health_watches_are_bounded_per_service() -> None:
    async def scenario() -> tuple[list[str], list[str], int]:
        host = ServiceHost(_RequestIdApp(), settings(health_watches_max=6, health_watches_per_address=0), 0, grace=0.1)
        await host.start()
        try:
            async with grpc.aio.insecure_channel(host.address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                held = [stub.Watch(health_pb2.HealthCheckRequest()) for _ in range(4)]
                assert [(await c.read()).status for c in held] == [health_pb2.HealthCheckResponse.SERVING] * 4
                more = await _watch(host.address, 4, f"unknown-{'y' * 1000}")
                for call in held:
                    call.cancel()
                await asyncio.sleep(0.2)
                return *more, host.health.watchers.open
        finally:
            await host.stop()

    firsts, waits, left = asyncio.run(scenario())
    assert sorted(firsts) == ["RESOURCE_EXHAUSTED"] * 2 + ["SERVICE_UNKNOWN"] * 2 and waits == ["1", "1"]
    assert left == 0, "every stream's place is given back when it ends"
