"""Gemini through google-genai's async client, as the fund-research route calls it:
the four frontend names map to an API model and thinking settings, temperature 1 unless
the caller sets one, Google Search as a tool when web search is on. Thought summaries
stream as `thinking` events, grounding metadata becomes web citations and usage
metadata a `usage` event; provider failures become domain errors."""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragmesh.context_budget import ContextBudget, for_window
from ragmesh.types import Citation, GenEvent
from services.generator.backends import GenerationRequest
from services.generator.backends.detached import detached
from ragmesh.provider_errors import gemini_error

if TYPE_CHECKING:
    from google.genai import types


@dataclass(frozen=True)
class GeminiModel:
    api_model: str
    thinking_level: str | None = None  # None: the model's default thinking
    window_tokens: int = 1_048_576  # input tokens the API takes (Gemini 2.5 and 3 Pro: about a million)


MODELS = {
    "gemini-2.5-flash": GeminiModel("gemini-2.5-flash"),
    "gemini-2.5-pro": GeminiModel("gemini-2.5-pro"),
    "gemini-3-low-thinking": GeminiModel("gemini-3-pro-preview", thinking_level="LOW"),
    "gemini-3-high-thinking": GeminiModel("gemini-3-pro-preview"),  # Gemini 3's default is high
}
DEFAULT_TEMPERATURE = 1.0


class GeminiGenerator:
    name = "gemini"

    def __init__(self, api_key: str, base_url: str = "") -> None:
        from google import genai
        from google.genai import types

        if not api_key:
            raise ValueError("the Gemini backend needs GEMINI_API_KEY")
        self.client = genai.Client(api_key=api_key, http_options=types.HttpOptions(base_url=base_url or None))

    async def close(self) -> None:
        await self.client.aio.aclose()

    def budget(self, model: str) -> ContextBudget:
        return for_window(MODELS[model].window_tokens)

    def config(self, request: GenerationRequest) -> types.GenerateContentConfig:
        from google.genai import types

        model = MODELS[request.model]
        return types.GenerateContentConfig(
            system_instruction=request.system_instruction or None,
            temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
            thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_level=model.thinking_level),
            tools=[types.Tool(google_search=types.GoogleSearch())] if request.web_search else None,
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        api_model = MODELS[request.model].api_model
        config = self.config(request)

        async def chunks() -> AsyncIterator[types.GenerateContentResponse]:
            response = await self.client.aio.models.generate_content_stream(
                model=api_model, contents=request.prompt or request.question, config=config,
            )
            async for chunk in response:
                yield chunk

        answer = _Answer(api_model)
        try:
            async with aclosing(detached(chunks)) as stream:
                async for chunk in stream:
                    for event in answer.read(chunk):
                        yield event
        except Exception as exc:
            error = gemini_error(exc)
            if error is None:
                raise
            raise error from exc
        for event in answer.ending():
            yield event


class _Answer:
    """Reads streamed chunks: text out as events at once; sources, usage and finish reason kept for the end."""

    def __init__(self, api_model: str) -> None:
        self.model = api_model
        self.web: dict[str, Citation] = {}  # url -> citation, first mention first
        self.queries: dict[str, None] = {}  # the Google searches the model ran, in order, once each
        self.usage: dict[str, int] = {}
        self.finish = "stop"

    def read(self, chunk: types.GenerateContentResponse) -> list[GenEvent]:
        self.model = chunk.model_version or self.model
        if chunk.usage_metadata:
            self.usage = _usage(chunk.usage_metadata)  # cumulative: the last one counts
        if not chunk.candidates:
            return []
        candidate = chunk.candidates[0]
        if candidate.finish_reason:
            self.finish = str(getattr(candidate.finish_reason, "value", candidate.finish_reason)).lower()
        if candidate.grounding_metadata:
            self.queries |= dict.fromkeys(candidate.grounding_metadata.web_search_queries or [])
            for source in candidate.grounding_metadata.grounding_chunks or []:
                if source.web and source.web.uri and source.web.uri not in self.web:
                    self.web[source.web.uri] = Citation(len(self.web) + 1, title=source.web.title or "",
                                                        url=source.web.uri)
        parts = (candidate.content.parts if candidate.content else None) or []
        return [GenEvent("thinking" if p.thought else "content", text=p.text) for p in parts if p.text]

    def ending(self) -> list[GenEvent]:
        grounded = self.web or self.queries
        events = [GenEvent("grounding", citations=list(self.web.values()), queries=list(self.queries))] if grounded else []
        if self.usage:
            events.append(GenEvent("usage", usage=self.usage))
        return events + [GenEvent("done", model=self.model, text=self.finish)]


def _usage(meta: types.GenerateContentResponseUsageMetadata) -> dict[str, int]:
    prompt = meta.prompt_token_count or 0
    completion = meta.candidates_token_count or 0
    thinking = meta.thoughts_token_count or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "thinking_tokens": thinking,
            "total_tokens": meta.total_token_count or prompt + completion + thinking}
