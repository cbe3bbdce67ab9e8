"""Domain errors. Services raise these; the shared server interceptor maps them to gRPC codes
and the HTTP bridge to status codes, so domain code never imports grpc."""
from __future__ import annotations


class RagmeshError(Exception):
    """Base of errors a caller should see with their message."""

    code = "INTERNAL"
    http_status = 500


class InvalidArgument(RagmeshError):
    code = "INVALID_ARGUMENT"
    http_status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotFound(RagmeshError):
    code = "NOT_FOUND"
    http_status = 404


class Unavailable(RagmeshError):
    code = "UNAVAILABLE"
    http_status = 503


class ResourceExhausted(RagmeshError):
    """Too much at once (a concurrency or rate limit, a full queue, a quota): refused fast, with how
    long to wait before trying again (gRPC `retry-after` trailing metadata, HTTP `Retry-After`)."""

    code = "RESOURCE_EXHAUSTED"
    http_status = 429

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeadlineExceeded(RagmeshError):
    """The caller took too long: a stream that sent nothing for its idle timeout is ended, so it does
    not hold a slot it does not use."""

    code = "DEADLINE_EXCEEDED"
    http_status = 408


class Unauthenticated(RagmeshError):
    """The caller sent no credential, or one that is unknown, revoked, expired or badly signed."""

    code = "UNAUTHENTICATED"
    http_status = 401


class PermissionDenied(RagmeshError):
    """The caller is known but its role may not do this (never used for another tenant's objects:
    those answer NotFound, exactly as unknown ids do)."""

    code = "PERMISSION_DENIED"
    http_status = 403


class Misconfigured(RagmeshError):
    """A hop or provider rejected our own credentials (a bad provider key, a wrong service token):
    the caller's request was fine and retrying cannot help until an operator fixes the settings."""

    code = "FAILED_PRECONDITION"
    http_status = 502


class ConfigError(ValueError):
    """Settings a service must not start with; the message names the variable and says what to set."""


def http_status(code: str) -> int:
    """The HTTP status of an error code carried as text (an error event of a stream)."""
    kinds = (InvalidArgument, NotFound, Unavailable, ResourceExhausted, DeadlineExceeded, Unauthenticated,
             PermissionDenied, Misconfigured)
    return next((k.http_status for k in kinds if k.code == code), 500)


def error_of(code: str, message: str) -> RagmeshError:
    """An error event's code and message (a stream's last word) as the error a whole reply raises, so
    both edges answer with the status the stream's event named."""
    if code == ResourceExhausted.code:
        return ResourceExhausted(message)
    error = RagmeshError(message)
    error.code, error.http_status = code, http_status(code)
    return error
