"""Embedder gRPC servicer: protobuf in, micro-batched backend call, protobuf out."""
from __future__ import annotations

import grpc

from ragmesh.errors import InvalidArgument
from ragmesh.serving import deadline_var
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.backends import EmbeddingBackend
from services.embedder.batcher import MicroBatcher

MAX_TEXTS = 2048


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self, backend: EmbeddingBackend, batcher: MicroBatcher) -> None:
        self.backend = backend
        self.batcher = batcher

    async def Embed(self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext):
        if len(request.texts) > MAX_TEXTS:
            raise InvalidArgument("texts", f"at most {MAX_TEXTS} texts a call, got {len(request.texts)}")
        task = "QUERY" if request.task == embedder_pb2.QUERY else "DOCUMENT"
        # The deadline lets the batcher skip a caller that has given up before its batch runs.
        vectors = await self.batcher.embed(list(request.texts), task, deadline_var.get())
        return embedder_pb2.EmbedResponse(
            vectors=[embedder_pb2.Vector(values=v) for v in vectors.tolist()],
            model=self.backend.model_name,
            dimensions=self.backend.dimensions,
        )

    async def Info(self, request: embedder_pb2.InfoRequest, context: grpc.aio.ServicerContext):
        return embedder_pb2.InfoResponse(
            model=self.backend.model_name, dimensions=self.backend.dimensions,
            backend=type(self.backend).__name__, max_batch=self.backend.max_batch,
        )
