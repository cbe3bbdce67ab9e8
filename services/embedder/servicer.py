"""Embedder gRPC servicer: protobuf in, backend call, protobuf out."""
from __future__ import annotations

import asyncio

import grpc

from ragmesh.errors import InvalidArgument
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.backends import EmbeddingBackend

MAX_TEXTS = 2048


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self, backend: EmbeddingBackend) -> None:
        self.backend = backend

    async def Embed(self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext):
        if len(request.texts) > MAX_TEXTS:
            raise InvalidArgument("texts", f"at most {MAX_TEXTS} texts a call, got {len(request.texts)}")
        task = "QUERY" if request.task == embedder_pb2.QUERY else "DOCUMENT"
        vectors = await asyncio.to_thread(self.backend.embed, list(request.texts), task)
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
