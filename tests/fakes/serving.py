"""One real service on a loopback port inside the test's event loop, for tests that need
the servicer, the interceptor's status codes and real call cancellation, without the whole stack."""
from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from ragmesh import config
from ragmesh.serving import ServiceApp, ServiceHost


def settings(**overrides: Any) -> config.Settings:
    """This machine's settings with no provider configured unless the test says so."""
    base = dict(host="127.0.0.1", gemini_api_key="", gemini_base_url="", openai_base_url="", openai_api_key="",
                openai_model="", default_model="", extractive_delay_ms=0.0)
    return dataclasses.replace(config.load(), **(base | overrides))


@asynccontextmanager
async def serving(app: ServiceApp) -> AsyncIterator[grpc.aio.Channel]:
    """Starts `app` on a free port and yields a channel to it; stops both afterwards."""
    host = ServiceHost(app, "127.0.0.1", 0, grace=0.5)
    await host.start()
    try:
        async with grpc.aio.insecure_channel(host.address) as channel:
            yield channel
    finally:
        await host.stop()
