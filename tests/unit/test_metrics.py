"""ragmesh.metrics and ragmesh.tracing at the bootstrap: every call counted and timed by method and
final status code (domain errors, aborts, faults), calls in flight read when scraped, /metrics on
its own port, nothing recorded with metrics off, store calls timed, and tracing off by default at
no cost. Real grpc.aio servers on loopback."""
from __future__ import annotations

import asyncio
import socket

import grpc
import httpx
import pytest

from ragmesh import metrics, tracing
from ragmesh.errors import InvalidArgument
from ragmesh.serving import ServiceApp, ServiceHost
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from tests.fakes.serving import settings

SERVICE = "meter"  # the `service` label of this test's server, which no other test uses


class Meter(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def Embed(self, request, context):
        kind = request.texts[0] if request.texts else ""
        if kind == "bad":
            raise InvalidArgument("texts", "bad")
        if kind == "abort":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        if kind == "fault":
            raise ZeroDivisionError("ours")
        if kind == "hold":
            self.entered.set()
            await self.release.wait()
        return embedder_pb2.EmbedResponse(model="meter")


class MeterApp(ServiceApp):
    service_name = "test.v1.Meter"

    def __init__(self) -> None:
        self.servicer = Meter()

    def register(self, server: grpc.aio.Server) -> None:
        embedder_pb2_grpc.add_EmbedderServicer_to_server(self.servicer, server)


def count(code: str) -> float:
    return metrics.REGISTRY.get_sample_value("ragmesh_rpc_requests_total",
                                             {"service": SERVICE, "method": "Embed", "code": code}) or 0.0


def timed() -> float:
    return metrics.REGISTRY.get_sample_value("ragmesh_rpc_latency_seconds_count",
                                             {"service": SERVICE, "method": "Embed"}) or 0.0


def in_flight() -> float | None:
    return metrics.REGISTRY.get_sample_value("ragmesh_in_flight_requests", {"service": SERVICE})


async def _calls(kinds: list[str]) -> dict[str, grpc.StatusCode]:
    app = MeterApp()
    host = ServiceHost(app, settings(), 0, grace=0.1)
    await host.start()
    codes = {}
    try:
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            for kind in kinds:
                try:
                    await stub.Embed(embedder_pb2.EmbedRequest(texts=[kind]), timeout=10)
                    codes[kind] = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as exc:
                    codes[kind] = exc.code()
            held = asyncio.ensure_future(stub.Embed(embedder_pb2.EmbedRequest(texts=["hold"]), timeout=10))
            await app.servicer.entered.wait()
            codes["in flight"] = in_flight()
            app.servicer.release.set()
            await held
            codes["after"] = in_flight()
    finally:
        await host.stop()
    return codes


def test_calls_are_counted_and_timed_by_method_and_final_status_code() -> None:
    before = {code: count(code) for code in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "INTERNAL")}
    calls = timed()
    codes = asyncio.run(_calls(["ok", "bad", "abort", "fault", "ok"]))
    assert codes["bad"] == grpc.StatusCode.INVALID_ARGUMENT and codes["abort"] == grpc.StatusCode.NOT_FOUND
    assert codes["fault"] == grpc.StatusCode.INTERNAL
    grown = {code: count(code) - before[code] for code in before}
    assert grown == {"OK": 3, "INVALID_ARGUMENT": 1, "NOT_FOUND": 1, "INTERNAL": 1}, "the held call is OK too"
    assert timed() - calls == 6
    assert codes["in flight"] == 1 and codes["after"] == 0


def test_with_metrics_off_nothing_is_recorded() -> None:
    before, calls = count("OK"), timed()
    metrics.configure(False)
    try:
        asyncio.run(_calls(["ok"]))
    finally:
        metrics.configure(True)
    assert count("OK") == before and timed() == calls
    asyncio.run(_calls(["ok"]))
    assert count("OK") == before + 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_are_served_on_their_own_port_and_a_taken_port_is_not_fatal(caplog) -> None:
    port = _free_port()
    metrics.serve("127.0.0.1", port)
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
        assert "# TYPE ragmesh_rpc_requests_total counter" in page.text
        assert "process_resident_memory_bytes" in page.text
    finally:
        metrics.stop_serving()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics.serve("127.0.0.1", taken.getsockname()[1])  # logged, not raised
    assert "metrics not served" in caplog.text


def test_store_calls_are_timed_by_operation(tmp_path) -> None:
    # an operation nothing else in this process calls on its own (a retriever's follower polls `version`)
    store = LazyStore(settings(data_dir=tmp_path))
    store.connect()
    try:
        before = metrics.REGISTRY.get_sample_value("ragmesh_store_latency_seconds_count", {"operation": "api_keys"})
        store.api_keys("metrics-t")
        store.api_keys("metrics-t")
        after = metrics.REGISTRY.get_sample_value("ragmesh_store_latency_seconds_count", {"operation": "api_keys"})
        assert after - (before or 0) == 2
        assert store.api_keys.__name__ == "api_keys"
    finally:
        store.close()


def test_ingest_counts_only_a_documents_last_report() -> None:
    def docs(outcome: str) -> float:
        return metrics.REGISTRY.get_sample_value("ragmesh_ingest_documents_total", {"outcome": outcome}) or 0.0

    chunks = metrics.REGISTRY.get_sample_value("ragmesh_ingest_chunks_total") or 0.0
    indexed, failed = docs("INDEXED"), docs("FAILED")
    for stage, n in (("PARSED", 0), ("CHUNKED", 4), ("EMBEDDED", 4), ("INDEXED", 4), ("FAILED", 0)):
        metrics.ingested(stage, n)
    assert (docs("INDEXED") - indexed, docs("FAILED") - failed) == (1, 1)
    assert metrics.REGISTRY.get_sample_value("ragmesh_ingest_chunks_total") - chunks == 4


def test_tracing_is_off_by_default_and_costs_a_shared_no_op() -> None:
    assert not tracing.enabled()
    assert tracing.span("a") is tracing.span("b", x=1)
    assert tracing.server_span("m", {}, "s") is tracing.span("c")
    assert tracing.client_interceptors() == [] and tracing.trace_id() == ""
    tracing.finish(None, "OK", False)  # nothing to end


@pytest.mark.parametrize("name,label", [("ragmesh.v1.Retriever", "retriever"), ("test.v1.Meter", "meter")])
def test_service_label(name: str, label: str) -> None:
    assert metrics.service_label(name) == label


class _Indexes:
    def __init__(self, sizes: dict[str, int] | None) -> None:
        self.sizes = sizes

    def names(self) -> list[str]:
        if self.sizes is None:
            raise ConnectionError("Milvus is gone")
        return sorted(self.sizes)

    def indexed(self, name: str) -> int:
        return self.sizes[name]  # type: ignore[index]


def test_an_index_source_that_fails_loses_its_series_not_the_scrape() -> None:
    """A retriever whose backend went away (Milvus down) must not turn /metrics into a 500."""
    broken, fine = _Indexes(None), _Indexes({"meter-collection": 7})
    metrics.watch_indexes(broken)
    metrics.watch_indexes(fine)
    try:
        page = metrics.exposition().decode()
        assert 'ragmesh_index_chunks{collection="meter-collection"} 7.0' in page
    finally:
        metrics.unwatch_indexes(broken)
        metrics.unwatch_indexes(fine)
    assert "meter-collection" not in metrics.exposition().decode()  # unwatched: gone at once
