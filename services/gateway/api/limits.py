"""The guards in front of every /api route, in the order a request meets them. RequestGuard
(outermost): a request id on every request and response, and each /api request counted and timed by
route and status, inside its server span when tracing is on. Then BrowserGuard (auth.py: the Host,
Origin and content-type rules, from the headers). Then AdmissionGuard: the request's identity, from its
headers alone (Identifier: 401 at once without a credential, the checks of the others in a budget of
their own), before anything else is done for it; admission (the gateway's calls in flight, shared
with its gRPC server, so overload is refused fast with 429 and Retry-After); then its body, counted
as it arrives, so a 50 MB question is refused before it is parsed, and timed, so a body that
trickles in is cut off with 408 instead of holding its slot (as is one that sends nothing for
STREAM_IDLE_TIMEOUT_S; and one caller has at most HTTP_BODIES_PER_USER bodies arriving at once). The
slot counts against the caller's tenant and user, each of which holds at most a share of them."""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmesh import metrics, tracing
from ragmesh.admission import Admission
from ragmesh.errors import RagmeshError, ResourceExhausted
from ragmesh.request_context import REQUEST_ID_HEADER, clean_request_id, request_id_var
from services.gateway.api.auth import IDENTITY_SCOPE_KEY, Identifier

MCP_PATH = "/mcp"  # the MCP server (mcp_tools.py)
# The native API, the OpenAI-compatible edge and the MCP server: a credential, limits, metrics
GUARDED = ("/api/", "/v1/", MCP_PATH)
UPLOAD_PATHS = ("/api/documents",)
# A refusal sent before the body was read: the connection is closed, not kept for a next request
# that would start in the middle of this one's unread body.
_CLOSE = (b"connection", b"close")


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    """The body was not in by its deadline, or sent nothing for the idle timeout (the message says which)."""


