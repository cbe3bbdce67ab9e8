"""One server bootstrap for all four services.

grpc.aio server (TLS, and mTLS for internal services, when configured), health (NOT_SERVING
until warm-up finishes, and again while draining), reflection (so `grpcurl list` works), graceful
stop on SIGTERM/SIGINT, and an interceptor that authenticates every call (health and reflection
stay open) and carries the caller's identity, request id and deadline into the handler's context,
so the clients in `ragmesh.clients` pass them to the next hop. Until warm-up is done, and from
SIGTERM on, that interceptor refuses every call with UNAVAILABLE (ragmesh.readiness) before
anything of it runs, so a restarting service looks not ready, never broken. The same interceptor
counts and times every call (ragmesh.metrics) and opens its server span from the caller's trace
context (ragmesh.tracing).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ragmesh import metrics, tls, tracing
from ragmesh import logging as rlog
from ragmesh.admission import Admission
from ragmesh.config import ServiceSettings
from ragmesh.errors import (
    ConfigError, DeadlineExceeded, InvalidArgument, RagmeshError, ResourceExhausted, Unavailable,
)
from ragmesh.identity.authenticator import Audience, Authenticator
from ragmesh.message_limits import MessageLimits
from ragmesh.private_files import keep_private
from ragmesh.readiness import NotReady, Readiness, State, Watchers
from ragmesh.request_context import REQUEST_ID_HEADER, clean_request_id, deadline_var, identity_var, request_id_var
from ragmesh.store.lazy import LazyStore

log = logging.getLogger(__name__)

# gRPC's own trailer for "retry this call, or not": -1 on an UNAVAILABLE the service answered itself
# (a dependency of its own failed, after the service retried it within the same deadline), so callers
# do not retry it again at every hop. A refusal before the call ran (NotReady) or a lost connection
# carries none: callers retry those (ragmesh.clients).
RETRY_PUSHBACK_HEADER = "grpc-retry-pushback-ms"
# Open to anyone: load balancers probe health, and reflection only describes the public contract.
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
DRAIN_POLL_S = 0.05  # how often a draining service looks whether its calls in flight are done

def _server_options(settings: ServiceSettings, receive_limit: int) -> list[tuple[str, int]]:
    """gRPC itself refuses a message larger than any of the service's methods takes; the interceptor
    checks each method's own limit."""
    return [("grpc.max_receive_message_length", receive_limit),
            ("grpc.max_send_message_length", settings.grpc_max_message_bytes), ("grpc.so_reuseport", 0)]


def _status(exc: RagmeshError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)


def _enter_call(context: grpc.aio.ServicerContext, request_id: str) -> None:
    request_id_var.set(request_id)
    remaining = context.time_remaining()
    deadline_var.set(time.monotonic() + remaining if remaining is not None else None)


