"""Embed, tried as a tenant that wants the model to itself: the rival's admin key sends the largest calls
the limits allow (64 texts of 2,000 characters), several at once, so every other tenant's request used
to queue behind all of them (or ride in one of their 64-text model calls): one short upload went from
21 to 421 ms. Now a big call runs in slices and tenants take turns, so the victim's one-text call is
answered while the rival's calls are still waiting.

A real Embedder gRPC server with a fake backend that runs a model call only when the test lets it,
so what is asserted is the order things finish in, never how fast."""
from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import grpc
import numpy as np

from ragmesh.identity import keys
from ragmesh.identity.authenticator import pepper, service_token
from ragmesh.serving import ServiceHost
from ragmesh.store.sqlite import SqliteStore
from ragmesh.thread_priority import thread_nice
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.app import EmbedderApp
from services.embedder.limits import CALL_CHARS, MAX_TEXTS
from tests.auth import aio_channel, bearer
from tests.fakes.serving import settings

RIVAL_CALLS = 3
TEXT_CHARS = min(2_000, CALL_CHARS // MAX_TEXTS)
Stub = embedder_pb2_grpc.EmbedderStub


class SteppedBackend:
    """A model that makes each call wait until the test allows one more; records each call's texts."""

    model_name = "stepped"
    dimensions = 2
    max_batch = 10_000
    lanes = 1

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.steps = threading.Semaphore(0)

    def warm_up(self) -> None:
        pass

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        self.calls.append(list(texts))
        assert self.steps.acquire(timeout=30), "the test never let this call run"
        return np.array([[float(len(t)), float(t.startswith("victim"))] for t in texts], dtype=np.float32)


def admin_key(s, tenant: str, user: str) -> str:  # noqa: ANN001 - Settings
    """An admin key, stored as `ragmesh keys create` stores it."""
    key, record = keys.new_key(pepper(s), tenant, user, "admin")
    store = SqliteStore(s.sqlite_path)
    try:
        store.add_api_key(record)
    finally:
        store.close()
    return key


async def until(condition, what: str) -> None:  # noqa: ANN001 - a callable
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def rival_and_victim(app: EmbedderApp, s) -> AsyncIterator[tuple[Stub, Stub]]:  # noqa: ANN001 - Settings
    """The embedder served on loopback, and a stub for each tenant: the rival with an admin key of its own,
    the victim through the service credential as the gateway calls. The server stops on leaving."""
    host = ServiceHost(app, s, 0, grace=0.5)
    await host.start()
    try:
        async with aio_channel(host.address, bearer(admin_key(s, "rival", "eve"))) as rival, \
                aio_channel(host.address, bearer(service_token(s), "demo", "ana")) as victim:
            yield embedder_pb2_grpc.EmbedderStub(rival), embedder_pb2_grpc.EmbedderStub(victim)
    finally:
        await host.stop()


def test_a_rivals_largest_calls_do_not_hold_back_another_tenants_one_text_call() -> None:
    s = settings(embed_backend="local")  # the local model's slicing
    backend = SteppedBackend()
    app = EmbedderApp(s, backend)
    big = embedder_pb2.EmbedRequest(texts=[f"rival {i:04d} " + "w" * (TEXT_CHARS - 11) for i in range(MAX_TEXTS)],
                                    task=embedder_pb2.DOCUMENT)

    async def go() -> None:
        async with rival_and_victim(app, s) as (rival, victim):
            try:
                finished: list[str] = []

                async def call(stub: embedder_pb2_grpc.EmbedderStub, request: embedder_pb2.EmbedRequest, name: str):
                    reply = await stub.Embed(request, timeout=60)
                    finished.append(name)
                    return reply

                rivals = [asyncio.create_task(call(rival, big, f"rival-{n}")) for n in range(RIVAL_CALLS)]
                queued = lambda: RIVAL_CALLS * MAX_TEXTS - len(backend.calls[0])  # noqa: E731
                await until(lambda: len(backend.calls) == 1 and app.batcher.waiting == queued(),
                            "the rival's calls queued behind its first model call")
                upload = asyncio.create_task(call(victim, embedder_pb2.EmbedRequest(
                    texts=["victim: a short upload"], task=embedder_pb2.DOCUMENT), "victim"))
                await until(lambda: app.batcher.waiting == queued() + 1, "the victim's call queued")
                backend.steps.release(2)  # the rival's running model call, then one more
                await asyncio.wait([upload, *rivals], return_when=asyncio.FIRST_COMPLETED)
                assert finished == ["victim"], "answered first, while every rival call still waits"
                reply = upload.result()
                assert backend.calls[1] == ["victim: a short upload"], "its own model call: no rival texts ride along"
                assert len(backend.calls[0]) < MAX_TEXTS, "the rival's first call ran as a slice"
                assert [v.values for v in reply.vectors] == [[22.0, 1.0]]

                backend.steps.release(10_000)
                replies = await asyncio.gather(*rivals)
                for rival_reply in replies:  # whole, in order, however it was sliced
                    assert [v.values[0] for v in rival_reply.vectors] == [float(len(t)) for t in big.texts]
                assert finished[0] == "victim"
            finally:
                backend.steps.release(10_000)

    asyncio.run(go())


def test_a_rival_holding_the_embed_queue_leaves_room_for_another_tenants_embeddings() -> None:
    """One key kept the embedder's queue (one counter for every tenant) full: 4 of another tenant's 43
    embeddings were refused. Now a tenant holds at most half the places the others leave: the rival's
    calls past that are refused (RESOURCE_EXHAUSTED naming EMBED_MAX_QUEUE), every one of the other
    tenant's calls is queued and answered."""
    # the admission slots' shares off: the queue's share is what is tried (43 calls at once from one user
    # would pass USER_CALL_SHARE, which tests/security/test_held_streams.py tries)
    s = settings(embed_max_queue=4 * MAX_TEXTS, embed_slice_chars=0, tenant_call_share=1.0, user_call_share=1.0)
    backend = SteppedBackend()
    app = EmbedderApp(s, backend)
    big = embedder_pb2.EmbedRequest(texts=[f"rival {i:04d}" for i in range(MAX_TEXTS)], task=embedder_pb2.DOCUMENT)

    async def go() -> None:
        async with rival_and_victim(app, s) as (rival_stub, victim_stub):
            try:
                async def embed(stub: embedder_pb2_grpc.EmbedderStub, request: embedder_pb2.EmbedRequest):
                    return await stub.Embed(request, timeout=60)

                first = asyncio.create_task(embed(rival_stub, big))
                await until(lambda: len(backend.calls) == 1, "the rival's first call on the model")
                rivals = [asyncio.create_task(embed(rival_stub, big)) for _ in range(6)]
                await until(lambda: sum(t.done() for t in rivals) == 4, "the rival's calls past its share refused")
                assert app.batcher.waiting == 2 * MAX_TEXTS, "half the queue: the rival's share"
                refused = [t.exception() for t in rivals if t.done()]
                assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
                assert all("EMBED_MAX_QUEUE" in e.details() for e in refused)
                asks = [asyncio.create_task(embed(victim_stub, embedder_pb2.EmbedRequest(
                    texts=[f"victim question {i}"], task=embedder_pb2.QUERY))) for i in range(43)]
                await until(lambda: app.batcher.waiting == 2 * MAX_TEXTS + 43 or any(a.done() for a in asks),
                            "the other tenant's embeddings queued")
                backend.steps.release(10_000)
                replies = await asyncio.gather(*asks)
                assert [r.vectors[0].values[1] for r in replies] == [1.0] * 43, "all 43 embedded"
                await first
                outcomes = await asyncio.gather(*rivals, return_exceptions=True)
                assert sum(not isinstance(o, Exception) for o in outcomes) == 2, "the two in its share answered"
            finally:
                backend.steps.release(10_000)

    asyncio.run(go())


class LaneBackend:
    """A model that takes two calls at once (as the local one does); each call waits until the test lets
    that call (named by its first text) end, and records what else was under way when it started."""

    model_name = "lanes"
    dimensions = 2
    max_batch = 10_000
    lanes = 2

    def __init__(self) -> None:
        self.started: list[tuple[str, set[str]]] = []  # (a call's first text, the calls under way beside it)
        self.nice: dict[str, int] = {}  # a call's first text: the nice value of the thread it ran on
        self.under_way: set[str] = set()
        self.gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        pass

    def let_end(self, first_text: str) -> None:
        with self._lock:
            self.gates.setdefault(first_text, threading.Event()).set()

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        with self._lock:
            self.started.append((texts[0], set(self.under_way)))
            self.nice[texts[0]] = thread_nice()
            self.under_way.add(texts[0])
            gate = self.gates.setdefault(texts[0], threading.Event())
        try:
            assert gate.wait(timeout=30), f"the test never let {texts[0]!r} end"
        finally:
            with self._lock:
                self.under_way.discard(texts[0])
        return np.array([[float(len(t)), float(t.startswith("victim"))] for t in texts], dtype=np.float32)


def test_a_rival_asking_back_to_back_starts_no_second_call_beside_another_tenants_upload() -> None:
    """The rival's eight askers kept the embedder busy with one short call after another (their
    questions, their answers' memory): the victim's upload ran beside the rival's running call, and
    each time that one ended the rival's next started beside the upload still running, which so shared
    the cores (and the interpreter) with the rival's calls for as long as it ran (14 ms idle, 40-240 ms
    under the metadata-heavy asks). Now a tenant has one call at most beside another tenant's: the
    rival's next call waits, in its turn, for the upload's call to end."""
    s = settings(embed_backend="local")
    backend = LaneBackend()
    app = EmbedderApp(s, backend)

    async def embed(stub: embedder_pb2_grpc.EmbedderStub, text: str) -> embedder_pb2.EmbedResponse:
        return await stub.Embed(embedder_pb2.EmbedRequest(texts=[text], task=embedder_pb2.QUERY), timeout=60)

    async def go() -> None:
        async with rival_and_victim(app, s) as (rival_stub, victim_stub):
            try:
                first = asyncio.create_task(embed(rival_stub, "rival question 1"))
                await until(lambda: len(backend.started) == 1, "the rival's first call on the model")
                upload = asyncio.create_task(embed(victim_stub, "victim: a short upload"))
                await until(lambda: len(backend.started) == 2, "the victim's call beside it")
                assert backend.started[1] == ("victim: a short upload", {"rival question 1"})
                second = asyncio.create_task(embed(rival_stub, "rival question 2"))
                await until(lambda: app.batcher.waiting == 1, "the rival's next question queued")

                backend.let_end("rival question 1")
                await first  # its lane is free, and the rival has a question waiting
                for _ in range(20):  # the embedder's loop takes its next call, if it would
                    await asyncio.sleep(0)
                assert app.batcher.waiting == 1 and len(backend.started) == 2, \
                    "the rival's next call waits for the victim's to end, not beside it"

                backend.let_end("victim: a short upload")
                reply = await upload
                assert [v.values for v in reply.vectors] == [[22.0, 1.0]]
                await until(lambda: len(backend.started) == 3, "the rival's next call, once the victim's ended")
                assert backend.started[2] == ("rival question 2", set()), "it started with nothing beside it"
                backend.let_end("rival question 2")
                await second
            finally:
                for text in ("rival question 1", "victim: a short upload", "rival question 2"):
                    backend.let_end(text)

    asyncio.run(go())


def test_a_rival_over_its_share_runs_its_calls_on_threads_that_give_way() -> None:
    """Beside the rival's calls the victim's one-text call never waited for a lane, but ran three times as
    long: the kernel shared the cores between the two calls' threads alike. Now the calls of a tenant
    that has used the model more of late than another tenant with work run on threads at a lower CPU
    priority (a higher nice value), and the other tenant's at the normal one; alone, the rival's calls
    run at the normal priority too."""
    s = settings(embed_backend="local")
    backend = LaneBackend()
    app = EmbedderApp(s, backend)
    base = thread_nice()

    async def embed(stub: embedder_pb2_grpc.EmbedderStub, text: str) -> embedder_pb2.EmbedResponse:
        task = embedder_pb2.DOCUMENT if text.startswith("victim") else embedder_pb2.QUERY  # uploads, questions
        return await stub.Embed(embedder_pb2.EmbedRequest(texts=[text], task=task), timeout=60)

    async def go() -> None:
        async with rival_and_victim(app, s) as (rival_stub, victim_stub):
            try:
                def started(text: str):  # noqa: ANN202
                    return until(lambda: text in backend.nice, f"{text!r} on the model")

                for n in range(3):  # the rival alone, asking back to back
                    call = asyncio.create_task(embed(rival_stub, f"rival question {n}"))
                    await started(f"rival question {n}")
                    backend.let_end(f"rival question {n}")
                    await call
                calls = [asyncio.create_task(embed(rival_stub, "rival question 3"))]
                await started("rival question 3")
                calls.append(asyncio.create_task(embed(victim_stub, "victim upload 0")))
                await started("victim upload 0")  # beside the rival's running call
                calls.append(asyncio.create_task(embed(rival_stub, "rival question 4")))
                await until(lambda: app.batcher.waiting == 1, "the rival's next question queued")
                backend.let_end("victim upload 0")
                calls.append(asyncio.create_task(embed(victim_stub, "victim upload 1")))
                await started("victim upload 1")
                backend.let_end("rival question 3")
                calls.append(asyncio.create_task(embed(victim_stub, "victim upload 2")))
                await until(lambda: app.batcher.waiting == 2, "the victim's next upload queued")
                backend.let_end("victim upload 1")
                await started("rival question 4")
                assert backend.nice["rival question 4"] > base, "over its share beside the victim: gives way"
                assert {backend.nice[f"rival question {n}"] for n in range(4)} == {base}, "alone: normal"
                assert backend.nice["victim upload 0"] == backend.nice["victim upload 1"] == base
                for text in ("rival question 4", "victim upload 2"):
                    backend.let_end(text)
                await asyncio.gather(*calls)
            finally:
                for text in ("rival question 3", "rival question 4", "victim upload 0", "victim upload 1",
                             "victim upload 2"):
                    backend.let_end(text)

    asyncio.run(go())