async def send_error(send: Send, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """Pure ASGI middleware: the request id, and the /api requests' metrics and spans."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = clean_request_id(headers.get(REQUEST_ID_HEADER))
        request_id_var.set(request_id)
        echoing = _with_headers(send, [(REQUEST_ID_HEADER.encode(), request_id.encode())])
        if not scope["path"].startswith(GUARDED):
            await self.app(scope, receive, echoing)
            return
        status, started = 0, time.perf_counter()

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await echoing(message)

        with tracing.server_span(f"{scope['method']} {scope['path']}", headers, "gateway") as span:
            try:
                await self.app(scope, receive, observed)
            finally:
                matched = getattr(scope.get("route"), "path", "")  # under a mount (/v1), its path within it
                route = scope.get("root_path", "") + matched if matched else "(unmatched)"
                metrics.http_request(route, status, time.perf_counter() - started)
                if span is not None:
                    span.update_name(f"{scope['method']} {route}")
                    tracing.finish(span, str(status), status >= 500 or not status,
                                   **{"http.request.method": scope["method"], "http.route": route,
                                      "http.response.status_code": status})


class AdmissionGuard:
    """Pure ASGI middleware, so streamed answers pass through untouched and keep their slot until done."""

    def __init__(self, app: ASGIApp, identifier: Identifier, admission: Admission, max_body: int, max_upload: int,
                 body_timeout_s: float, upload_timeout_s: float, bodies_per_user: int,
                 idle_timeout_s: float = 0.0) -> None:
        self.app = app
        self.identifier = identifier
        self.admission = admission
        self.max_body = max_body
        self.max_upload = max_upload
        self.body_timeout_s = body_timeout_s
        self.upload_timeout_s = upload_timeout_s
        self.bodies_per_user = bodies_per_user  # 0 = no limit
        self.idle_timeout_s = idle_timeout_s  # 0 = none
        self.arriving: Counter[tuple[str, str]] = Counter()  # per (tenant, user): bodies still arriving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(GUARDED):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        upload = scope["path"] in UPLOAD_PATHS
        limit = self.max_upload if upload else self.max_body
        timeout = self.upload_timeout_s if upload else self.body_timeout_s
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await send_error(send, 413, "INVALID_ARGUMENT", f"body: {int(declared):,} bytes; the limit is {limit:,}",
                             [_CLOSE])
            return
        try:
            scope[IDENTITY_SCOPE_KEY] = await self.identifier.identify(scope, headers)
        except RagmeshError as exc:  # no credential or a refused one (401), too many checks (429), no store (503)
            await _refuse(send, exc)
            return
        identity = scope[IDENTITY_SCOPE_KEY]
        arriving = _Arriving(receive, asyncio.get_running_loop().time() + timeout, self.arriving,
                             (identity.tenant, identity.user), self.bodies_per_user, self.idle_timeout_s)
        try:
            streams = upload and scope["method"] == "POST"  # an upload, not the documents' list
            with arriving, self.admission.slot(identity.tenant, identity.user, streams):
                started = False

                async def sending(message: Message) -> None:
                    nonlocal started
                    started = True
                    await send(message)

                try:
                    # JSON bodies are small: read whole (up to the limit) before the app parses them;
                    # uploads stream through, counted. Either must be in by its deadline.
                    body: Receive = arriving.receive
                    if not upload:
                        body = await self._buffered(body, limit)
                    await self.app(scope, self._counting(body, limit), sending)
                except _TooLarge:
                    if not started:
                        await send_error(send, 413, "INVALID_ARGUMENT", f"body: over the limit of {limit:,} bytes",
                                         [_CLOSE])
                except _TooSlow as slow:
                    if not started:
                        await send_error(send, 408, "DEADLINE_EXCEEDED", str(slow) or f"body: not received within "
                                                                                      f"{timeout:g} s", [_CLOSE])
        except ResourceExhausted as exc:
            await _refuse(send, exc)

    @staticmethod
    async def _buffered(receive: Receive, limit: int) -> Receive:
        """The whole body read now (raising _TooLarge past the limit), replayed to the app."""
        parts, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return _replay([message], receive)
            parts.append(message.get("body", b""))
            seen += len(parts[-1])
            if seen > limit:
                raise _TooLarge
            more = message.get("more_body", False)
        return _replay([{"type": "http.request", "body": b"".join(parts), "more_body": False}], receive)

    @staticmethod
    def _counting(receive: Receive, limit: int) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        return counted


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


async def _refuse(send: Send, exc: RagmeshError) -> None:
    """A refusal before the body was read, in the routes' error shape (with WWW-Authenticate on a 401,
    Retry-After on a 429)."""
    extra = [(b"www-authenticate", b"Bearer")] if exc.http_status == 401 else []
    if isinstance(exc, ResourceExhausted):
        extra.append((b"retry-after", str(max(1, round(exc.retry_after_s))).encode()))
    await send_error(send, exc.http_status, exc.code, str(exc), [*extra, _CLOSE])


class _Arriving:
    """A request's body on its way in: due by `deadline` (the loop's clock; _TooSlow after it), and
    counted among its sender's bodies still arriving until its last part is in, so one caller cannot
    hold many request slots by sending bodies slowly; each part due within `idle_s` of the last (0:
    no idle timeout). After the last part, `receive` defers as is (a streamed answer waits on it for a
    disconnect)."""

    def __init__(self, receive: Receive, deadline: float, arriving: Counter[tuple[str, str]],
                 sender: tuple[str, str], per_sender: int, idle_s: float = 0.0) -> None:
        self._receive = receive
        self.deadline = deadline
        self.idle_s = idle_s
        self.arriving = arriving
        self.sender = sender
        self.per_sender = per_sender
        self.complete = False

    def __enter__(self) -> "_Arriving":
        if self.per_sender and self.arriving[self.sender] >= self.per_sender:
            raise ResourceExhausted(f"{self.per_sender} of your requests are still sending their bodies; finish "
                                    f"those first", 1.0)
        self.arriving[self.sender] += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._done()

    def _done(self) -> None:
        if not self.complete:
            self.complete = True
            self.arriving[self.sender] -= 1
            if not self.arriving[self.sender]:
                del self.arriving[self.sender]

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        now = asyncio.get_running_loop().time()
        idle = bool(self.idle_s) and now + self.idle_s < self.deadline
        try:
            async with asyncio.timeout_at(now + self.idle_s if idle else self.deadline):
                message = await self._receive()
        except TimeoutError:
            raise _TooSlow(f"body: nothing received for {self.idle_s:g} s (STREAM_IDLE_TIMEOUT_S)" if idle
                           else "") from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._done()
        return message


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """Gives back the messages already read, then defers to the real receive (a disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