def _code(exc: Exception, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status a failed call ends with (what `_abort` sends)."""
    if isinstance(exc, grpc.aio.AbortError):
        return context.code() or grpc.StatusCode.UNKNOWN
    return _status(exc) if isinstance(exc, RagmeshError) else grpc.StatusCode.INTERNAL


class _Outcome:
    """How a call ended, for its metrics and span."""

    code = "OK"


async def _abort(context: grpc.aio.ServicerContext, method: str, request_id: str, exc: BaseException) -> None:
    """Domain errors keep their code and message; anything else is a fault of ours: INTERNAL with the
    request id to quote, the details in our log only."""
    if isinstance(exc, grpc.aio.AbortError):  # the handler aborted with its own status already
        raise exc
    if isinstance(exc, RagmeshError):
        log.info("request rejected", extra={"method": method, "error": str(exc)})
        if isinstance(exc, ResourceExhausted):
            context.set_trailing_metadata((("retry-after", f"{max(1, round(exc.retry_after_s))}"),))
        elif isinstance(exc, Unavailable) and not isinstance(exc, NotReady):
            context.set_trailing_metadata(((RETRY_PUSHBACK_HEADER, "-1"),))
        await context.abort(_status(exc), str(exc))
    log.exception("internal error", extra={"method": method})
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error (request id {request_id})")


def client_address(peer: str) -> str:
    """The address of a gRPC peer without its port ("ipv4:10.0.0.7:51234" -> "10.0.0.7", "ipv6:[::1]:51234"
    -> "::1"): failed credentials are counted per client address, and each connection has a port of its own."""
    kind, _, rest = unquote(peer or "").partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0].strip("[]")
    return peer or ""


def _keep_bytes(raw: bytes) -> bytes:
    """The request deserializer gRPC runs: none. The interceptor parses, after the caller is known."""
    return raw


@dataclass
class _Parser:
    """One call's request messages from their bytes: within the method's size limit, and valid
    protobuf (anything else is the client's error, INVALID_ARGUMENT naming what was wrong)."""

    method: str
    deserialize: Callable[[bytes], Any] | None
    limit: int
    limit_source: str
    idle_s: float = 0.0  # a client stream sending nothing for this long is ended (0: never)
    error: InvalidArgument | DeadlineExceeded | None = None  # what ended a client stream early

    def __call__(self, raw: bytes) -> Any:
        if len(raw) > self.limit:
            raise InvalidArgument("request", f"the message is {len(raw):,} bytes; {self.method.lstrip('/')} takes "
                                             f"at most {self.limit:,} ({self.limit_source})")
        try:
            return self.deserialize(raw) if self.deserialize is not None else raw
        except DecodeError:
            raise InvalidArgument("request", f"is not a valid {self.method.lstrip('/')} request message "
                                             f"(malformed protobuf)") from None

    async def one(self, requests: AsyncIterator[bytes]) -> Any:
        """The message of a unary call (due within the idle timeout too)."""
        stream = aiter(requests)
        async with contextlib.aclosing(self.each(lambda: anext(stream, grpc.aio.EOF))) as messages:
            async for message in messages:
                return message
        raise self.error or InvalidArgument("request", "no message was sent")

    async def each(self, read: Callable[[], Awaitable[Any]]) -> AsyncIterator[Any]:
        """The messages of a client stream (`read`: the call's context.read). A bad one, or none for
        `idle_s`, ends the stream and is kept as the call's error: raised here it could be lost, when the
        handler forwards the stream on a call of its own (the gateway's Ingest), whose sending task would
        swallow it and leave the call hanging. The idle timeout frees the slot of a stream opened and left
        open. Nothing here keeps a message, nor its bytes, once handed on (gRPC's own request iterator
        keeps the last one until the next is read): a file waiting in a stream is held by the handler
        alone, which may spool it."""
        box: list[Any] = []
        while True:
            try:
                async with asyncio.timeout(self.idle_s or None):
                    box.append(await self._next(read))
            except TimeoutError:
                self.error = DeadlineExceeded(f"request: the stream sent nothing for {self.idle_s:g} s "
                                              f"(STREAM_IDLE_TIMEOUT_S); send each message within it")
                return
            except InvalidArgument as exc:
                self.error = exc
                return
            if box[0] is grpc.aio.EOF:
                return
            yield box.pop()

    async def _next(self, read: Callable[[], Awaitable[Any]]) -> Any:
        raw = await read()
        return raw if raw is grpc.aio.EOF else self(raw)

    def outcome(self, exc: Exception | None = None) -> Exception | None:
        """The error the call ends with: a bad message in its stream before whatever that caused."""
        if self.error is not None and not isinstance(exc, grpc.aio.AbortError):
            return self.error
        return exc


async def _responses(result: Any) -> AsyncIterator[Any]:
    """A streaming handler's responses: an async generator's items, or none from one that writes them
    with `context.write` (grpc's health Watch)."""
    if inspect.isawaitable(result):
        await result
        return
    async for item in result:
        yield item


class ContextInterceptor(grpc.aio.ServerInterceptor):
    """Refuses the call while the service is not ready (UNAVAILABLE), authenticates the caller before
    its request is read, admits the call (or refuses it fast when the service is full), parses the
    request within its method's size limit, sets identity, request id and deadline for the handler,
    and turns errors into status codes.

    Every handler it returns reads its requests as a stream of bytes (a unary call's one message
    included), so that nothing of an unauthenticated call is received or parsed: the credential and
    the peer are checked first, from the metadata and the connection."""

    def __init__(self, authenticator: Authenticator | None, admission: Admission, service_name: str = "",
                 limits: MessageLimits | None = None, readiness: Readiness | None = None,
                 stream_idle_s: float = 0.0) -> None:
        """`readiness`: the host's; None for a servicer driven without one (always ready).
        `stream_idle_s`: how long a client stream may send nothing (0: no limit)."""
        self.authenticator = authenticator  # None: a test server with no identity
        self.admission = admission
        self.service = metrics.service_label(service_name or admission.name)
        self.limits = limits or MessageLimits()
        self.readiness = readiness or Readiness(service_name or admission.name, State.SERVING)
        self.stream_idle_s = stream_idle_s

    def _admitted(self, stream: bool) -> contextlib.AbstractContextManager:
        """A slot, counted against the caller's tenant and user (the tenant a service call acts for),
        and for a client stream against the tenant's streams."""
        who = identity_var.get()
        return self.admission.slot(who.tenant if who else "", who.user if who else "", stream)

    @contextlib.contextmanager
    def _observed(self, method: str, metadata: dict, request_id: str) -> Iterator[_Outcome]:
        """Counts and times the call by its final status code, inside its server span."""
        outcome, calls, started = _Outcome(), metrics.rpc(self.service, method), time.perf_counter()
        request_id_var.set(request_id)  # before the span starts: every span carries it
        with tracing.server_span(method.lstrip("/"), metadata, self.service) as span:
            try:
                yield outcome
            except (asyncio.CancelledError, GeneratorExit):  # the caller went away, or its deadline passed
                outcome.code = "CANCELLED"
                raise
            finally:
                calls.observe(outcome.code, time.perf_counter() - started)
                if span is not None:
                    service, _, name = method.lstrip("/").partition("/")
                    tracing.finish(span, outcome.code, outcome.code != "OK", **{
                        "rpc.system": "grpc", "rpc.service": service, "rpc.method": name,
                        "rpc.grpc.status_code": grpc.StatusCode[outcome.code].value[0]})

    async def _let_in(self, context: grpc.aio.ServicerContext, metadata: dict, method: str) -> None:
        """Refuses the call unless the service is ready (first: before warm-up even the key store may
        not be open), then authenticates the caller."""
        if method.startswith(_OPEN_PREFIXES):
            return
        self.readiness.check()
        if self.authenticator is None:
            return
        certified = bool(context.auth_context().get("x509_pem_cert"))
        peer = client_address(context.peer())
        identity_var.set(await self.authenticator.authenticate(metadata, certified, peer=peer))

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        metadata = dict(details.invocation_metadata or ())
        request_id = clean_request_id(metadata.get(REQUEST_ID_HEADER))
        method = details.method
        parse = _Parser(method, handler.request_deserializer, *self.limits.of(method), self.stream_idle_s)
        admission: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
        if not method.startswith(_OPEN_PREFIXES):
            admission = functools.partial(self._admitted, handler.request_streaming)
        behavior = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

        async def request(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
            """What the handler takes: its one message, or a stream of them parsed as they come."""
            return parse.each(context.read) if handler.request_streaming else await parse.one(requests)

        async def unary(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
            with self._observed(method, metadata, request_id) as outcome:
                try:
                    _enter_call(context, request_id)
                    await self._let_in(context, metadata, method)
                    with admission():
                        reply = await behavior(await request(requests, context), context)
                    if (error := parse.outcome()) is not None:
                        raise error
                    return reply
                except Exception as exc:  # noqa: BLE001 - every error becomes a status, never UNKNOWN
                    exc = parse.outcome(exc)
                    outcome.code = _code(exc, context).name
                    await _abort(context, method, request_id, exc)

        async def streaming(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with self._observed(method, metadata, request_id) as outcome:
                try:
                    _enter_call(context, request_id)
                    await self._let_in(context, metadata, method)
                    with admission():
                        async for item in _responses(behavior(await request(requests, context), context)):
                            yield item
                    if (error := parse.outcome()) is not None:
                        raise error
                except Exception as exc:  # noqa: BLE001
                    exc = parse.outcome(exc)
                    outcome.code = _code(exc, context).name
                    await _abort(context, method, request_id, exc)

        kwargs = {"request_deserializer": _keep_bytes, "response_serializer": handler.response_serializer}
        if handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(streaming, **kwargs)
        return grpc.stream_unary_rpc_method_handler(unary, **kwargs)


class ServiceApp(ABC):
    """What a service gives the bootstrap: its servicer, warm-up and clean-up."""

    #: Fully qualified gRPC service name, e.g. "ragmesh.v1.Retriever".
    service_name: str
    #: Who may call: "users" (the gateway: API keys, JWTs) or "internal" (the service credential
    #: or an operator's admin key).
    audience: Audience = "internal"
    #: None: calls are not authenticated (only test doubles that hold no data).
    key_store: LazyStore | None = None
    #: Calls in flight; set by the ServiceHost (the gateway's HTTP bridge shares it).
    admission: Admission | None = None
    #: The settings the service reads (its own model; `main` loads it from the environment).
    settings_model: ClassVar[type[ServiceSettings]] = ServiceSettings

    @abstractmethod
    def register(self, server: grpc.aio.Server) -> None:
        """Adds the servicer to the server."""

    async def warm_up(self) -> None:
        """Loads models and indexes; health turns SERVING only after this returns."""

    async def close(self) -> None:
        """Releases clients and stores after the server has stopped."""


class _BoundedHealth(health.aio.HealthServicer):
    """grpc's health service with its Watch streams bounded (ragmesh.readiness.Watchers). A Watch of a
    name never set gets SERVICE_UNKNOWN and is held without keeping the name: grpc's own servicer keeps
    a condition for every name ever watched, and a name may be megabytes."""

    def __init__(self, watchers: Watchers) -> None:
        super().__init__()
        self.watchers = watchers
        self._names: set[str] = set()

    async def set(self, service: str, status: int) -> None:
        self._names.add(service)
        await super().set(service, status)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        with self.watchers.held(client_address(context.peer())):
            if request.service in self._names:
                await super().Watch(request, context)
            else:  # the protocol's answer, and the call stays open until the client goes
                await context.write(health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVICE_UNKNOWN))
                await asyncio.get_running_loop().create_future()


class ServiceHost:
    """Runs one ServiceApp on a grpc.aio server; tests start several on free loopback ports."""

    def __init__(self, app: ServiceApp, settings: ServiceSettings, port: int, grace: float = 5.0) -> None:
        """Raises ConfigError for settings the service must not start with (the message says why)."""
        try:
            tls.check(settings)
        except ValueError as exc:
            raise ConfigError(f"{app.service_name}: {exc}") from None
        self.app = app
        self.settings = settings
        self.host = settings.host
        self.port = port
        self.grace = grace
        authenticator = Authenticator(settings, app.key_store, app.audience) if app.key_store is not None else None
        app.admission = self.admission = app.admission or Admission(
            app.service_name, settings.max_concurrent_calls, tenant_share=settings.tenant_call_share,
            user_share=settings.user_call_share, stream_share=settings.tenant_stream_share)
        self.admission.on_full_change = self._full_changed
        metrics.watch_in_flight(app.admission)
        limits = MessageLimits.from_settings(settings)
        self.readiness = Readiness(app.service_name)
        self.server = grpc.aio.server(
            interceptors=[ContextInterceptor(authenticator, app.admission, app.service_name, limits, self.readiness,
                                             settings.stream_idle_timeout_s)],
            options=_server_options(settings, limits.largest(app.service_name)))
        self.health = _BoundedHealth(Watchers(app.service_name, settings.health_watches_max,
                                              settings.health_watches_per_address))
        self._stopped = asyncio.Event()
        self._retrying: asyncio.Task | None = None
        self._health_tasks: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _set_health(self, status: int) -> None:
        for name in ("", self.app.service_name):
            await self.health.set(name, status)

    def _full_changed(self, full: bool) -> None:
        """Every slot taken: health says NOT_SERVING (a load balancer sends calls elsewhere) until one
        is free again. Told from inside a call's admission, so the health update runs as a task of its own."""
        if self.readiness.serving:
            self._health_tasks.add(task := asyncio.get_running_loop().create_task(self._follow_admission()))
            task.add_done_callback(self._health_tasks.discard)

    async def _follow_admission(self) -> None:
        """Health as the admission is now (tasks may run after a later change: each reads it afresh)."""
        if self.readiness.serving:
            serving = not self.admission.full
            await self._set_health(health_pb2.HealthCheckResponse.SERVING if serving
                                   else health_pb2.HealthCheckResponse.NOT_SERVING)

    async def start(self) -> int:
        """Binds, refuses calls (UNAVAILABLE, health NOT_SERVING) while it warms up, then takes them
        (SERVING). Returns the bound port."""
        self.app.register(self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            [
                self.app.service_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self.server,
        )
        credentials = tls.server_credentials(self.settings, require_client_cert=self.app.audience == "internal")
        where = f"{self.host}:{self.port}"
        bound = (self.server.add_secure_port(where, credentials) if credentials
                 else self.server.add_insecure_port(where))
        if bound == 0:
            raise OSError(f"{self.app.service_name}: cannot bind {self.host}:{self.port}")
        self.port = bound
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.start()
        log.info("listening", extra={"service_name": self.app.service_name, "address": self.address,
                                     "tls": "mtls" if credentials and self.settings.tls_ca else bool(credentials)})
        try:
            await self._warm_up()
        except Unavailable as exc:
            # A dependency (a database, a model server) is down: stay up as NOT_SERVING and retry,
            # rather than crash and be restarted in a loop.
            log.error("warm-up failed; NOT_SERVING until it succeeds", extra={"error": str(exc)})
            self._retrying = asyncio.create_task(self._warm_up_until_ready())
        except ConfigError:  # a setting found wrong only on use (an address nothing answers at): stop
            await self.server.stop(0)
            raise
        return bound

    async def _warm_up(self) -> None:
        started = time.perf_counter()
        await self.app.warm_up()
        self.readiness.warmed()
        if not self.readiness.serving:  # SIGTERM came during the warm-up
            return
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "serving",
            extra={"service_name": self.app.service_name, "warm_up_s": round(time.perf_counter() - started, 3)},
        )

    async def _warm_up_until_ready(self, first_delay: float = 1.0, max_delay: float = 30.0) -> None:
        delay = first_delay
        while not self._stopped.is_set():
            await asyncio.sleep(delay)
            try:
                await self._warm_up()
                return
            except Unavailable as exc:
                delay = min(delay * 2, max_delay)
                log.error("warm-up failed again", extra={"error": str(exc), "retry_in_s": delay})

    async def stop(self) -> None:
        """Drains: refuses new calls (UNAVAILABLE, health NOT_SERVING) while the running ones finish
        within the grace period, then stops the server (gRPC ends calls still running with UNAVAILABLE,
        and tells clients to connect again: elsewhere, or here once restarted) and closes."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.readiness.drain()
        if self._retrying is not None:
            self._retrying.cancel()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        deadline = time.monotonic() + self.grace
        while self.admission.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        await self.server.stop(max(0.0, deadline - time.monotonic()))
        await self.app.close()
        log.info("stopped", extra={"service_name": self.app.service_name})

    async def run_until_signal(self) -> None:
        """Serves until SIGTERM or SIGINT, then stops gracefully."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        log.info("signal received, shutting down", extra={"service_name": self.app.service_name})
        await self.stop()


def observe(service: str, settings: ServiceSettings) -> None:
    """A service process's metrics (recorded or not, and served on their own port unless the
    gateway serves them on its HTTP port) and tracing (to OTEL_EXPORTER_OTLP_ENDPOINT, if set)."""
    metrics.configure(settings.metrics_enabled)
    port = settings.metrics_port if settings.metrics_port is not None else metrics.DEFAULT_PORTS.get(service, 0)
    metrics.serve(settings.host, port, settings.tls_cert, settings.tls_key)
    tracing.setup(service, settings.otel_endpoint)


def main(service: str, app_class: type[ServiceApp], port_of: Callable[[ServiceSettings], int],
         loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop) -> None:
    """Entry point of `python -m services.<name>`: the service's own settings, JSON logs, metrics and
    traces, serve until a signal. `loop_factory`: the gateway runs on uvloop (see
    services/gateway/__main__.py), the others on asyncio's."""
    try:
        settings = app_class.settings_model.load()
    except ConfigError as exc:  # before logging is set up: the one line says it all
        raise SystemExit(f"{service}: refusing to start: {exc}") from None
    keep_private(settings.data_dir)
    rlog.setup(service, settings.log_level)
    observe(service, settings)

    async def serve() -> None:
        # Built inside the loop: grpc.aio servers bind to the loop that is running when made.
        host = ServiceHost(app_class(settings), settings, port_of(settings), settings.grace_period)
        await host.run_until_signal()

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve())
    except ConfigError as exc:
        log.critical("refusing to start", extra={"error": str(exc)})
        raise SystemExit(f"{service}: refusing to start: {exc}") from None
    finally:
        tracing.shutdown()
