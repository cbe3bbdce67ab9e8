"""Provider failures as domain errors, so callers get a gRPC code they can act on:
retry later (RESOURCE_EXHAUSTED, UNAVAILABLE), fix the request (INVALID_ARGUMENT) or
fix the key (FAILED_PRECONDITION: our key, not the caller's, is wrong). Shared by every backend that calls a model over HTTP."""
from __future__ import annotations

from typing import Any

import httpx

from ragmesh.errors import (
    InvalidArgument,
    Misconfigured,
    NotFound,
    RagmeshError,
    ResourceExhausted,
    Unavailable,
)


def http_error(provider: str, status: int, message: str, retry_after: str = "") -> RagmeshError:
    """The domain error for an HTTP error status from a model provider."""
    if status == 429:
        wait = f"; retry in {retry_after}" if retry_after else ""
        return ResourceExhausted(f"{provider} rate limit: {message}{wait}")
    if status in (401, 403):
        return Misconfigured(f"{provider} rejected the credentials: {message}")
    if status == 404:
        return NotFound(f"{provider}: {message}")
    if 400 <= status < 500:
        return InvalidArgument(provider, message)
    return Unavailable(f"{provider} failed with HTTP {status}: {message}")


def transport_error(provider: str, exc: Exception) -> Unavailable:
    return Unavailable(f"{provider} unreachable: {type(exc).__name__}: {exc}")


def _transport_errors() -> tuple[type[Exception], ...]:
    """httpx's, and those of httpx2, the fork google-genai 3 sends requests with."""
    try:
        import httpx2
    except ImportError:
        return (httpx.TransportError,)
    return (httpx.TransportError, httpx2.TransportError)


def gemini_error(exc: Exception) -> RagmeshError | None:
    """The domain error for a google-genai or transport exception; None for anything else."""
    from google.genai import errors

    if isinstance(exc, _transport_errors()):
        return transport_error("gemini", exc)
    if not isinstance(exc, errors.APIError):
        return None
    details = _error_details(exc.details)
    message = exc.message or str(exc)
    # Google answers a bad API key with 400 INVALID_ARGUMENT and reason API_KEY_INVALID.
    if any(d.get("reason") == "API_KEY_INVALID" for d in details):
        return Misconfigured(f"gemini rejected the API key: {message}")
    retry = next((d.get("retryDelay", "") for d in details if d.get("@type", "").endswith("RetryInfo")), "")
    return http_error("gemini", int(exc.code or 500), message, retry)


def _error_details(body: Any) -> list[dict]:
    error = body.get("error", body) if isinstance(body, dict) else {}
    details = error.get("details") if isinstance(error, dict) else None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []
