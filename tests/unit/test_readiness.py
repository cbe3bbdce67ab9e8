"""A service that is not ready looks not ready: UNAVAILABLE and health NOT_SERVING while it warms
up and while it drains, and the clients try such calls again within their deadline, never a
stream whose caller has seen part of it. Real grpc.aio servers on loopback."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh.clients import EmbedderClient, GeneratorClient, RetrieverClient
from ragmesh.errors import Unavailable
from ragmesh.readiness import State
from ragmesh.serving import ServiceApp, ServiceHost
from ragmesh.types import Document
from ragmesh.v1 import (
    embedder_pb2, embedder_pb2_grpc, generator_pb2, generator_pb2_grpc, retriever_pb2, retriever_pb2_grpc,
)
from tests.fakes.serving import settings
from tests.unit.test_ingest_pipeline import FakeEmbedder, final, make, run, stored

EMBED = embedder_pb2.EmbedRequest(texts=["x"])


class GatedEmbedder(embedder_pb2_grpc.EmbedderServicer):
    """Answers once `open` is set: a call the test holds in flight."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.entered = asyncio.Event()

    async def Embed(self, request, context):
        self.entered.set()
        await self.open.wait()
        return embedder_pb2.EmbedResponse(model="gated", dimensions=1,
                                          vectors=[embedder_pb2.Vector(values=[1.0])])


class SlowStart(ServiceApp):
    """A service whose warm-up (a model loading) lasts until the test releases it."""

    service_name = "ragmesh.v1.Embedder"

    def __init__(self) -> None:
        self.servicer = GatedEmbedder()
        self.loading = asyncio.Event()
        self.loaded = asyncio.Event()

    def register(self, server: grpc.aio.Server) -> None:
        embedder_pb2_grpc.add_EmbedderServicer_to_server(self.servicer, server)

    async def warm_up(self) -> None:
        self.loading.set()
        await self.loaded.wait()


async def health_of(channel: grpc.aio.Channel) -> int:
    return (await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)).status


