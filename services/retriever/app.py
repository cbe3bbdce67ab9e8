"""Wires the retriever: store, embedder client, indexes rebuilt from the store at warm-up."""
from __future__ import annotations

import asyncio
import logging

import grpc
import numpy as np

from ragmesh.clients import EmbedderClient
from ragmesh.config import Settings
from ragmesh.errors import RagmeshError
from ragmesh.serving import ServiceApp
from ragmesh.store import open_store
from ragmesh.v1 import retriever_pb2_grpc
from services.retriever.index import IndexRegistry
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.search import SearchEngine
from services.retriever.servicer import RetrieverServicer

log = logging.getLogger(__name__)

FALLBACK_DIMENSIONS = 384


class RetrieverApp(ServiceApp):
    service_name = "ragmesh.v1.Retriever"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = open_store(settings)
        self.registry = IndexRegistry(FALLBACK_DIMENSIONS)
        self.embedder: EmbedderClient | None = None
        self.engine = SearchEngine(self.registry, self._embed)
        self.ingestor = Ingestor(
            self.store, self.registry, self._embed,
            settings.chunk_min_chars, settings.chunk_max_chars, settings.embed_batch_size,
        )

    async def _embed(self, texts: list[str], task: str) -> np.ndarray:
        assert self.embedder is not None, "embed called before warm-up"
        return await self.embedder.embed(texts, task)

    def register(self, server: grpc.aio.Server) -> None:
        retriever_pb2_grpc.add_RetrieverServicer_to_server(
            RetrieverServicer(self.engine, self.ingestor, self.store), server
        )

    async def warm_up(self) -> None:
        self.embedder = EmbedderClient(self.settings.address("embedder"), self.settings.embed_timeout)
        try:
            info = await self.embedder.info()
            self.registry.dimensions = info.dimensions
        except RagmeshError as exc:
            log.warning("embedder not reachable at start; dense search waits for it",
                        extra={"error": str(exc)})
        chunks = await asyncio.to_thread(self.registry.rebuild, self.store)
        log.info("indexes rebuilt from the store",
                 extra={"chunks": chunks, "collections": self.registry.names(), "store": repr(self.store)})

    async def close(self) -> None:
        if self.embedder is not None:
            await self.embedder.close()
        self.store.close()
