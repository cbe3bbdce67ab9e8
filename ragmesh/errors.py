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
    code = "RESOURCE_EXHAUSTED"
    http_status = 429


class Unauthenticated(RagmeshError):
    """A provider rejected our credentials: retrying cannot help until an operator fixes the key."""

    code = "UNAUTHENTICATED"
    http_status = 401
