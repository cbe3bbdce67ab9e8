"""What belongs to the call being served: its request id, its deadline, the caller's identity and
the service serving it.

The server interceptor (ragmesh.serving) and the gateway's HTTP bridge set them as a call starts;
the clients (ragmesh.clients) read them to pass the deadline, the request id and the identity to
the next hop; logging and tracing stamp log lines and spans with them. They live here, below all of
those, so none of them has to import another for its context.
"""
from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the type: ragmesh.identity reads identity_var from here
    from ragmesh.identity import Identity

# The header (HTTP) and metadata key (gRPC) a request id travels in, both ways.
REQUEST_ID_HEADER = "x-request-id"

request_id_var: ContextVar[str] = ContextVar("request_id", default="")
# Monotonic time by which the current call must finish; None = the caller set no deadline.
deadline_var: ContextVar[float | None] = ContextVar("deadline", default=None)
# The identity of the call being served; set by the server interceptor (gRPC) or the HTTP bridge.
identity_var: ContextVar[Identity | None] = ContextVar("identity", default=None)
# The service whose call is being served (the stamp's source for every span started under it).
service_var: ContextVar[str] = ContextVar("ragmesh_service", default="")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def clean_request_id(raw: object) -> str:
    """The caller's request id when it is short and printable ASCII, else a new one: it goes into
    logs, spans, response headers and gRPC metadata, where anything else breaks or misleads."""
    if isinstance(raw, bytes):
        raw = raw.decode("latin-1")
    if isinstance(raw, str) and _REQUEST_ID.fullmatch(raw):
        return raw
    return uuid.uuid4().hex[:16]
