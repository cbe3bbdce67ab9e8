"""Who calls the HTTP bridge, and the browser-safety rules in front of every route.

Keys are bearer tokens in the `Authorization` header, never cookies, so a page on another origin
cannot borrow a signed-in user's credential. On top of that, state-changing requests must come from
this origin (or from no browser at all: no `Origin` header) with a JSON or multipart body, and every
request must name an allowed `Host` (a DNS-rebinding page names its own host)."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

from fastapi import Request
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from ragmesh.errors import ResourceExhausted, Unauthenticated
from ragmesh.identity import Identity
from ragmesh.identity.authenticator import Authenticator, bearer
from ragmesh.request_context import identity_var
from ragmesh.validation import shown

OPEN_PATHS = ("/healthz", "/metrics")  # load balancers and Prometheus reach them by address, without a key
_WRITES = ("POST", "PUT", "PATCH", "DELETE")
_BODIES = ("application/json", "multipart/form-data")
IDENTITY_SCOPE_KEY = "ragmesh.identity"  # where AdmissionGuard leaves the caller's Identity for the routes


class Identifier:
    """Who sends an /api request, from its headers alone (AdmissionGuard asks before it reads a body or
    takes a request slot). A request without a credential is refused at once, with no lookup. The
    checks of the others (a key lookup in the store, a JWT's signature) have a budget of their own,
    apart from the request slots: at most `concurrent` run at once and at most `waiting` wait for
    their turn (a burst of good requests on a slow store waits a moment); past that 429, so a flood
    of unidentified requests costs a bounded queue, never the slots identified callers hold. The
    client's address goes with each check: one that sends too many bad credentials is refused."""

    def __init__(self, auth: Authenticator, concurrent: int, waiting: int) -> None:
        self.auth = auth
        self.capacity = concurrent + waiting
        self.queued = 0  # checks running or waiting
        self._running = asyncio.Semaphore(concurrent)

    async def identify(self, scope: Scope, headers: Mapping[str, str]) -> Identity:
        """Raises Unauthenticated (401), or ResourceExhausted (429) when the budget or the address's
        failures are used up."""
        authorization = headers.get("authorization", "")
        bearer(authorization)  # none: 401 before anything is looked up
        if self.queued >= self.capacity:
            raise ResourceExhausted(f"credential checks are busy: {self.queued} running or waiting; retry in 1 s",
                                    1.0)
        self.queued += 1
        try:
            async with self._running:
                return await self.auth.authenticate({"authorization": authorization}, peer=peer(scope))
        finally:
            self.queued -= 1


def peer(scope: Scope) -> str:
    """The client's address (its host, without the port)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def caller_dependency() -> Callable[[Request], Awaitable[Identity]]:
    """A FastAPI dependency: the identity AdmissionGuard established from the request's credential.
    Every route that asks for it is under /api, where nothing reaches a route unidentified."""

    async def caller(request: Request) -> Identity:
        identity = request.scope.get(IDENTITY_SCOPE_KEY)
        if identity is None:
            raise Unauthenticated("missing credential: send 'authorization: Bearer <API key or token>'")
        identity_var.set(identity)  # calls to internal services act for this caller
        return identity

    return caller


def _hostname(netloc: str) -> str | None:
    """The host name of a `Host` value; None when it cannot be parsed (an unclosed IPv6 bracket) or its
    port is not one (not digits, 0, or past 65535: `.port` raises for those)."""
    try:
        parts = urlsplit(f"//{netloc}")
        if parts.port == 0:
            return None
        return (parts.hostname or "").lower()
    except ValueError:
        return None


def _netloc(origin: str) -> str | None:
    """The host[:port] of an `Origin` value; None when it cannot be parsed."""
    try:
        return urlsplit(origin).netloc.lower()
    except ValueError:
        return None


class BrowserGuard:
    """Pure ASGI middleware (streams pass through untouched). With the app's router it holds back
    only requests a route would serve: a method no route has at a path gets the router's 405 (with
    `Allow`), an unknown path its 404, neither of which changes anything."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None, router: Router | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            refusal = self._refusal(scope)
            if refusal is not None:
                status, code, message = refusal
                body = json.dumps({"error": {"code": code, "message": message}}).encode()
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        hostname = _hostname(host)
        if hostname is None:
            return 400, "INVALID_ARGUMENT", f"host: {shown(host)} is not a host name (and a port from 1 to 65535)"
        if self.hosts is not None and hostname not in self.hosts:
            return 400, "INVALID_ARGUMENT", f"host: {shown(host)} is not served here (ALLOWED_HOSTS)"
        if scope["method"] not in _WRITES or not self._served(scope):
            return None
        origin = headers.get("origin")
        if origin is not None:
            netloc = _netloc(origin)
            if netloc is None:
                return 400, "INVALID_ARGUMENT", f"origin: {shown(origin)} is not an origin"
            if netloc != host.lower():
                return 403, "PERMISSION_DENIED", f"origin: {shown(origin)} may not send requests to {shown(host)}"
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if scope["method"] != "DELETE" and kind not in _BODIES:
            return 415, "INVALID_ARGUMENT", "content-type: send application/json (or multipart/form-data for files)"
        return None

    def _served(self, scope: Scope) -> bool:
        return self.router is None or any(r.matches(scope)[0] is Match.FULL for r in self.router.routes)
