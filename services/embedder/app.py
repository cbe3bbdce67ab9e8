"""Wires the embedder: backend from settings, micro-batcher, servicer, warm-up."""
from __future__ import annotations

import asyncio

import grpc

from ragmesh.config import Settings
from ragmesh.serving import ServiceApp
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import embedder_pb2_grpc
from services.embedder import backends
from services.embedder.batcher import MicroBatcher
from services.embedder.limits import EmbedLimits
from services.embedder.servicer import EmbedderServicer


class EmbedderApp(ServiceApp):
    service_name = "ragmesh.v1.Embedder"

    def __init__(self, settings: Settings) -> None:
        self.backend = backends.create(settings)
        self.batcher = MicroBatcher(self.backend, settings.embed_batch_window_ms, settings.embed_max_batch,
                                    settings.embed_max_queue)
        self.limits = EmbedLimits.from_settings(settings)
        self.key_store = LazyStore(settings)  # operators' keys; opened on the first one

    def register(self, server: grpc.aio.Server) -> None:
        servicer = EmbedderServicer(self.backend, self.batcher, self.limits)
        embedder_pb2_grpc.add_EmbedderServicer_to_server(servicer, server)

    async def warm_up(self) -> None:
        await asyncio.to_thread(self.backend.warm_up)

    async def close(self) -> None:
        await self.batcher.close()
        self.key_store.close()
