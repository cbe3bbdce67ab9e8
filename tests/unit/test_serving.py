"""The shared bootstrap: health after warm-up, request id and deadline carried into handlers
and on to the next hop, domain errors as status codes, and settings it refuses to start with.
Real grpc.aio servers on loopback. RecorderApp has no key_store, so its calls are not authenticated."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh.clients import call_metadata, call_timeout
from ragmesh.errors import ConfigError, InvalidArgument
from ragmesh.request_context import request_id_var
from ragmesh.serving import ServiceApp, ServiceHost
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from tests.fakes.serving import settings


class Recorder(embedder_pb2_grpc.EmbedderServicer):
    """Records what a handler sees of the caller's request id and deadline."""

    def __init__(self) -> None:
        self.seen: dict = {}

    async def Embed(self, request, context):
        if not request.texts:
            raise InvalidArgument("texts", "must not be empty")
        self.seen = {"request_id": request_id_var.get(), "timeout": call_timeout(1000.0),
                     "metadata": dict(call_metadata())}
        return embedder_pb2.EmbedResponse(model="recorder")


class RecorderApp(ServiceApp):
    service_name = "ragmesh.v1.Embedder"

    def __init__(self) -> None:
        self.servicer = Recorder()
        self.warmed = asyncio.Event()
        self.release = asyncio.Event()

    def register(self, server: grpc.aio.Server) -> None:
        embedder_pb2_grpc.add_EmbedderServicer_to_server(self.servicer, server)

    async def warm_up(self) -> None:
        self.warmed.set()
        await self.release.wait()


def test_health_request_id_deadline_and_errors() -> None:
    async def scenario() -> None:
        app = RecorderApp()
        host = ServiceHost(app, settings(), 0, grace=0.1)
        starting = asyncio.create_task(host.start())
        await app.warmed.wait()
        async with grpc.aio.insecure_channel(host.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = (await health.Check(health_pb2.HealthCheckRequest(service=app.service_name))).status
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING, "SERVING before warm-up finished"
            app.release.set()
            await starting
            status = (await health.Check(health_pb2.HealthCheckRequest(service=app.service_name))).status
            assert status == health_pb2.HealthCheckResponse.SERVING

            stub = embedder_pb2_grpc.EmbedderStub(channel)
            await stub.Embed(embedder_pb2.EmbedRequest(texts=["x"]), timeout=5,
                             metadata=(("x-request-id", "req-123"),))
            seen = app.servicer.seen
            assert seen["request_id"] == "req-123"
            assert seen["metadata"]["x-request-id"] == "req-123", "the next hop gets the same id"
            assert 0 < seen["timeout"] <= 5.1, "the next hop's timeout is capped by the caller's deadline"

            await stub.Embed(embedder_pb2.EmbedRequest(texts=["x"]))
            assert seen is not app.servicer.seen and len(app.servicer.seen["request_id"]) == 16
            assert app.servicer.seen["timeout"] == 1000.0, "no caller deadline: the configured default"

            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Embed(embedder_pb2.EmbedRequest())
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details() == "texts: must not be empty"
        await host.stop()

    asyncio.run(scenario())


def test_refuses_plaintext_on_a_public_bind() -> None:
    async def scenario() -> None:
        with pytest.raises(ConfigError, match="ragmesh.v1.Embedder: refusing to serve plaintext on 0.0.0.0.*TLS_CERT"):
            ServiceHost(RecorderApp(), settings(host="0.0.0.0"), 0)
        with pytest.raises(ConfigError, match="TLS_CERT and TLS_KEY go together"):
            ServiceHost(RecorderApp(), settings(tls_cert="/nonexistent/cert.pem"), 0)
        # Behind a mesh that terminates TLS, plaintext is allowed explicitly.
        host = ServiceHost(RecorderApp(), settings(host="0.0.0.0", allow_plaintext=True), 0)
        assert host.host == "0.0.0.0"

    asyncio.run(scenario())
