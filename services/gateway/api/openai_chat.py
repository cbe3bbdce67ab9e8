"""The OpenAI-compatible chat edge, mounted at /v1 on the HTTP bridge: POST /v1/chat/completions (whole,
a `chat.completion`; or streamed, `chat.completion.chunk` events ending with `data: [DONE]`) and GET
/v1/models (the answer profiles). Each completion is an Ask through the same pipeline, credential,
guards and access rules as POST /api/chat/ask[/stream] (openai_request.py maps the request); its
citations are the `[n]` markers of the text and a top-level `citations` list in the last chunk and the
whole completion. A client that closes the stream stops the answer, as on the native stream. Every
failure is OpenAI's error object (openai_errors.py); one during a stream a `data: {"error": ...}` event,
the stream's last."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragmesh.errors import InvalidArgument, RagmeshError, http_status
from ragmesh.identity import Identity
from ragmesh.request_context import REQUEST_ID_HEADER, request_id_var
from ragmesh.types import Citation
from ragmesh.validation import invalid_argument
from services.gateway.api.chat import SSE_HEADERS
from services.gateway.api.openai_errors import error_object, headers_of, of_error
from services.gateway.api.openai_request import PROFILES, Profile, chat_call, profile
from services.gateway.pipeline import AskPipeline, Prepared
from services.gateway.whole_answer import whole_answer

CREATED = 1_767_225_600  # the profiles' `created` (2026-01-01): they are part of the release, not made at runtime
CITATION_FIELDS = ("index", "chunk_id", "doc_id", "collection", "title", "date", "url",
                   "chapter", "section", "paragraph")  # where in a book: empty for documents without chapters


def citations_json(citations: list[Citation]) -> list[dict[str, Any]]:
    """What a completion says of each citation: its [index] in the text, and where it comes from."""
    return [{name: getattr(c, name) for name in CITATION_FIELDS} for c in citations]


def usage_json(usage: dict[str, int]) -> dict[str, int]:
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": usage.get("total_tokens") or prompt + completion}


def model_json(p: Profile) -> dict[str, Any]:
    return {"id": p.id, "object": "model", "created": CREATED, "owned_by": "ragmesh", "description": p.description,
            "data_sources": list(p.data_sources)}


class Completion:
    """One completion's identity (`id`, `created`, `model`), shared by its chunks."""

    def __init__(self, model: str) -> None:
        self.head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _data({**self.head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    def whole(self, text: str, citations: list[Citation], usage: dict[str, int]) -> dict[str, Any]:
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
        return {**self.head, "object": "chat.completion", "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": usage_json(usage), "citations": citations_json(citations)}


def _data(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


async def chunks(pipeline: AskPipeline, prepared: Prepared, completion: Completion,
                 include_usage: bool) -> AsyncIterator[str]:
    """The answer's events as chunks: the role, the text as it comes (thinking as `reasoning_content`), a
    last choice with finish_reason and the citations, the usage when asked for, then [DONE]; or an error."""
    usage: dict[str, Any] = {"usage": None} if include_usage else {}
    yield completion.chunk({"role": "assistant", "content": ""}, **usage)
    citations: list[Citation] = []
    async with aclosing(pipeline.run(prepared)) as events:  # closed when the client goes: the answer stops
        async for event in events:
            if event.kind == "content":
                yield completion.chunk({"content": event.value}, **usage)
            elif event.kind == "thinking":
                yield completion.chunk({"reasoning_content": event.value}, **usage)
            elif event.kind == "citations":
                citations = event.value.citations
            elif event.kind == "done":
                yield completion.chunk({}, "stop", citations=citations_json(citations), **usage)
                if include_usage:
                    yield _data({**completion.head, "object": "chat.completion.chunk", "choices": [],
                                 "usage": usage_json(event.value.usage)})
                yield _data("[DONE]")
            elif event.kind == "error":
                yield _data(error_object(http_status(event.value["code"]), event.value["code"], event.value["message"]))
                return


def openai_app(pipeline: AskPipeline, caller: Callable[..., Awaitable[Identity]]) -> FastAPI:
    """The /v1 application (mounted by the bridge, behind its guards; its own error shape)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RagmeshError)
    async def _domain_error(request: Request, exc: RagmeshError) -> JSONResponse:
        return JSONResponse(of_error(exc), status_code=exc.http_status, headers=headers_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _domain_error(request, invalid_argument(exc.errors(), skip=1))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """An unknown path or method under /v1."""
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "INVALID_ARGUMENT")
        return JSONResponse(error_object(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}"),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _fault(request: Request, exc: Exception) -> JSONResponse:
        """A fault of ours: the request id to quote (the bridge's own handler logs the details)."""
        request_id = request_id_var.get()
        return JSONResponse(error_object(500, "INTERNAL", f"internal error (request id {request_id})"),
                            status_code=500, headers={REQUEST_ID_HEADER: request_id})

    @app.get("/models", dependencies=[Depends(caller)])
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model_json(p) for p in PROFILES]}

    @app.get("/models/{model}", dependencies=[Depends(caller)])
    async def get_model(model: str) -> dict[str, Any]:
        return model_json(profile(model))

    @app.post("/chat/completions")
    async def completions(request: Request, who: Identity = Depends(caller)) -> Any:
        call = chat_call(await _json(request))
        prepared = await pipeline.prepare(call.ask, who)  # a rate window, limits, a conversation: before any chunk
        completion = Completion(call.profile.id)
        if call.stream:
            return StreamingResponse(chunks(pipeline, prepared, completion, call.include_usage),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        whole = await whole_answer(pipeline, prepared)  # an error event: raised, answered with its status
        return completion.whole(whole.answer, whole.citations, whole.usage)

    return app


async def _json(request: Request) -> Any:
    """The body as JSON; not JSON (or nested past what can be read): a 400 naming the body."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument("body", f"not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
