"""Wires the retriever: store, embedder client, indexes rebuilt from the store at warm-up."""
from __future__ import annotations

import asyncio
import logging

import grpc
import numpy as np

from ragmesh import metrics, tenant_threads
from ragmesh.clients import ClientAuth, EmbedderClient, GeneratorClient, call_timeout
from ragmesh.config import RetrieverSettings
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.validation import check_name
from ragmesh.serving import ServiceApp
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import retriever_pb2_grpc
from services.retriever.backend import CollectionOptions, SearchBackend
from services.retriever.index import IndexRegistry
from services.retriever.freshness import Follower
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.pipeline import Ingestor, SummaryPolicy
from services.retriever.ingest.summaries import Summarizer, SummaryPrompt
from services.retriever.ingest.upsert import Upserter
from services.retriever.ingest.workers import ParsePool
from services.retriever.search import SearchEngine
from services.retriever.servicer import RetrieverServicer

log = logging.getLogger(__name__)

FALLBACK_DIMENSIONS = 384
# How long warm-up waits for the embedder's dimensions: a moment for one starting beside it; without
# them dense search waits for the embedder (the retriever serves keyword search meanwhile).
EMBEDDER_INFO_TIMEOUT_S = 1.0


class RetrieverApp(ServiceApp):
    service_name = "ragmesh.v1.Retriever"
    settings_model = RetrieverSettings

    def __init__(self, settings: RetrieverSettings) -> None:
        self.settings = settings
        self.store = LazyStore(settings)  # opened at warm-up: an unreachable database means NOT_SERVING
        self.key_store = self.store
        self.registry = make_backend(settings)
        metrics.watch_indexes(self.registry)
        self.snapshot_dir = settings.data_dir / "index"
        self.embedder: EmbedderClient | None = None
        self.generator: GeneratorClient | None = None
        self.engine = SearchEngine(self.registry, self._embed, settings.fusion.upper())
        self.committer = Committer(self.store, self.registry)
        self.follower = Follower(self.committer, settings.follow_interval_s)
        self._following: asyncio.Task | None = None
        self.parsing = ParsePool.from_settings(settings)
        self.ingestor = Ingestor(
            self.store, self.registry, self._embed,
            min_chars=settings.chunk_min_chars, max_chars=settings.chunk_max_chars,
            embed_max_chars=settings.embed_max_chars,
            batch_size=settings.embed_batch_size, max_bytes=settings.ingest_max_bytes,
            parsing=self.parsing,
            retries=settings.embed_retries, backoff_s=settings.embed_retry_base_s,
            summarizer=Summarizer(self._summarise),
            summaries=SummaryPolicy(settings.ingest_summaries, settings.summary_min_chars),
            committer=self.committer,
        )

    async def _embed(self, texts: list[str], task: str) -> np.ndarray:
        """A question's vector waits at most half the search's time for an embedder that is not ready
        (the client retries until the deadline it is given): keyword search answers in the other half."""
        assert self.embedder is not None, "embed called before warm-up"
        timeout = call_timeout(self.settings.embed_timeout) / 2 if task == "QUERY" else None
        return await self.embedder.embed(texts, task, timeout)

    async def _summarise(self, p: SummaryPrompt) -> str:
        assert self.generator is not None, "summaries asked for before warm-up"
        events = self.generator.generate(
            model=self.settings.summary_model, question=p.question, blocks=p.blocks, history=[],
            system_instruction=p.instruction, prompt=p.prompt, temperature=p.temperature,
        )
        return "".join([e.text async for e in events if e.kind == "content"])

    async def configure(self, name: str, dense: str, analyzer: dict) -> None:
        """Validates, stores and applies a collection's index options (rebuilding its index)."""
        check_name("name", name)
        options = CollectionOptions(dense=dense, analyzer=analyzer)
        try:
            await asyncio.to_thread(self.registry.configure, name, options)
        except ValueError as exc:
            raise InvalidArgument("dense_index" if "dense" in str(exc) else "analyzer", str(exc)) from exc
        await asyncio.to_thread(self.store.set_collection_options, name, {"dense": dense, "analyzer": analyzer})

    def register(self, server: grpc.aio.Server) -> None:
        retriever_pb2_grpc.add_RetrieverServicer_to_server(
            RetrieverServicer(self.engine, self.ingestor, Upserter(self.committer), self.store, self.configure), server
        )

    async def warm_up(self) -> None:
        tenant_threads.install()  # tenants take the worker threads (searches, chunking, commits) in turn
        await asyncio.to_thread(self.store.connect)
        auth = ClientAuth.service(self.settings)
        self.embedder = self.embedder or EmbedderClient(self.settings.address("embedder"), self.settings.embed_timeout,
                                                        auth)
        self.generator = self.generator or GeneratorClient(self.settings.address("generator"),
                                                           self.settings.generate_timeout, auth)
        try:
            info = await self.embedder.info(EMBEDDER_INFO_TIMEOUT_S)
            self.registry.dimensions = info.dimensions
            if info.max_batch:  # e.g. Gemini's 100 texts a call
                self.ingestor.embedder.batch_size = min(self.ingestor.embedder.batch_size, info.max_batch)
        except RagmeshError as exc:
            log.warning("embedder not reachable at start; dense search waits for it",
                        extra={"error": str(exc)})
        for name, options in (await asyncio.to_thread(self.store.collection_options)).items():
            self.registry.configure(name, CollectionOptions(**options))
        version = await asyncio.to_thread(self.store.version)
        done = await asyncio.to_thread(self.registry.warm_up, self.store, self.snapshot_dir, version)
        log.info(done, extra={"version": version, "backend": self.settings.retriever_backend, "store": repr(self.store)})
        # Other replicas' writes from here on are replayed from the store's change log.
        self.follower.start_from(version)
        if self._following is None:
            self._following = asyncio.create_task(self.follower.run())

    async def close(self) -> None:
        """After the server stopped (no writes in flight): snapshot the indexes for a fast restart."""
        if self._following is not None:
            self._following.cancel()
        self.parsing.close()
        metrics.unwatch_indexes(self.registry)
        if not self.store.connected:
            return
        try:  # caught up first, the snapshot is labelled with the exact version the indexes reflect
            await asyncio.to_thread(self.follower.catch_up)
            await asyncio.to_thread(self.registry.close, self.snapshot_dir, self.follower.applied)
        except (OSError, RagmeshError) as exc:
            log.warning("index snapshot not written", extra={"error": str(exc)})
        for client in (self.embedder, self.generator):
            if client is not None:
                await client.close()
        self.store.close()


def make_backend(settings: RetrieverSettings) -> SearchBackend:
    """RETRIEVER_BACKEND's engine (memory or milvus: the settings were checked when loaded)."""
    if settings.retriever_backend == "milvus":
        from services.retriever.milvus.backend import MilvusBackend, MilvusConfig  # pymilvus only when chosen

        return MilvusBackend(MilvusConfig.from_settings(settings), FALLBACK_DIMENSIONS)
    return IndexRegistry(FALLBACK_DIMENSIONS)
