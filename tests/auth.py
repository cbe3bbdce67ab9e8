"""Credentials for test clients: channels that send a bearer token (and, for a service token, the
tenant and user it acts for) on every call, the way the CLI, the gateway and grpcurl do."""
from __future__ import annotations

import collections
from collections.abc import Sequence

import grpc

Metadata = Sequence[tuple[str, str]]


def bearer(token: str, tenant: str = "", user: str = "") -> tuple[tuple[str, str], ...]:
    """gRPC metadata for a token; with a tenant (and user), as the gateway sends a service token."""
    found = (("authorization", f"Bearer {token}"),)
    if tenant:
        found += (("x-ragmesh-tenant", tenant), ("x-ragmesh-user", user))
    return found


def headers(token: str) -> dict[str, str]:
    """HTTP headers for a key or JWT."""
    return {"authorization": f"Bearer {token}"}


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")), grpc.ClientCallDetails):
    pass


class _Sync(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
            grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, metadata: Metadata) -> None:
        self.extra = list(metadata)

    def _details(self, d: grpc.ClientCallDetails) -> _Details:
        return _Details(d.method, d.timeout, list(d.metadata or []) + self.extra, d.credentials,
                        getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    intercept_unary_stream = intercept_unary_unary

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    intercept_stream_stream = intercept_stream_unary


def channel(address: str, metadata: Metadata, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A blocking channel that adds `metadata` to every call."""
    base = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    return grpc.intercept_channel(base, _Sync(metadata))


class _Aio(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor,
           grpc.aio.StreamUnaryClientInterceptor, grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, metadata: Metadata) -> None:
        self.extra = list(metadata)

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(tuple(d.metadata or ()) + tuple(self.extra)))
        return grpc.aio.ClientCallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready)

    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)

    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)

    async def intercept_stream_unary(self, continuation, details, requests):
        return await continuation(self._details(details), requests)

    async def intercept_stream_stream(self, continuation, details, requests):
        return await continuation(self._details(details), requests)


def aio_channel(address: str, metadata: Metadata,
                credentials: grpc.ChannelCredentials | None = None) -> grpc.aio.Channel:
    """An asyncio channel that adds `metadata` to every call."""
    interceptors = [_Aio(metadata)]
    if credentials:
        return grpc.aio.secure_channel(address, credentials, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, interceptors=interceptors)
