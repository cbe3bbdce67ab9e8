"""Failures on the OpenAI-compatible edge (/v1) in OpenAI's error object, `{"error": {"message", "type",
"param", "code"}}`, with the status the rest of the API gives the same failure, so the OpenAI SDKs raise
the error class a caller expects (BadRequestError, AuthenticationError, NotFoundError, RateLimitError...).
The routes' own errors are shaped by the /v1 app's handlers; `OpenAIErrors` reshapes the refusals the
guards in front of every route send before a request reaches it (no credential, a rate window, a body
too large or too slow, the Host and Origin rules)."""
from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmesh.errors import InvalidArgument, NotFound, RagmeshError, ResourceExhausted

PREFIX = "/v1/"
# OpenAI's `type` for each status it shares with ragmesh; any other 4xx is an invalid request, 5xx a server error.
TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error",
         429: "rate_limit_error"}
# OpenAI's `code` for ragmesh's codes where OpenAI has one; any other code is ragmesh's, in lower case.
CODES = {"UNAUTHENTICATED": "invalid_api_key", "RESOURCE_EXHAUSTED": "rate_limit_exceeded",
         "INVALID_ARGUMENT": "invalid_value"}


class Unsupported(InvalidArgument):
    """An OpenAI request field this endpoint does not honour (tools, n > 1, logprobs...)."""

    openai_code = "unsupported_parameter"


class UnknownParameter(InvalidArgument):
    """A field neither OpenAI nor ragmesh's extensions define."""

    openai_code = "unknown_parameter"


class ModelNotFound(NotFound):
    """A `model` that names no answer profile (GET /v1/models lists them), in OpenAI's words."""

    openai_code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist or you do not have access to it.")
        self.field = "model"


def error_object(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body for a failure of `status` with ragmesh's `code` (or an OpenAI code)."""
    kind = TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": CODES.get(code, code.lower())}}


def of_error(exc: RagmeshError) -> dict[str, Any]:
    field = getattr(exc, "field", None)
    return error_object(exc.http_status, getattr(exc, "openai_code", exc.code), str(exc), field)


def headers_of(exc: RagmeshError) -> dict[str, str]:
    """What the native API sends with the same failure: WWW-Authenticate on a 401, Retry-After on a 429."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else {}
    if isinstance(exc, ResourceExhausted):
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    return headers


def reshaped(status: int, body: bytes) -> bytes:
    """A guard's refusal (`{"error": {"code", "message"}}`, its message "field: why" when a field is at
    fault) as OpenAI's error object; a body already in OpenAI's shape, or not an error, as it is."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body
    if not isinstance(error, dict) or "type" in error or "code" not in error:
        return body
    message = str(error.get("message", ""))
    field, colon, _ = message.partition(": ")
    param = field if colon and status == 400 and field.isidentifier() else None
    return json.dumps(error_object(status, str(error["code"]), message, param)).encode()


class OpenAIErrors:
    """Pure ASGI middleware, outside the guards: their JSON refusals of /v1 requests reshaped."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        parts: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400 and any(
                    k.lower() == b"content-type" and v.startswith(b"application/json") for k, v in message["headers"]):
                start = message  # held until the whole body is in
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = reshaped(start["status"], b"".join(parts))
            headers = [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                       for k, v in start["headers"]]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, sending)
