"""Generator gRPC servicer: protobuf to a GenerationRequest, events back to protobuf."""
from __future__ import annotations

from contextlib import aclosing

import grpc

from ragmesh import convert
from ragmesh.request_context import identity_var
from ragmesh.types import Turn
from ragmesh.v1 import generator_pb2, generator_pb2_grpc
from services.generator.backends import GenerationRequest
from services.generator.service import GenerationService


class GeneratorServicer(generator_pb2_grpc.GeneratorServicer):
    def __init__(self, service: GenerationService) -> None:
        self.service = service

    async def Generate(self, request: generator_pb2.GenerateRequest, context: grpc.aio.ServicerContext):
        domain = GenerationRequest(
            model=request.model,
            question=request.question,
            blocks=[convert.block_from_proto(b) for b in request.blocks],
            history=[Turn(t.question, t.answer) for t in request.history],
            system_instruction=request.system_instruction,
            prompt=request.prompt,
            web_search=request.web_search,
            temperature=request.temperature if request.HasField("temperature") else None,
        )
        # Closed explicitly when the call ends early, so the provider's stream closes now, not at GC.
        who = identity_var.get()
        async with aclosing(self.service.generate(domain, who.tenant if who is not None else "")) as events:
            async for event in events:
                yield convert.gen_event_to_proto(event)

    async def Stats(self, request, context: grpc.aio.ServicerContext):
        counts = self.service.counts(identity_var.get())
        return generator_pb2.GeneratorStatsResponse(
            started=counts.started, completed=counts.completed, cancelled=counts.cancelled,
            models=sorted(self.service.backends),
        )

    async def Budget(self, request: generator_pb2.ContextBudgetRequest, context: grpc.aio.ServicerContext):
        budget = self.service.budget(request.model)
        return generator_pb2.ContextBudget(chars=budget.chars, hits=budget.hits, window_tokens=budget.window_tokens,
                                           complete_records=budget.complete_records)
