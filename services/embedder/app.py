"""Wires the embedder: backend from settings, micro-batcher, servicer, warm-up."""
from __future__ import annotations

import asyncio

import grpc

from ragmesh.config import EmbedderSettings
from ragmesh.serving import ServiceApp
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import embedder_pb2_grpc
from services.embedder import backends
from services.embedder.batcher import MicroBatcher
from services.embedder.limits import EmbedLimits
from services.embedder.servicer import EmbedderServicer


# Characters a backend call of the local model carries while tenants share it: one text of 2,000
# characters (about 30 ms on 2 cores), or 40 questions; a tenant alone gets slices twice that (5 ingest
# chunks of 800 characters, which embed as fast as 64 a call; 2 a call would be 12% slower). Measured
# for issue 23.
LOCAL_SLICE_CHARS = 2048


def slice_chars(settings: EmbedderSettings) -> int:
    """EMBED_SLICE_CHARS, or LOCAL_SLICE_CHARS for the local model and no slicing for Gemini, whose
    time is spent on Google's machines, not on the cores this embedder shares."""
    if settings.embed_slice_chars is not None:
        return settings.embed_slice_chars
    return LOCAL_SLICE_CHARS if settings.embed_backend == "local" else 0


class EmbedderApp(ServiceApp):
    service_name = "ragmesh.v1.Embedder"
    settings_model = EmbedderSettings

    def __init__(self, settings: EmbedderSettings, backend: backends.EmbeddingBackend | None = None) -> None:
        self.backend = backend or backends.create(settings)  # a test's fake, or the one settings name
        self.batcher = MicroBatcher(self.backend, settings.embed_batch_window_ms, settings.embed_max_batch,
                                    settings.embed_max_queue, slice_chars(settings), self.backend.lanes)
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
