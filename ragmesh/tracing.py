"""OpenTelemetry tracing: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (or a test installs a
provider), and then one trace per question across every gRPC hop.

The server interceptor (ragmesh.serving) opens a SERVER span per call from the caller's
`traceparent`; the clients' channels (ragmesh.clients) carry the OpenTelemetry gRPC
instrumentation's interceptors, which open a CLIENT span per call and inject the context; the
gateway's HTTP bridge opens the SERVER span of an /api request. Domain code marks its steps with
`span("routing")` and the like, without importing OpenTelemetry.

Every span carries the request id and the short name of the service that made it
(`ragmesh.request_id`, `ragmesh.service`), stamped when it starts from the context of the call,
so spans say whose they are even when several services share one process and one provider (the
in-process test stack). With tracing off, `span` and `server_span` hand back one shared no-op
context manager, and the SDK is never imported.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ragmesh.request_context import request_id_var, service_var

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

REQUEST_ID = "ragmesh.request_id"
SERVICE = "ragmesh.service"

_provider: TracerProvider | None = None
_tracer: Any = None  # opentelemetry.trace.Tracer once installed
_NOOP = contextlib.nullcontext()


def enabled() -> bool:
    return _tracer is not None


def setup(service: str, endpoint: str) -> None:
    """A service's tracing from its settings: spans batched to the OTLP/gRPC collector at
    `endpoint`, with service.name `ragmesh-<service>`. Nothing when `endpoint` is empty."""
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"ragmesh-{service}",
                                                        "service.namespace": "ragmesh"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    install(provider)
    log.info("tracing to an OTLP collector", extra={"endpoint": endpoint})


def install(provider: TracerProvider) -> None:
    """Traces with `provider` from now on (channels made before keep no client interceptors)."""
    global _provider, _tracer
    provider.add_span_processor(_stamp_processor())
    _provider, _tracer = provider, provider.get_tracer("ragmesh")


def uninstall() -> None:
    """Tracing off again (tests)."""
    global _provider, _tracer
    _provider = _tracer = None


def shutdown() -> None:
    """Sends the spans still batched; called when a service stops."""
    if _provider is not None:
        _provider.shutdown()


def _stamp_processor() -> Any:
    from opentelemetry.sdk.trace import SpanProcessor

    class Stamp(SpanProcessor):
        """Puts the request id and the serving service on every span as it starts."""

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            request_id, service = request_id_var.get(), service_var.get()
            if request_id:
                span.set_attribute(REQUEST_ID, request_id)
            if service:
                span.set_attribute(SERVICE, service)

    return Stamp()


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager:
    """A step of the work (an INTERNAL span, current while the block runs)."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes or None)


def annotate(**attributes: Any) -> None:
    """Adds attributes to the current span (what a step decided: the route, a cache hit)."""
    if _tracer is not None:
        from opentelemetry import trace

        trace.get_current_span().set_attributes(attributes)


def server_span(name: str, carrier: Mapping[str, str], service: str,
                attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager:
    """The SERVER span of one call, continuing the caller's trace from `carrier` (gRPC metadata or
    HTTP headers, lower-case keys). Yields the span (None with tracing off) for `finish`."""
    if _tracer is None:
        return _NOOP
    return _serving(name, carrier, service, attributes)


@contextlib.contextmanager
def _serving(name: str, carrier: Mapping[str, str], service: str,
             attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    from opentelemetry import propagate, trace

    service_var.set(service)
    with _tracer.start_as_current_span(name, context=propagate.extract(carrier), kind=trace.SpanKind.SERVER,
                                       attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as current:
        yield current


def finish(current: Any, code: str, error: bool, **attributes: Any) -> None:
    """Ends a server span's story: its status code (gRPC or HTTP) and whether it failed."""
    if current is None:
        return
    from opentelemetry.trace import Status, StatusCode

    current.set_attributes(attributes)
    if error:
        current.set_status(Status(StatusCode.ERROR, code))


def client_interceptors() -> list:
    """The gRPC instrumentation's aio client interceptors for a new channel ([] with tracing off)."""
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return aio_client_interceptors(tracer_provider=_provider)


def trace_id() -> str:
    """The current trace's id in hex, for log lines ("" with tracing off or outside a trace)."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""
