"""Wires the generator: the extractive backend always, LLM backends when configured."""
from __future__ import annotations

import grpc

from ragmesh.config import GeneratorSettings
from ragmesh.models import EXTRACTIVE, GEMINI_MODELS, LOCAL, OPENAI, default_model
from ragmesh.serving import ServiceApp
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import generator_pb2_grpc
from services.generator.backends import GenerationBackend
from services.generator.backends.extractive import ExtractiveBackend
from services.generator.service import GenerationService
from services.generator.servicer import GeneratorServicer


def build_backends(settings: GeneratorSettings) -> dict[str, GenerationBackend]:
    """Model name -> backend. Vendor SDKs are imported only when their backend is configured."""
    backends: dict[str, GenerationBackend] = {EXTRACTIVE: ExtractiveBackend(
        settings.extractive_delay_ms, piece_window_ms=settings.stream_piece_ms)}
    if settings.gemini_api_key:
        from services.generator.backends.gemini import GeminiGenerator

        gemini = GeminiGenerator(settings.gemini_api_key, settings.gemini_base_url)
        backends.update(dict.fromkeys(GEMINI_MODELS, gemini))
    if settings.openai_base_url:
        from services.generator.backends.openai_compat import OpenAICompatGenerator

        backends[OPENAI] = OpenAICompatGenerator(
            settings.openai_base_url, settings.openai_api_key, settings.openai_model, settings.openai_context_tokens
        )
    from services.generator.backends import local_llm

    if local_llm.available():  # the optional local-llm extra is installed
        backends[LOCAL] = local_llm.LlamaCppGenerator()
    return backends


class GeneratorApp(ServiceApp):
    service_name = "ragmesh.v1.Generator"
    settings_model = GeneratorSettings

    def __init__(self, settings: GeneratorSettings) -> None:
        self.backends = build_backends(settings)
        self.key_store = LazyStore(settings)  # operators' keys; opened on the first one
        self.service = GenerationService(self.backends, default_model(settings.default_model, settings.gemini_api_key),
                                         settings.stream_piece_ms / 1000)

    def register(self, server: grpc.aio.Server) -> None:
        generator_pb2_grpc.add_GeneratorServicer_to_server(GeneratorServicer(self.service), server)

    async def close(self) -> None:
        """Closes the HTTP clients of the LLM backends (one per backend, shared by its model names)."""
        for backend in {id(b): b for b in self.backends.values()}.values():
            await backend.close()
        self.key_store.close()
