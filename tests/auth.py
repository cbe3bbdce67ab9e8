"""Credentials for test clients: channels that send a bearer token (and, for a service token, the
tenant and user it acts for) on every call, the way the CLI, the gateway and grpcurl do."""
from __future__ import annotations

from collections.abc import Sequence

import grpc

from ragmesh.clients import blocking_channel

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


def channel(address: str, metadata: Metadata, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A blocking channel that adds `metadata` to every call."""
    return blocking_channel(address, metadata, credentials)


class _Aio:
    """Adds the metadata to a call's details. grpc.aio files an interceptor under the first call kind
    it implements (unary-unary before the rest), so each kind below is its own interceptor."""

    def __init__(self, metadata: Metadata) -> None:
        self.extra = list(metadata)

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(tuple(d.metadata or ()) + tuple(self.extra)))
        return grpc.aio.ClientCallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready)


class _AioUnaryUnary(_Aio, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioUnaryStream(_Aio, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioStreamUnary(_Aio, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, requests):
        return await continuation(self._details(details), requests)


class _AioStreamStream(_Aio, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, requests):
        return await continuation(self._details(details), requests)


def aio_channel(address: str, metadata: Metadata,
                credentials: grpc.ChannelCredentials | None = None) -> grpc.aio.Channel:
    """An asyncio channel that adds `metadata` to every call."""
    interceptors = [kind(metadata) for kind in (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)]
    if credentials:
        return grpc.aio.secure_channel(address, credentials, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, interceptors=interceptors)
