"""Wires the gateway: clients to the other three services, the pipeline, the gRPC
servicer, and the HTTP bridge served by uvicorn in the same event loop (httptools, with a deadline
for each request's headers: HTTP_HEADER_TIMEOUT_S)."""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

import grpc
import uvicorn
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh.access import Principals, principals
from ragmesh.admission import Admission
from ragmesh.clients import ClientAuth, EmbedderClient, GeneratorClient, RetrieverClient
from ragmesh.config import GatewaySettings
from ragmesh.errors import RagmeshError
from ragmesh.identity.authenticator import Authenticator
from ragmesh.message_limits import MessageLimits
from ragmesh.models import default_model
from ragmesh.request_context import identity_var
from ragmesh.serving import ServiceApp
from ragmesh.spool import SPOOL_DIR, Spool
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import gateway_pb2_grpc
from services.gateway.api import FrontDoor, create_app
from services.gateway.api.protocol import with_header_deadline
from services.gateway.boosts import default_windows
from services.gateway.conversations import Conversations
from services.gateway.history import History
from services.gateway.library import Library
from services.gateway.limits import RateLimiter, UsageLimiter
from services.gateway.memory import Memory
from services.gateway.pipeline import AskPipeline
from services.gateway.planner import Planner
from services.gateway.request import SOURCE_COLLECTIONS
from services.gateway.servicer import GatewayServicer
from services.gateway.shared_state import open_shared_state
from services.gateway.transcripts import Transcripts
from services.gateway.upload_memory import Uploads

log = logging.getLogger(__name__)

FUNDS_REFRESH_S = 60.0
FUNDS_KEPT = 1024  # reader sets whose fund names are kept (least recently used out)


