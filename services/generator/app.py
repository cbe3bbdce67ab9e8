"""Wires the generator: the extractive backend always, LLM backends when configured."""
from __future__ import annotations

import grpc

from ragmesh.config import Settings
from ragmesh.models import EXTRACTIVE, default_model
from ragmesh.serving import ServiceApp
from ragmesh.v1 import generator_pb2_grpc
from services.generator.backends import GenerationBackend
from services.generator.backends.extractive import ExtractiveBackend
from services.generator.service import GenerationService
from services.generator.servicer import GeneratorServicer


class GeneratorApp(ServiceApp):
    service_name = "ragmesh.v1.Generator"

    def __init__(self, settings: Settings) -> None:
        backends: dict[str, GenerationBackend] = {EXTRACTIVE: ExtractiveBackend(settings.extractive_delay_ms)}
        self.service = GenerationService(backends, default_model(settings.default_model, settings.gemini_api_key))

    def register(self, server: grpc.aio.Server) -> None:
        generator_pb2_grpc.add_GeneratorServicer_to_server(GeneratorServicer(self.service), server)
