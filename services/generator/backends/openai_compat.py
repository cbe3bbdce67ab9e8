"""Any OpenAI-compatible chat completions server (Ollama, vLLM, llama.cpp server, LM
Studio) over httpx: one streamed POST /chat/completions, read as SSE `data:` lines up
to `[DONE]`. Plain httpx rather than a vendor SDK: the wire format is all these servers
share, and the response closes with our stream, so a cancelled call closes the socket."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ragmesh.context_budget import ContextBudget, for_window
from ragmesh.types import GenEvent
from services.generator.backends import GenerationRequest
from ragmesh.provider_errors import http_error, transport_error


class OpenAICompatGenerator:
    name = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, context_tokens: int = 8_192) -> None:
        """`context_tokens`: the served model's context window as the server runs it (OPENAI_CONTEXT_TOKENS)."""
        if not model:
            raise ValueError("OPENAI_MODEL must name the served model when OPENAI_BASE_URL is set")
        self.model = model
        self.context_tokens = context_tokens
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # No read timeout: a long answer is bounded by the caller's gRPC deadline, which cancels us.
        self.client = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=httpx.Timeout(10.0, read=None))

    async def close(self) -> None:
        await self.client.aclose()

    def budget(self, model: str) -> ContextBudget:
        return for_window(self.context_tokens)

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.system_instruction}] if request.system_instruction else []
        messages.append({"role": "user", "content": request.prompt or request.question})
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        model, finish, usage = self.model, "stop", {}
        try:
            async with self.client.stream("POST", "/chat/completions", json=self.body(request)) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise http_error("openai", response.status_code, _message(_json(response.text)),
                                     _seconds(response.headers.get("retry-after", "")))
                async for line in response.aiter_lines():
                    data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
                    if data == "[DONE]":
                        break
                    if not data:
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:  # some servers report failures inside the stream
                        raise http_error("openai", _status(chunk["error"]), _message(chunk))
                    model = chunk.get("model") or model
                    usage = _usage(chunk.get("usage")) or usage
                    for choice in chunk.get("choices", [])[:1]:
                        delta = choice.get("delta") or {}
                        # Reasoning models' thoughts: vLLM/llama.cpp/DeepSeek name the field one way, Ollama another.
                        if thought := delta.get("reasoning_content") or delta.get("reasoning"):
                            yield GenEvent("thinking", text=thought)
                        if text := delta.get("content"):
                            yield GenEvent("content", text=text)
                        finish = choice.get("finish_reason") or finish
        except httpx.TransportError as exc:
            raise transport_error("openai", exc) from exc
        if usage:
            yield GenEvent("usage", usage=usage)
        yield GenEvent("done", model=model, text=finish)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _message(body: Any) -> str:
    """The error message, from OpenAI's {"error": {"message"}} or Ollama's {"error": "..."}."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)[:500]


def _status(error: Any) -> int:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else 500


def _seconds(retry_after: str) -> str:
    return f"{retry_after}s" if retry_after.isdigit() else retry_after


def _usage(raw: dict | None) -> dict[str, int]:
    if not raw:
        return {}
    thinking = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"prompt_tokens": raw.get("prompt_tokens") or 0, "completion_tokens": raw.get("completion_tokens") or 0,
            "thinking_tokens": thinking, "total_tokens": raw.get("total_tokens") or 0}
