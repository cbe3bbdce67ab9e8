"""One real service on a loopback port inside the test's event loop, for tests that need
the servicer, the interceptor's status codes and real call cancellation, without the whole stack."""
from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from ragmesh import config
from ragmesh.identity.authenticator import service_token
from ragmesh.serving import ServiceApp, ServiceHost
from tests.auth import aio_channel, bearer

# Secrets (service token, key pepper) and stores of these one-service tests live here, not in ./data.
_DATA_DIR = tempfile.mkdtemp(prefix="ragmesh-fakes-")


def settings(**overrides: Any) -> config.Settings:
    """This machine's settings with no provider configured unless the test says so."""
    base = dict(host="127.0.0.1", gemini_api_key="", gemini_base_url="", openai_base_url="", openai_api_key="",
                openai_model="", default_model="", extractive_delay_ms=0.0, data_dir=config.Path(_DATA_DIR),
                service_token="", api_key_pepper="", mongodb_uri="", tls_cert="", tls_key="", tls_ca="")
    return config.load().replace(**(base | overrides))


@asynccontextmanager
async def serving(app: ServiceApp, tenant: str = "fakes") -> AsyncIterator[grpc.aio.Channel]:
    """Starts `app` on a free port and yields a channel to it that calls as the gateway does (the
    service token, on behalf of `tenant`); stops both afterwards."""
    s = settings()
    host = ServiceHost(app, s, 0, grace=0.5)
    await host.start()
    try:
        async with aio_channel(host.address, bearer(service_token(s), tenant, "tester")) as channel:
            yield channel
    finally:
        await host.stop()
