"""All four services in-process, each a real grpc.aio server on a free loopback port,
plus the HTTP bridge; the event loop runs in a background thread so tests stay synchronous.

Every call needs a credential: `stack.admin_key` is an admin key of tenant DEMO (the tenant the
demo corpus is loaded into), `stack.key(...)` makes others, `stack.headers` / `stack.metadata`
carry the admin key over HTTP and gRPC."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from ragmesh import config
from ragmesh.identity import keys
from ragmesh.identity.authenticator import pepper, service_token
from ragmesh.serving import ServiceHost
from ragmesh.store.sqlite import SqliteStore
from tests.auth import bearer, headers
from services.embedder.app import EmbedderApp
from services.gateway.app import GatewayApp
from services.generator.app import GeneratorApp
from services.retriever.app import RetrieverApp

T = TypeVar("T")
HOST = "127.0.0.1"
DEMO = "demo"


class Stack:
    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        # One model runtime in the embedder (ONNX), so the stack starts in time on a busy machine; the
        # bf16 document path is tested on its own (tests/integration/test_embedder_onnx.py).
        base = dict(host=HOST, data_dir=data_dir, http_port=0, extractive_delay_ms=1.0, service_token="",
                    api_key_pepper="", tls_cert="", tls_key="", tls_ca="", allowed_hosts="",
                    embed_documents_bf16="off", rate_limit_per_minute=0, auth_failures_per_minute=0)
        self.settings = config.load().replace(**(base | overrides))
        self.loop = uvloop.new_event_loop()  # the gateway's loop in production (services/gateway/__main__.py)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.hosts: dict[str, ServiceHost] = {}
        self.extra: list[ServiceHost] = []

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> "Stack":
        self.thread.start()
        for name in ("embedder", "generator", "retriever", "gateway"):
            self.start_service(name)
        self.admin_key = self.key(DEMO, "admin", "admin")
        return self

    def key(self, tenant: str, user: str, role: str = "member", expires_days: float = 0,
            groups: Sequence[str] = ()) -> str:
        """A new API key, stored as `ragmesh keys create` stores it."""
        key, record = keys.new_key(pepper(self.settings), tenant, user, role, expires_days=expires_days,
                                   groups=groups)
        store = SqliteStore(self.settings.sqlite_path) if not self.settings.mongodb_uri else None
        assert store is not None, "the test stack makes keys in its SQLite store"
        try:
            store.add_api_key(record)
        finally:
            store.close()
        return key

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers with the DEMO admin key."""
        return headers(self.admin_key)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC metadata with the DEMO admin key (an operator's credential on internal services)."""
        return bearer(self.admin_key)

    def service_metadata(self, tenant: str = DEMO, user: str = "") -> tuple[tuple[str, str], ...]:
        """gRPC metadata as the gateway sends it to internal services: the service token, for a tenant."""
        return bearer(service_token(self.settings), tenant, user)

    def _app(self, name: str, settings: config.Settings | None = None):
        return {"embedder": EmbedderApp, "generator": GeneratorApp,
                "retriever": RetrieverApp, "gateway": GatewayApp}[name](settings or self.settings)

    def start_variant(self, name: str, **overrides: Any) -> ServiceHost:
        """Another instance of a service with different settings (e.g. a generator on a fake Gemini),
        wired to this stack's services unless the overrides say otherwise."""
        settings = self.settings.replace(**overrides)

        async def go() -> ServiceHost:
            host = ServiceHost(self._app(name, settings), settings, 0, grace=0.5)
            await host.start()
            return host

        host = self.call(go())
        self.extra.append(host)
        return host

    def start_service(self, name: str, port: int = 0) -> ServiceHost:
        async def go() -> ServiceHost:
            host = ServiceHost(self._app(name), self.settings, port, grace=0.5)
            await host.start()
            return host

        host = self.call(go())
        self.hosts[name] = host
        if name != "gateway":  # the others are addressed by the services that call them
            self.settings = self.settings.replace(**{f"{name}_addr": host.address})
        return host

    def stop_service(self, name: str) -> None:
        self.call(self.hosts.pop(name).stop())

    def restart_service(self, name: str) -> ServiceHost:
        port = self.hosts[name].port
        self.stop_service(name)
        return self.start_service(name, port)

    def app(self, name: str):
        return self.hosts[name].app

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.app('gateway').http_port}"

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def stop(self) -> None:
        for host in self.extra:
            self.call(host.stop())
        for name in ("gateway", "retriever", "generator", "embedder"):
            if name in self.hosts:
                self.stop_service(name)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
