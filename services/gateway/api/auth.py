"""Who calls the HTTP bridge, and the browser-safety rules in front of every route.

Keys are bearer tokens in the `Authorization` header, never cookies, so a page on another origin
cannot borrow a signed-in user's credential. On top of that, state-changing requests must come from
this origin (or from no browser at all: no `Origin` header) with a JSON or multipart body, and every
request must name an allowed `Host` (a DNS-rebinding page names its own host)."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from fastapi import Request
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from ragmesh.config import Settings
from ragmesh.identity import Identity, identity_var
from ragmesh.identity.authenticator import Authenticator, ConfigError
from ragmesh.tls import is_loopback

OPEN_PATHS = ("/healthz", "/metrics")  # load balancers and Prometheus reach them by address, without a key
_WRITES = ("POST", "PUT", "PATCH", "DELETE")
_BODIES = ("application/json", "multipart/form-data")


def caller_dependency(auth: Authenticator) -> Callable[[Request], Awaitable[Identity]]:
    """A FastAPI dependency: the identity of the request's bearer credential (401 without one)."""

    async def caller(request: Request) -> Identity:
        identity = await auth.authenticate({"authorization": request.headers.get("authorization", "")})
        identity_var.set(identity)  # calls to internal services act for this caller
        return identity

    return caller


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """Host names the bridge answers to; None = any ("*")."""
    named = {h.strip().lower() for h in settings.allowed_hosts.split(",") if h.strip()}
    if "*" in named:
        return None
    if named:
        return frozenset(named)
    if settings.host in ("0.0.0.0", "::", ""):
        raise ConfigError(f"ALLOWED_HOSTS must be set when the HTTP bridge binds {settings.host or 'every address'}: "
                          f"the host names clients use (comma-separated), or * for any")
    loopback = {"localhost", "127.0.0.1", "::1"} if is_loopback(settings.host) else set()
    return frozenset({settings.host.lower(), *loopback})


def _hostname(netloc: str) -> str:
    return (urlsplit(f"//{netloc}").hostname or "").lower()


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
        if self.hosts is not None and _hostname(host) not in self.hosts:
            return 400, "INVALID_ARGUMENT", f"host: {host!r} is not served here (ALLOWED_HOSTS)"
        if scope["method"] not in _WRITES or not self._served(scope):
            return None
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return 403, "PERMISSION_DENIED", f"origin: {origin!r} may not send requests to {host!r}"
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if scope["method"] != "DELETE" and kind not in _BODIES:
            return 415, "INVALID_ARGUMENT", "content-type: send application/json (or multipart/form-data for files)"
        return None

    def _served(self, scope: Scope) -> bool:
        return self.router is None or any(r.matches(scope)[0] is Match.FULL for r in self.router.routes)
