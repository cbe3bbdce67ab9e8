"""The services' servicers driven in process by `grpc_testing` (no port, no channel, no HTTP/2).

grpc_testing calls a servicer's method on a thread of its own and expects what a *synchronous*
servicer returns: a response, or an iterator of responses, reading a blocking iterator of requests.
Our servicers are grpc.aio ones: `async def` methods return a coroutine and `async def ... yield`
ones an async generator, which grpc_testing cannot consume (it would send the coroutine object as
the response, or fail on `next()` of an async generator). So each method is given to grpc_testing
through a synchronous facade that runs the real call on the service's own event loop (where its
clients' channels live):

- the call goes through the services' real ContextInterceptor (credential from the invocation
  metadata, admission, identity, request id, deadline, domain errors as status codes), as it does
  behind a real server;
- a streamed call runs as one task on the loop (identity and deadline are context variables of
  that task) that hands each message to grpc_testing's thread through a queue of one, so a handler
  cannot run ahead of its reader (as HTTP/2 flow control keeps it from doing); when the RPC ends
  early (the client cancels, or the deadline passes) the task is cancelled, as grpc.aio would;
- requests are read from grpc_testing's blocking request iterator on a worker thread and handed
  to the interceptor's handler as their bytes, as a server does (it reads every call, a unary
  one too, as a stream of messages it parses itself once the caller is authenticated);
- the aio ServicerContext calls the interceptor makes (`abort` is a coroutine there) are passed
  to grpc_testing's synchronous context. grpc_testing's `abort` ends the RPC with empty trailing
  metadata, so trailers set before an abort (retry-after) cannot be checked here: the loopback
  tests check them."""
from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import grpc
import grpc_testing
from google.protobuf.descriptor import ServiceDescriptor

from ragmesh.identity.authenticator import Authenticator
from ragmesh.serving import ContextInterceptor, ServiceHost

_END = object()


class _Recorder:
    """Stands in for a grpc.aio.Server in a generated `add_*Servicer_to_server`: keeps the handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


@dataclass
class _Details:  # grpc.HandlerCallDetails
    method: str
    invocation_metadata: tuple[tuple[str, str], ...]


class _AioContext:
    """What the interceptor and our servicers call on a grpc.aio.ServicerContext, on grpc_testing's."""

    def __init__(self, context: grpc.ServicerContext, requests: AsyncIterator[Any]) -> None:
        self.context = context
        self.requests = requests
        self._code: grpc.StatusCode | None = None

    async def read(self) -> Any:
        """The stream's next message, or grpc.aio.EOF after its last (what a client stream is read with)."""
        return await anext(self.requests, grpc.aio.EOF)

    def time_remaining(self) -> float | None:
        return self.context.time_remaining()

    def invocation_metadata(self) -> Any:
        return self.context.invocation_metadata()

    def peer(self) -> str:
        return ""  # no connection in process: no address to throttle by

    def auth_context(self) -> dict:
        return {}  # no TLS in process

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.context.set_trailing_metadata(metadata)

    def code(self) -> grpc.StatusCode | None:
        return self._code

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        try:
            self.context.abort(code, details)  # ends the RPC with this status, then raises
        except Exception:  # noqa: BLE001 - grpc_testing raises a bare Exception
            raise grpc.aio.AbortError() from None


class _Facade:
    """One synchronous method per RPC of the service, each running the aio handler on `loop`."""

    def __init__(self, service: str, handlers: dict[str, grpc.RpcMethodHandler], interceptor: ContextInterceptor,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        for name, handler in handlers.items():
            setattr(self, name, self._method(f"/{service}/{name}", handler, interceptor))

    def _method(self, path: str, handler: grpc.RpcMethodHandler, interceptor: ContextInterceptor) -> Callable:
        async def wrapped(context: grpc.ServicerContext) -> grpc.RpcMethodHandler:
            async def original(_details: Any) -> grpc.RpcMethodHandler:
                return handler
            return await interceptor.intercept_service(original, _Details(path, tuple(context.invocation_metadata())))

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            outer = asyncio.run_coroutine_threadsafe(wrapped(context), self.loop).result()
            behavior = outer.unary_unary or outer.stream_unary or outer.unary_stream or outer.stream_stream
            requests = self._requests(request if handler.request_streaming else iter([request]),
                                      outer.request_deserializer)
            aio = _AioContext(context, requests)
            if handler.response_streaming:
                return self._responses(behavior(requests, aio), context)
            return asyncio.run_coroutine_threadsafe(behavior(requests, aio), self.loop).result()

        return call

    @staticmethod
    async def _requests(blocking: Iterator[Any], deserialize: Callable[[bytes], Any]) -> AsyncIterator[Any]:
        """The requests as the interceptor's handler reads them off the wire (it reads a unary call's
        one message as a stream of one): grpc_testing hands over messages, a server their bytes."""
        while (item := await asyncio.to_thread(next, blocking, _END)) is not _END:
            yield deserialize(item.SerializeToString())

    def _responses(self, stream: AsyncIterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        messages: queue.Queue = queue.Queue(maxsize=1)
        ended = threading.Event()

        def put(message: tuple) -> None:  # on a worker thread: the loop never waits for the reader
            while not ended.is_set():  # a reader that went away takes nothing more
                try:
                    return messages.put(message, timeout=0.05)
                except queue.Full:
                    continue

        async def pump() -> None:
            try:
                async with aclosing(stream):  # cancelled at a yield, the handler's own cleanup runs at once
                    async for item in stream:
                        await asyncio.to_thread(put, (item, None))
                await asyncio.to_thread(put, (_END, None))
            except BaseException as exc:  # noqa: BLE001 - handed to grpc_testing's thread
                await asyncio.to_thread(put, (None, exc))

        task = asyncio.run_coroutine_threadsafe(pump(), self.loop)

        def stop() -> None:  # the RPC ended (cancelled, deadline) or its reader left: stop the handler
            ended.set()
            task.cancel()

        context.add_callback(stop)
        try:
            while not (ended.is_set() and task.done()):
                try:
                    item, error = messages.get(timeout=0.05)
                except queue.Empty:
                    continue
                if error is not None:
                    raise error
                if item is _END:
                    return
                yield item
        finally:
            stop()


def in_process(host: ServiceHost, loop: asyncio.AbstractEventLoop, descriptor: ServiceDescriptor,
               add_to_server: Callable[[Any, Any], None], servicer: Any) -> grpc_testing.Server:
    """A grpc_testing server for `servicer` (built from the running host's app's parts) behind the
    host's own authenticator and admission, its calls run on `loop` (the host's)."""
    recorder = _Recorder()
    add_to_server(servicer, recorder)
    app = host.app
    interceptor = ContextInterceptor(Authenticator(host.settings, app.key_store, app.audience), app.admission,
                                     app.service_name)
    facade = _Facade(descriptor.full_name, recorder.handlers, interceptor, loop)
    return grpc_testing.server_from_dictionary({descriptor: facade}, grpc_testing.strict_real_time())
