"""Embedder gRPC servicer: protobuf in, micro-batched backend call, protobuf out."""
from __future__ import annotations

import grpc

from ragmesh.errors import InvalidArgument
from ragmesh.request_context import deadline_var, identity_var
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from services.embedder.backends import EmbeddingBackend
from services.embedder.batcher import MicroBatcher
from services.embedder.limits import EmbedLimits

# The backends' task names; TASK_UNSPECIFIED is a document, as the proto says.
TASKS = {embedder_pb2.TASK_UNSPECIFIED: "DOCUMENT", embedder_pb2.QUERY: "QUERY", embedder_pb2.DOCUMENT: "DOCUMENT",
         embedder_pb2.DOCUMENT_FAST: "DOCUMENT_FAST"}


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(self, backend: EmbeddingBackend, batcher: MicroBatcher, limits: EmbedLimits | None = None) -> None:
        self.backend = backend
        self.batcher = batcher
        self.limits = limits or EmbedLimits()

    async def Embed(self, request: embedder_pb2.EmbedRequest, context: grpc.aio.ServicerContext):
        texts = list(request.texts)
        self.limits.check(texts)
        task = task_of(request.task)
        # The deadline lets the batcher skip a caller that has given up before its batch runs; the
        # tenant (the service credential's acting tenant, or the key's) takes its turn among the others.
        who = identity_var.get()
        vectors = await self.batcher.embed(texts, task, deadline_var.get(), who.tenant if who is not None else "")
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


def task_of(value: int) -> str:
    """The backend's name for a Task; a value this embedder does not know is the caller's error (proto3
    keeps unknown enum values as numbers)."""
    if value not in TASKS:
        raise InvalidArgument("task", f"unknown task {value}: one of {', '.join(embedder_pb2.Task.keys())}")
    return TASKS[value]
