"""Every Prometheus metric ragmesh exports, in one registry, and the small functions services
record them through (domain code calls these; none of it imports prometheus_client or grpc).

Cheap on the hot path: label children are made once and kept (per RPC method and status code,
per stage, per route), gauges that mirror state (calls in flight, index sizes) are read only when
Prometheus scrapes, and with METRICS_ENABLED=false every function returns at its first line.
One process holds one registry; in the in-process test stack the four services share it, and the
`service` label (or the metric itself) says whose a series is.
"""
from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Where each service serves /metrics when METRICS_PORT is unset; the gateway serves it on HTTP_PORT.
DEFAULT_PORTS = {"embedder": 9102, "retriever": 9103, "generator": 9104}

# Latency buckets (seconds): sub-millisecond stages up to minute-long generations.
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_CALLS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

disable_created_metrics()  # no `_created` series beside every counter and histogram
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

RPC_REQUESTS = Counter("ragmesh_rpc_requests", "gRPC calls served, by service, method and status code",
                       ("service", "method", "code"), registry=REGISTRY)
RPC_LATENCY = Histogram("ragmesh_rpc_latency_seconds", "Time to serve a gRPC call (a stream: until it ends)",
                        ("service", "method"), buckets=_CALLS, registry=REGISTRY)
HTTP_REQUESTS = Counter("ragmesh_http_requests", "HTTP requests the gateway's bridge served, by route and status",
                        ("route", "code"), registry=REGISTRY)
HTTP_LATENCY = Histogram("ragmesh_http_latency_seconds", "Time to serve an HTTP request (a stream: until it ends)",
                         ("route",), buckets=_CALLS, registry=REGISTRY)
STAGE = Histogram("ragmesh_retrieval_stage_seconds", "Time of each retrieval stage of a search in the retriever",
                  ("stage",), buckets=_FAST, registry=REGISTRY)
CACHE_HITS = Counter("ragmesh_scope_cache_hits", "Questions answered from the conversation's cached scope",
                     registry=REGISTRY)
CACHE_MISSES = Counter("ragmesh_scope_cache_misses", "Retrieving questions that searched anew", registry=REGISTRY)
ROUTES = Counter("ragmesh_routes", "Questions by the route the gateway took", ("route",), registry=REGISTRY)
TOKENS = Counter("ragmesh_tokens", "Tokens per model: in (prompt), out (answer) and thinking",
                 ("model", "direction"), registry=REGISTRY)
FIRST_TOKEN = Histogram("ragmesh_generator_first_token_seconds", "Generator: time from the call to the first "
                        "thinking or content piece", ("model",), buckets=_CALLS, registry=REGISTRY)
INGEST_DOCS = Counter("ragmesh_ingest_documents", "Documents ingested, by outcome (INDEXED, UNCHANGED, FAILED)",
                      ("outcome",), registry=REGISTRY)
INGEST_CHUNKS = Counter("ragmesh_ingest_chunks", "Chunks indexed by ingestion", registry=REGISTRY)
PARSE_WORKERS_KILLED = Counter("ragmesh_parse_workers_killed", "Parse worker processes killed, by reason (timeout, "
                               "memory, crash, cancelled)", ("reason",), registry=REGISTRY)
SHARED_STATE_REFUSED = Counter("ragmesh_shared_state_refused", "Commands Redis refused (full: past maxmemory under "
                               "noeviction; other: a key of another type)", ("reason",), registry=REGISTRY)
STORE_LATENCY = Histogram("ragmesh_store_latency_seconds", "Time of each store call, by operation",
                          ("operation",), buckets=(*_FAST, 5.0, 10.0), registry=REGISTRY)

_enabled = True
_server: tuple[object, threading.Thread] | None = None


def configure(enabled: bool) -> None:
    """METRICS_ENABLED: off, nothing is recorded (for measuring what metrics cost)."""
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    return _enabled


def exposition() -> bytes:
    """The registry in Prometheus' text format (what /metrics answers)."""
    return generate_latest(REGISTRY)


def serve(host: str, port: int, certfile: str = "", keyfile: str = "") -> None:
    """Serves /metrics on its own port (once per process). A port that cannot be bound is logged,
    not fatal: a service must never go down for its metrics."""
    global _server
    if _server is not None or not _enabled or not port:
        return
    try:
        _server = start_http_server(port, host, REGISTRY, certfile=certfile or None, keyfile=keyfile or None)
    except OSError as exc:
        log.error("metrics not served: cannot bind", extra={"address": f"{host}:{port}", "error": str(exc)})
        return
    log.info("metrics listening", extra={"url": f"{'https' if certfile else 'http'}://{host}:{port}/metrics"})


def stop_serving() -> None:
    global _server
    if _server is not None:
        server, thread = _server
        server.shutdown()  # type: ignore[attr-defined]
        thread.join(5)
        _server = None


# --------------------------------------------------------------------------- RPCs and HTTP


class CallMetrics:
    """One gRPC method's children: its latency histogram and a counter per status code, made once."""

    def __init__(self, service: str, method: str) -> None:
        self.service, self.method = service, method
        self.latency = RPC_LATENCY.labels(service, method)
        self._codes: dict[str, Counter] = {}

    def observe(self, code: str, seconds: float) -> None:
        if not _enabled:
            return
        counter = self._codes.get(code)
        if counter is None:
            counter = self._codes[code] = RPC_REQUESTS.labels(self.service, self.method, code)
        counter.inc()
        self.latency.observe(seconds)


_calls: dict[tuple[str, str], CallMetrics] = {}