class GatewayApp(ServiceApp):
    service_name = "ragmesh.v1.Gateway"
    audience = "users"
    settings_model = GatewaySettings

    def __init__(self, settings: GatewaySettings) -> None:
        """Raises ConfigError for settings the HTTP bridge must not start with."""
        self.settings = settings
        self.store = LazyStore(settings)  # opened at warm-up: an unreachable database means NOT_SERVING
        self.key_store = self.store
        self.allowed_hosts = settings.allowed_host_names()
        self.default_windows = default_windows(settings.default_window_days)
        self.history = History(self.store)
        self.http_port = settings.http_port
        self._http: uvicorn.Server | None = None
        self._http_task: asyncio.Task | None = None
        # per tenant and reader set: (fetched at, names)
        self._funds: OrderedDict[tuple[str, Principals | None], tuple[float, list[str]]] = OrderedDict()

    def register(self, server: grpc.aio.Server) -> None:
        s = self.settings
        # Channels bind to the running loop, so clients are made here, inside the server's start.
        auth = ClientAuth.service(s)  # on behalf of the caller the gateway authenticated
        self.embedder = EmbedderClient(s.address("embedder"), s.embed_timeout, auth)
        self.retriever = RetrieverClient(s.address("retriever"), s.search_timeout, s.ingest_timeout, auth)
        self.uploads = Uploads.of(Spool(s.data_dir / SPOOL_DIR / "gateway"),
                                  s.upload_memory_per_tenant_mb * 1024 * 1024,
                                  MessageLimits.from_settings(s).of("/ragmesh.v1.Gateway/Ingest")[0])
        self.generator = GeneratorClient(s.address("generator"), s.generate_timeout, auth)
        self.memory = Memory(self.store, self.retriever, self.generator, self.embedder, s.history_char_budget,
                             s.memory_queue_max)
        # Running answers, scope cache and rate windows: in this process, or in Redis shared by replicas.
        self.shared = open_shared_state(s)
        planner = Planner(self.retriever, self.generator, self.embedder, self.shared.scopes, self.known_funds, s,
                          default_model(s.default_model, s.gemini_api_key), self.default_windows)
        self.pipeline = AskPipeline(self.history, self.generator, planner, self.memory,
                                    UsageLimiter(self.store, s.monthly_message_limit, s.monthly_token_limit),
                                    RateLimiter(s.rate_limit_per_minute, self.shared.rates),
                                    Admission("gateway: retrieval", s.max_concurrent_retrievals,
                                              tenant_share=s.tenant_call_share, user_share=s.user_call_share),
                                    self.shared, self._others_busy)
        self.conversations = Conversations(self.history, self.memory, self.pipeline)
        self.transcripts = Transcripts(self.retriever, self.generator, self.pipeline.default_model)
        self.library = Library(lambda: self.retriever, self.known_funds)
        gateway_pb2_grpc.add_GatewayServicer_to_server(self.servicer(), server)

    def servicer(self) -> GatewayServicer:
        return GatewayServicer(self.pipeline, self.conversations, self.retriever, self.memory, self.transcripts,
                               self.library, self.uploads)

    def _others_busy(self, tenant: str) -> bool:
        """Whether another tenant has a call in flight at this gateway (HTTP or gRPC): the serving host's
        admission, made once the server starts."""
        return self.admission is not None and self.admission.others_busy(tenant)

    async def upstream_health(self) -> dict[str, str]:
        async def check(name: str, channel: grpc.aio.Channel) -> tuple[str, str]:
            try:
                reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
                return name, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError as exc:
                return name, exc.code().name

        checks = [check(n, c.channel) for n, c in
                  (("embedder", self.embedder), ("retriever", self.retriever), ("generator", self.generator))]
        own = "NOT_SERVING" if self.admission is not None and self.admission.full else "SERVING"  # no free slot
        return {"gateway": own, **dict(await asyncio.gather(*checks))}

    async def known_funds(self, tenant: str) -> list[str]:
        """Fund names in the documents the caller may read (what a question's fund mentions are matched
        against, what the fund picker offers), refreshed at most once a minute. Kept per reader set (the
        tenant, the user, its groups), as the retriever answers them: a fund named only in a document
        shared with one user never reaches a colleague. Called while serving one of the tenant's users,
        so the retriever answers for that user."""
        who = identity_var.get()
        key = (tenant, None if who is None else principals(who))
        fetched, funds = self._funds.get(key, (0.0, []))
        if time.monotonic() - fetched > FUNDS_REFRESH_S or not funds:
            try:
                funds = await self.retriever.field_values("fund_name", list(SOURCE_COLLECTIONS.values()))
                self._funds[key] = (time.monotonic(), funds)
            except RagmeshError as exc:
                log.warning("fund names unavailable", extra={"error": str(exc)})
        if key in self._funds:
            self._funds.move_to_end(key)
            while len(self._funds) > FUNDS_KEPT:
                self._funds.popitem(last=False)
        return funds

    async def warm_up(self) -> None:
        await asyncio.to_thread(self.store.connect)
        await self.shared.start()  # Redis down is no reason not to serve: answers flow, degraded (says so)
        log.info("shared conversation state", extra={"where": self.shared.where})
        if self._http is not None:
            return  # a retry after the store came back: the HTTP bridge is up already
        s = self.settings
        await self.pipeline.models.configured()  # what the OpenAPI document offers, as the generator says
        app = create_app(
            pipeline=self.pipeline, memory=self.memory, conversations=self.conversations, transcripts=self.transcripts,
            retriever=lambda: self.retriever, library=self.library, authenticator=Authenticator(s, self.store, "users"),
            allowed_hosts=self.allowed_hosts, health=self.upstream_health,
            models=self.pipeline.models.configured,
            admission=self.admission, front_door=FrontDoor.of(s), max_body_bytes=s.http_max_body_bytes,
            max_upload_bytes=s.upload_max_bytes, max_file_bytes=s.ingest_max_bytes, upload_memory=self.uploads.memory,
        )
        self.http_app = app  # the FastAPI app (tests read its routes)
        tls_files = {"ssl_certfile": s.tls_cert, "ssl_keyfile": s.tls_key} if s.tls_cert else {}
        # lifespan on: the MCP server's session manager runs for as long as the bridge serves (api/mcp_tools.py)
        config = uvicorn.Config(app, host=s.host, port=self.http_port, log_config=None, lifespan="on",
                                access_log=False, http=with_header_deadline(s.http_header_timeout_s),
                                proxy_headers=bool(s.forwarded_allow_ips.strip()),
                                forwarded_allow_ips=s.forwarded_allow_ips, **tls_files)
        self._http = uvicorn.Server(config)
        self._http_task = asyncio.create_task(self._http.serve())
        while not self._http.started:
            if self._http_task.done():
                raise OSError(f"HTTP bridge failed to start on port {self.http_port}")
            await asyncio.sleep(0.02)
        self.http_port = self._http.servers[0].sockets[0].getsockname()[1]
        scheme = "https" if s.tls_cert else "http"
        log.info("http bridge listening", extra={"url": f"{scheme}://{s.host}:{self.http_port}/"})

    async def close(self) -> None:
        try:  # background memory work finishes before the clients close
            await asyncio.wait_for(self.memory.idle(), timeout=self.settings.grace_period)
        except asyncio.TimeoutError:
            log.warning("background memory work cut short by shutdown")
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            await self._http_task
        for client in (self.embedder, self.retriever, self.generator):
            await client.close()
        await self.shared.close()
        self.store.close()
