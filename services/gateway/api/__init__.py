"""The REST/SSE bridge for web clients, in the gateway process: one router per resource (chat,
conversations, documents, transcripts, chunks, the catalog of collections and funds), the web page and its
vendored scripts, health, Prometheus' /metrics, the OpenAPI document (openapi.py, at /openapi.json
and /docs), and the rules every route shares: a bearer credential on every /api/* route, checked
from the headers before anything else is done for the request, browser safety (and a strict
Content-Security-Policy on the pages), and domain errors as HTTP status codes."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from ragmesh import metrics
from ragmesh.admission import Admission
from ragmesh.clients import RetrieverClient
from ragmesh.config import Settings
from ragmesh.errors import RagmeshError, ResourceExhausted
from ragmesh.identity import Identity
from ragmesh.identity.authenticator import Authenticator
from ragmesh.request_context import REQUEST_ID_HEADER, request_id_var
from ragmesh.validation import invalid_argument
from services.gateway.api.auth import BrowserGuard, Identifier, caller_dependency
from services.gateway.api.catalog import catalog_router
from services.gateway.api.chat import chat_router
from services.gateway.api.chunks import chunks_router
from services.gateway.api.conversations import conversations_router
from services.gateway.api.documents import documents_router
from services.gateway.api.limits import MCP_PATH, AdmissionGuard, RequestGuard
from services.gateway.api.mcp_tools import mcp_endpoint
from services.gateway.api.openai_chat import openai_app
from services.gateway.api.openai_errors import OpenAIErrors
from services.gateway.api.openapi import install as install_openapi
from services.gateway.api.schemas import Error, Health, Meta, returns
from services.gateway.api.transcripts import transcripts_router
from services.gateway.conversations import Conversations
from services.gateway.library import Library
from services.gateway.memory import Memory
from services.gateway.meta import describe
from services.gateway.pipeline import AskPipeline
from services.gateway.transcripts import Transcripts
from services.gateway.upload_memory import TenantBytes

WEB_DIR = Path(__file__).parent.parent / "web"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


# The pages (the chat page, the API page) keep or take a key: they load scripts and styles of this
# origin only (vendored, no inline code) and talk to it only, and no other site may frame them.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class FrontDoor:
    """How much the bridge gives a request before and while it is read, and whether /docs is served."""

    checks: int  # credential checks running at once (HTTP_UNAUTHENTICATED_MAX)
    checks_waiting: int  # and waiting for their turn (HTTP_UNAUTHENTICATED_QUEUE)
    body_timeout_s: float
    upload_timeout_s: float
    bodies_per_user: int
    api_docs: bool
    idle_timeout_s: float = 0.0  # a body sending nothing this long is cut off (STREAM_IDLE_TIMEOUT_S)

    @classmethod
    def of(cls, s: Settings) -> "FrontDoor":
        return cls(s.http_unauthenticated_max, s.http_unauthenticated_queue, s.http_body_timeout_s,
                   s.http_upload_timeout_s, s.http_bodies_per_user, s.api_docs, s.stream_idle_timeout_s)


def _error(exc: RagmeshError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else {}
    if isinstance(exc, ResourceExhausted):
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, status_code=exc.http_status,
                        headers=headers)


def _internal() -> JSONResponse:
    """A fault of ours: the request id to quote, the details in the log only. (Answered outside the
    middleware that adds the request id header to every other response, so it adds its own.)"""
    request_id = request_id_var.get()
    return JSONResponse({"error": {"code": "INTERNAL", "message": f"internal error (request id {request_id})"}},
                        status_code=500, headers={REQUEST_ID_HEADER: request_id})


def create_app(
    *,
    pipeline: AskPipeline,
    memory: Memory,
    conversations: Conversations,
    transcripts: Transcripts,
    retriever: Callable[[], RetrieverClient],
    library: Library,
    authenticator: Authenticator,
    allowed_hosts: frozenset[str] | None,
    health: Callable[[], Awaitable[dict[str, str]]],
    models: Callable[[], Awaitable[list[str]]],
    admission: Admission,
    front_door: FrontDoor,
    max_body_bytes: int,
    max_upload_bytes: int,
    max_file_bytes: int,
    upload_memory: TenantBytes,
) -> FastAPI:
    mcp = mcp_endpoint(pipeline, library, retriever, max_body_bytes)
    app = FastAPI(title="ragmesh gateway", docs_url=None, redoc_url=None, lifespan=lambda _: mcp.running(),
                  generate_unique_id_function=lambda route: route.name)  # operationId: the route function's name
    # Added innermost first: RequestGuard, then BrowserGuard, then AdmissionGuard meet a request.
    identifier = Identifier(authenticator, front_door.checks, front_door.checks_waiting)
    app.add_middleware(AdmissionGuard, identifier=identifier, admission=admission, max_body=max_body_bytes,
                       max_upload=max_upload_bytes, body_timeout_s=front_door.body_timeout_s,
                       upload_timeout_s=front_door.upload_timeout_s, bodies_per_user=front_door.bodies_per_user,
                       idle_timeout_s=front_door.idle_timeout_s)
    app.add_middleware(BrowserGuard, hosts=allowed_hosts, router=app.router)
    app.add_middleware(RequestGuard)
    app.add_middleware(OpenAIErrors)  # outermost: the guards' refusals of /v1 requests in OpenAI's error shape
    caller = caller_dependency()

    @app.exception_handler(RagmeshError)
    async def _domain_error(request: Request, exc: RagmeshError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own refusals (an unparseable body, an unknown path or method) in our error shape."""
        code = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}.get(exc.status_code,
                                                                                       "INVALID_ARGUMENT")
        where = "body" if exc.status_code == 400 else "path" if exc.status_code == 404 else "method"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # every method served at the path, not just the first route's
            headers = {"Allow": ", ".join(m for m in METHODS if any(
                r.matches({**request.scope, "method": m})[0] is Match.FULL for r in app.router.routes))}
        return JSONResponse({"error": {"code": code, "message": f"{where}: {exc.detail}"}},
                            status_code=exc.status_code, headers=headers)

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return JSONResponse({"error": {"code": "INVALID_ARGUMENT", "message": "body: nested too deeply"}},
                            status_code=400)

    @app.exception_handler(Exception)
    async def _fault(request: Request, exc: Exception) -> JSONResponse:
        logging.getLogger(__name__).error("internal error", exc_info=exc, extra={"path": request.url.path})
        return _internal()

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        """A body, path or query parameter the declared models refuse: 400 naming the field."""
        errors = [{**e, "loc": ()} if e["type"] == "json_invalid" else e for e in exc.errors()]
        return _error(invalid_argument(errors, skip=1))

    @app.get("/", summary="The web chat page", response_class=HTMLResponse)
    async def web_page() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers=PAGE_HEADERS)

    if front_door.api_docs:
        @app.get("/docs", include_in_schema=False)
        async def api_docs() -> FileResponse:
            return FileResponse(WEB_DIR / "docs.html", headers=PAGE_HEADERS)

        app.docs_url = "/docs"

    app.mount("/vendor", StaticFiles(directory=WEB_DIR / "vendor"), name="vendor")
    app.mount("/static", StaticFiles(directory=WEB_DIR / "static"), name="static")

    @app.get("/healthz", summary="Health of the gateway and the services it calls (503 when degraded)",
             response_model=Health, name="health",
             responses={503: {"model": Health, "description": "Degraded: a service is not serving"}})
    async def healthz() -> JSONResponse:
        services = await health()
        ok = all(v == "SERVING" for v in services.values())
        return JSONResponse({"status": "ok" if ok else "degraded", "services": services},
                            status_code=200 if ok else 503)

    @app.get("/metrics", summary="Prometheus metrics of the gateway process (text exposition format)",
             response_class=PlainTextResponse, name="metrics",
             responses={404: {"model": Error, "description": "NOT_FOUND: metrics are off (METRICS_ENABLED=false)"}})
    async def metrics_page() -> Response:
        """Prometheus' scrape (every metric of this process), open like /healthz; 404 with METRICS_ENABLED=false."""
        if not metrics.enabled():
            return JSONResponse({"error": {"code": "NOT_FOUND", "message": "path: metrics are off"}}, status_code=404)
        return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)

    @app.get("/api/meta", summary="Configured models, data sources, the tenant's fund names, and who the credential is",
             **returns(Meta))
    async def meta(who: Identity = Depends(caller)) -> dict:
        m = await describe(who, models, pipeline.default_model, library)
        return {"models": m.models, "default_model": m.default_model, "web_search_models": m.web_search_models,
                "data_sources": m.data_sources, "funds": m.funds,
                "identity": {"tenant": who.tenant, "user": who.user, "role": who.role, "groups": list(who.groups)}}

    app.include_router(chat_router(pipeline, memory, conversations, caller))
    app.include_router(conversations_router(conversations, caller))
    app.include_router(documents_router(retriever, library, max_file_bytes, caller, pipeline.rate,
                                        upload_memory))
    app.include_router(transcripts_router(transcripts, caller))
    app.include_router(chunks_router(library, caller))
    app.include_router(catalog_router(library, caller))
    app.mount("/v1", openai_app(pipeline, caller))  # the OpenAI-compatible chat edge, under the same guards
    app.router.routes.append(Route(MCP_PATH, mcp.app, methods=["POST"], name="mcp"))  # stateless: no GET stream
    install_openapi(app, offered_models=pipeline.models.offered_now, max_body_bytes=max_body_bytes,
                    max_upload_bytes=max_upload_bytes)
    return app