def rpc(service: str, method: str) -> CallMetrics:
    """The children of one method (`/ragmesh.v1.Retriever/Search` is recorded as `Search`)."""
    key = (service, method)
    found = _calls.get(key)
    if found is None:
        found = _calls[key] = CallMetrics(service, method.rsplit("/", 1)[-1])
    return found


def http_request(route: str, code: int, seconds: float) -> None:
    if _enabled:
        HTTP_REQUESTS.labels(route, str(code)).inc()
        HTTP_LATENCY.labels(route).observe(seconds)


# --------------------------------------------------------------------------- gauges read at scrape time


class _InFlight(Protocol):
    name: str
    in_flight: int


class _Indexes(Protocol):
    def names(self) -> list[str]: ...

    def indexed(self, name: str) -> int: ...


def service_label(service_name: str) -> str:
    """`ragmesh.v1.Retriever` -> `retriever`: the `service` label's value."""
    return service_name.rsplit(".", 1)[-1].lower()


class _StateCollector:
    """ragmesh_in_flight_requests and ragmesh_index_chunks, read from the live objects when scraped,
    so keeping them costs nothing per call. Sources are held weakly: a stopped service drops out."""

    def __init__(self) -> None:
        self.admissions: weakref.WeakSet = weakref.WeakSet()
        self.indexes: weakref.WeakSet = weakref.WeakSet()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        in_flight = GaugeMetricFamily("ragmesh_in_flight_requests", "Calls (and the gateway's /api requests) in "
                                      "flight per service", labels=("service",))
        per_service: dict[str, int] = {}
        for admission in list(self.admissions):
            label = service_label(admission.name)
            per_service[label] = per_service.get(label, 0) + admission.in_flight
        for label, count in sorted(per_service.items()):
            in_flight.add_metric((label,), count)
        yield in_flight
        chunks = GaugeMetricFamily("ragmesh_index_chunks", "Live chunks in the retriever's index, per collection",
                                   labels=("collection",))
        sizes: dict[str, int] = {}
        for registry in list(self.indexes):
            try:  # a backend that cannot answer (Milvus down) loses its series, never the whole scrape
                for name in registry.names():
                    sizes[name] = max(sizes.get(name, 0), registry.indexed(name))  # replicas in one process (tests) hold the same
            except Exception as exc:  # noqa: BLE001 - any backend's failure
                log.warning("index sizes not exported", extra={"error": str(exc)[:300]})
        for name, live in sorted(sizes.items()):
            chunks.add_metric((name,), live)
        yield chunks

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("ragmesh_in_flight_requests", "", labels=("service",))
        yield GaugeMetricFamily("ragmesh_index_chunks", "", labels=("collection",))


_state = _StateCollector()
REGISTRY.register(_state)


def watch_in_flight(admission: _InFlight) -> None:
    """Exports `admission.in_flight` as ragmesh_in_flight_requests{service}."""
    _state.admissions.add(admission)


def watch_indexes(indexes: _Indexes) -> None:
    """Exports each collection's `indexes.indexed(name)` as ragmesh_index_chunks{collection} (any search backend)."""
    _state.indexes.add(indexes)


def unwatch_indexes(indexes: _Indexes) -> None:
    """A closed retriever's indexes leave the metrics at once, not when garbage collection gets to them."""
    _state.indexes.discard(indexes)


# --------------------------------------------------------------------------- domain events


_STAGES = {name: STAGE.labels(name) for name in ("embed", "dense", "sparse", "fusion")}


def retrieval_stages(timings_ms: dict[str, float], embedded: bool) -> None:
    """One search's stage times (the retriever's Timings, in ms); embed only when it embedded."""
    if not _enabled:
        return
    if embedded:
        _STAGES["embed"].observe(timings_ms["embed_ms"] / 1000)
    for stage in ("dense", "sparse", "fusion"):
        _STAGES[stage].observe(timings_ms[f"{stage}_ms"] / 1000)


def route_taken(route: str) -> None:
    if _enabled:
        ROUTES.labels(route).inc()


def shared_state_refused(full: bool) -> None:
    if _enabled:
        SHARED_STATE_REFUSED.labels("full" if full else "other").inc()


def scope_cache(hit: bool) -> None:
    if _enabled:
        (CACHE_HITS if hit else CACHE_MISSES).inc()


def first_token(model: str, seconds: float) -> None:
    if _enabled:
        FIRST_TOKEN.labels(model).observe(seconds)


def tokens(model: str, usage: dict[str, int]) -> None:
    """A generation's usage event: prompt tokens in, completion tokens out, thinking tokens."""
    if not _enabled:
        return
    for direction, key in (("in", "prompt_tokens"), ("out", "completion_tokens"), ("thinking", "thinking_tokens")):
        if usage.get(key):
            TOKENS.labels(model, direction).inc(usage[key])


FINAL_STAGES = ("INDEXED", "UNCHANGED", "FAILED")


def ingested(stage: str, chunks: int) -> None:
    """An ingest progress report; only a document's last one (INDEXED, UNCHANGED, FAILED) counts."""
    if not _enabled or stage not in FINAL_STAGES:
        return
    INGEST_DOCS.labels(stage).inc()
    if stage == "INDEXED":
        INGEST_CHUNKS.inc(chunks)


def parse_worker_killed(reason: str) -> None:
    if _enabled:
        PARSE_WORKERS_KILLED.labels(reason).inc()


def store_timer(operation: str) -> Callable[[float], None]:
    """The observe function of one store operation's histogram child (made once per operation)."""
    child = STORE_LATENCY.labels(operation)

    def observe(seconds: float) -> None:
        if _enabled:
            child.observe(seconds)

    return observe