async def refusal(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await embedder_pb2_grpc.EmbedderStub(channel).Embed(EMBED, timeout=5)
    return err.value


def test_a_service_warming_up_refuses_with_unavailable_and_a_client_waits_it_out() -> None:
    async def scenario() -> None:
        app = SlowStart()
        host = ServiceHost(app, settings(), 0, grace=0.1)
        starting = asyncio.create_task(host.start())
        await app.loading.wait()
        async with grpc.aio.insecure_channel(host.address) as channel:
            assert await health_of(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
            refused = await refusal(channel)
            assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused
            assert "warming up" in refused.details()
            assert "grpc-retry-pushback-ms" not in dict(refused.trailing_metadata()), "a refusal is retried"
            assert not app.servicer.entered.is_set(), "nothing of a refused call runs"

            client = EmbedderClient(host.address, timeout=10)
            waiting = asyncio.create_task(client.embed(["x"]))
            await asyncio.sleep(0.3)  # a few tries refused
            assert not waiting.done()
            app.loaded.set()
            assert (await waiting).shape == (1, 1), "the call went through once the service was warm"
            await starting
            assert await health_of(channel) == health_pb2.HealthCheckResponse.SERVING
            await client.close()
        await host.stop()

    asyncio.run(scenario())


def test_a_draining_service_refuses_new_calls_and_finishes_those_in_flight() -> None:
    async def scenario() -> None:
        app = SlowStart()
        app.loaded.set()
        host = ServiceHost(app, settings(), 0, grace=5)
        await host.start()
        async with grpc.aio.insecure_channel(host.address) as channel:
            app.servicer.open.clear()
            in_flight = asyncio.ensure_future(embedder_pb2_grpc.EmbedderStub(channel).Embed(EMBED, timeout=10))
            await app.servicer.entered.wait()
            stopping = asyncio.create_task(host.stop())
            while host.readiness.state is not State.DRAINING:
                await asyncio.sleep(0.01)
            assert await health_of(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
            refused = await refusal(channel)
            assert refused.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in refused.details()
            app.servicer.open.set()
            assert (await in_flight).model == "gated", "the call in flight finished"
            await stopping

    asyncio.run(scenario())


class Refusing(embedder_pb2_grpc.EmbedderServicer):
    """Answers every call with one status, noting when each try came."""

    def __init__(self, code: grpc.StatusCode, trailer: tuple = ()) -> None:
        self.code, self.trailer = code, trailer
        self.tries: list[float] = []

    async def Embed(self, request, context):
        self.tries.append(time.monotonic())
        context.set_trailing_metadata(self.trailer)
        await context.abort(self.code, "not now")


async def plain_server(add: Callable[[Any, grpc.aio.Server], None], servicer: Any) -> tuple[grpc.aio.Server, str]:
    """A bare server for a fake servicer: no bootstrap, so the fake says exactly what the client gets."""
    server = grpc.aio.server()
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.mark.parametrize("code, trailer, retried", [
    (grpc.StatusCode.UNAVAILABLE, (), True),
    (grpc.StatusCode.UNAVAILABLE, (("grpc-retry-pushback-ms", "-1"),), False),  # its dependency failed
    (grpc.StatusCode.INTERNAL, (), False),
])
def test_the_client_retries_unavailable_until_the_deadline_and_nothing_else(code, trailer, retried) -> None:
    async def scenario() -> None:
        servicer = Refusing(code, trailer)
        server, address = await plain_server(embedder_pb2_grpc.add_EmbedderServicer_to_server, servicer)
        client = EmbedderClient(address, timeout=0.8)
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            await client.embed(["x"])
        gave_up = time.monotonic()
        if retried:
            assert isinstance(err.value, Unavailable)
            assert len(servicer.tries) >= 3, servicer.tries
            assert gave_up - started < 0.8 + 2, "kept trying past the deadline"
            # A long deadline: the tries stop after the client's retry window instead.
            client.retry_for_s, started = 0.5, time.monotonic()
            with pytest.raises(Unavailable):
                await client.embed(["x"], timeout=60)
            assert time.monotonic() - started < 0.5 + 2, "kept trying past the retry window"
        else:
            assert len(servicer.tries) == 1
        await client.close()
        await server.stop(0)

    asyncio.run(scenario())


class FlakyGenerator(generator_pb2_grpc.GeneratorServicer):
    """Refuses the first `refusals` tries; then streams two events, or one and a lost connection."""

    def __init__(self, refusals: int, lost_midway: bool = False) -> None:
        self.refusals, self.lost_midway, self.calls = refusals, lost_midway, 0

    async def Generate(self, request, context):
        self.calls += 1
        if self.calls <= self.refusals:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        yield generator_pb2.GenerateEvent(content="one ")
        if self.lost_midway:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        yield generator_pb2.GenerateEvent(content="two")


@pytest.mark.parametrize("lost_midway", [False, True])
def test_a_stream_is_retried_until_its_first_message_and_never_replayed(lost_midway: bool) -> None:
    async def scenario() -> None:
        servicer = FlakyGenerator(refusals=2, lost_midway=lost_midway)
        server, address = await plain_server(generator_pb2_grpc.add_GeneratorServicer_to_server, servicer)
        client = GeneratorClient(address, timeout=5)
        seen: list[str] = []
        try:
            async for event in client.generate(model="m", question="q", blocks=[], history=[],
                                               system_instruction="", prompt="q"):
                seen.append(event.text)
        except Unavailable:
            seen.append("UNAVAILABLE")
        assert seen == (["one ", "UNAVAILABLE"] if lost_midway else ["one ", "two"])
        assert servicer.calls == 3, "two refusals, then one stream"
        await client.close()
        await server.stop(0)

    asyncio.run(scenario())


class FlakyRetriever(retriever_pb2_grpc.RetrieverServicer):
    """Ingest: the first try reads one document and is lost; the next reports each document it reads,
    or (`lost_after_progress`) reports one and is lost."""

    def __init__(self, lost_after_progress: bool = False) -> None:
        self.lost_after_progress = lost_after_progress
        self.tries: list[list[str]] = []

    async def Ingest(self, request_iterator, context) -> AsyncIterator[retriever_pb2.IngestProgress]:
        read: list[str] = []
        self.tries.append(read)
        async for doc in request_iterator:
            read.append(doc.doc_id)
            if len(self.tries) == 1:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
            yield retriever_pb2.IngestProgress(doc_id=doc.doc_id, stage=retriever_pb2.INDEXED)
            if self.lost_after_progress:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")


@pytest.mark.parametrize("lost_after_progress", [False, True])
def test_an_ingest_the_retriever_never_took_is_sent_again_whole(lost_after_progress: bool) -> None:
    async def scenario() -> None:
        servicer = FlakyRetriever(lost_after_progress)
        server, address = await plain_server(retriever_pb2_grpc.add_RetrieverServicer_to_server, servicer)
        client = RetrieverClient(address, timeout=5, ingest_timeout=5)

        async def documents() -> AsyncIterator[retriever_pb2.Document]:
            for name in ("a", "b", "c"):
                yield retriever_pb2.Document(doc_id=name, collection="c", text=f"text {name}")

        reported: list[str] = []
        try:
            async for progress in client.ingest(documents()):
                reported.append(progress.doc_id)
        except Unavailable:
            reported.append("UNAVAILABLE")
        if lost_after_progress:
            assert reported == ["a", "UNAVAILABLE"] and servicer.tries[1:] == [["a"]], "not sent again once reported"
        else:
            assert reported == ["a", "b", "c"] and servicer.tries == [["a"], ["a", "b", "c"]]
        await client.close()
        await server.stop(0)

    asyncio.run(scenario())


def test_a_document_the_embedder_stayed_away_for_fails_retryable_and_leaves_nothing(tmp_path: Path) -> None:
    """Past the retries (the embedder restarting for longer than they last) the document fails saying
    that sending it again will do; a document the embedder refused says nothing of the kind."""
    away = make(tmp_path, FakeEmbedder(failures=99), retries=1)
    failed = final(run(away, Document("x", "c", text="Never embedded.", filename="x.md")))["x"]
    assert failed.stage == "FAILED" and failed.error.startswith("x.md: embedder: UNAVAILABLE")
    assert "retryable" in failed.error and not stored(away) and away.store.get_document("", "c", "x") is None

    refused = make(tmp_path / "refused", FakeEmbedder(poison="POISON"), retries=1)
    bad = final(run(refused, Document("y", "c", text="POISON for the embedder.")))["y"]
    assert bad.stage == "FAILED" and "retryable" not in bad.error


def test_a_send_to_a_call_the_service_ended_counts_as_not_through() -> None:
    """grpc-python reports a client stream the service ended while a message was being sent as INTERNAL
    "Internal error from Core" (its own, not the service's): tried again before any reply, UNAVAILABLE after."""
    from grpc.aio import AioRpcError, Metadata

    from ragmesh.clients import _translated
    from ragmesh.retry import pushback_s

    lost = AioRpcError(grpc.StatusCode.INTERNAL, Metadata(), Metadata(), details="Internal error from Core")
    served = AioRpcError(grpc.StatusCode.INTERNAL, Metadata(), Metadata(), details="internal error (request id x)")
    assert pushback_s(lost) == 0.0 and pushback_s(served) is None
    with pytest.raises(Unavailable):
        with _translated("retriever"):
            raise lost


class Spooled:
    """A Deferred document (ragmesh.retry): made each time it is sent, let go once sent."""

    def __init__(self, name: str) -> None:
        self.name, self.made, self.out = name, 0, 0

    async def message(self) -> retriever_pb2.Document:
        self.made += 1
        self.out += 1
        return retriever_pb2.Document(doc_id=self.name, collection="c", filename=f"{self.name}.txt",
                                      content=b"x" * (3 * 1024 * 1024))

    def sent(self) -> None:
        self.out -= 1


def test_a_spooled_upload_is_made_again_for_the_second_try_and_none_is_held_after() -> None:
    """The resend copy of a file is its spool, not its bytes: every try makes the message anew, and
    each is let go once sent (a stream of 75 MB of files, past REPLAY_BYTES, kept no copy)."""
    async def scenario() -> None:
        servicer = FlakyRetriever()
        server, address = await plain_server(retriever_pb2_grpc.add_RetrieverServicer_to_server, servicer)
        client = RetrieverClient(address, timeout=5, ingest_timeout=10)
        files = [Spooled(name) for name in "abcdefghijklmnopqrstuvwxy"]  # 75 MB in all

        async def documents() -> AsyncIterator[Spooled]:
            for spooled in files:
                yield spooled

        reported = [p.doc_id async for p in client.ingest(documents())]
        assert reported == [f.name for f in files] and servicer.tries == [["a"], reported]
        assert files[0].made == 2 and all(f.made <= 2 for f in files)  # the first try may have made "b" too
        assert all(f.out == 0 for f in files), "a message not let go"
        await client.close()
        await server.stop(0)

    asyncio.run(scenario())
