"""The HTTP bridge's OpenAPI document. FastAPI generates it from the routes: the request models and
parameters (services/gateway/request.py and the routers: every limit the gateway checks), and what each
route declares it answers (schemas.py). This adds only what the routes cannot say: the Server-Sent
Events media type of the streaming routes, the upload's two bodies (multipart files or JSON documents,
read by hand), the errors and headers every /api route may answer (the guards in front of the routes
give them), the bearer credential, and the models the deployment serves now.
tests/integration/test_openapi.py runs schemathesis against it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import StreamingResponse
from pydantic.json_schema import models_json_schema

from ragmesh.access import MAX_GROUPS, MAX_USERS
from ragmesh.models import KNOWN_MODELS, WEB_SEARCH_MODELS
from ragmesh.request_context import REQUEST_ID_HEADER
from ragmesh.validation import COLLECTION_NAME, PRINCIPAL_NAME, WHITESPACE
from services.gateway.api.schemas import ERRORS, SCHEMAS, STREAMS, Error, strategy_schemas
from services.gateway.document_request import AccessRequest

API_ERRORS = (400, 401, 408, 413, 429, 500, 503)  # any /api route: host, credential, body time and size, admission
WRITE_ERRORS = (403,)  # POST, PATCH and DELETE: the Origin rule
BODY_ERRORS = (415,)  # POST, PUT and PATCH: the content type
REQUEST_ID = {REQUEST_ID_HEADER: {"$ref": "#/components/headers/RequestId"}}
# A JSON object of string values, as text (the multipart `metadata` field): what json.loads reads as one.
_SPACE = r"[ \t\n\r]*"
_STRING = (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
           r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})*"')  # no lone surrogate escapes
_PAIR = f"{_STRING}{_SPACE}:{_SPACE}{_STRING}"
JSON_OBJECT_OF_STRINGS = f"^(?:{_SPACE}\\{{{_SPACE}(?:{_PAIR}{_SPACE}(?:,{_SPACE}{_PAIR}{_SPACE})*)?\\}}{_SPACE})?$"


def _names(most: int) -> str:
    name = f'"{PRINCIPAL_NAME.strip("^$")}"'
    return f"\\[{_SPACE}(?:{name}(?:{_SPACE},{_SPACE}{name}){{0,{most - 1}}})?{_SPACE}\\]"


# The access object as text (the multipart `access` field): what json.loads reads as one AccessRequest.
_MEMBER = (f'(?:"users"{_SPACE}:{_SPACE}{_names(MAX_USERS)}|"groups"{_SPACE}:{_SPACE}{_names(MAX_GROUPS)}'
           f'|"tenant"{_SPACE}:{_SPACE}(?:true|false))')
JSON_ACCESS = (f"^(?:{_SPACE}\\{{{_SPACE}(?:{_MEMBER}{_SPACE}(?:,{_SPACE}{_MEMBER}{_SPACE})*)?\\}}{_SPACE})?$")


def streams(event: str, *errors: int) -> dict[str, Any]:
    """A streaming route's declaration: one JSON `event` object per `data:` line (OpenAPI 3.1 has the
    media type's schema describe one event of the stream), and the errors of its own."""
    stream = {"type": "object", "required": ["data"], "description": f"One event per `data:` line, a JSON {event}",
              "properties": {"data": {"type": "string", "contentMediaType": "application/json",
                                      "contentSchema": {"$ref": SCHEMAS + event}}}}
    return {"response_class": StreamingResponse, "responses": {
        200: {"description": "Server-Sent Events until done or error", "content": {"text/event-stream": {
            "schema": stream}}}, **{status: {"model": Error, "description": ERRORS[status]} for status in errors}}}


_COLLECTION = {"type": "string", "pattern": COLLECTION_NAME, "description": "Letters, digits, '_', '-' or '.', 1-64"}
_TENANT = "Empty or the credential's own tenant (403 otherwise)"
_ACCESS = {"anyOf": [{"$ref": SCHEMAS + "AccessRequest"}, {"type": "null"}],
           "description": "Who may read it besides the uploader; absent or null: the request's, else the "
                          "collection's default"}
# POST /api/documents as JSON: the parser (api/documents.py) refuses any field these do not name.
TEXT_DOCUMENT = {"type": "object", "title": "TextDocument", "required": ["doc_id", "text"],
                 "additionalProperties": False, "properties": {
    "doc_id": {"type": "string", "minLength": 1}, "text": {"type": "string"}, "title": {"type": ["string", "null"]},
    "date": {"type": ["string", "null"]},
    "metadata": {"type": ["object", "null"], "description": "Values are stored as text"}, "access": _ACCESS}}
RECORD = {"type": "object", "title": "Record", "not": {"required": ["text"]}, "properties": {"access": _ACCESS},
          "description": "A record the retriever parses as JSON: a transcript (raw_text / refined_text / tags), "
                         "a meeting note or a factsheet (its fields are the record's own); its `access` is who may "
                         "read it"}
JSON_DOCUMENTS = {"type": "object", "required": ["collection", "documents"], "additionalProperties": False,
                  "properties": {
    "collection": _COLLECTION, "tenant": {"type": ["string", "null"], "description": _TENANT},
    "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"},
                 "description": "Stored with every document"},
    "summarize": {"type": ["boolean", "null"], "description": "null: the collection's setting"},
    "access": {**_ACCESS, "description": "Who may read every document that names none of its own; absent or null: "
                                         "the collection's default"},
    "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [TEXT_DOCUMENT, RECORD]}}}}


def upload_body(max_file: int, max_files: int, max_fields: int) -> dict[str, Any]:
    """POST /api/documents reads its body by hand: files as multipart/form-data, or documents as JSON."""
    form = {"type": "object", "required": ["files", "collection"], "properties": {
        "files": {"type": "array", "minItems": 1, "maxItems": max_files, "items": {"type": "string",
                                                                                    "format": "binary"},
                  "description": f"PDF, Word, PowerPoint, text, Markdown, HTML or JSON files (the field `file` works "
                                 f"too); a file over INGEST_MAX_BYTES ({max_file:,} bytes) fails alone"},
        "collection": _COLLECTION, "tenant": {"type": "string", "description": _TENANT},
        "metadata": {"type": "string", "pattern": JSON_OBJECT_OF_STRINGS,
                     "description": "A JSON object of string values, stored with every document"},
        "meta": {"type": "array", "items": {"type": "string", "pattern": f"^[^=]*[^={WHITESPACE}][^=]*="},
                 "description": f"key=value metadata, repeated (a form has at most {max_fields:,} fields)"},
        "summarize": {"type": "string", "pattern": "^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])?$",
                      "description": "true or false (any case); empty: the collection's setting"},
        "access": {"type": "string", "pattern": JSON_ACCESS, "contentMediaType": "application/json",
                   "contentSchema": {"$ref": SCHEMAS + "AccessRequest"},
                   "description": "Who may read the files besides the uploader, as a JSON AccessRequest; empty: the "
                                  "collection's default"}}}
    return {"required": True, "content": {"multipart/form-data": {"schema": form},
                                          "application/json": {"schema": JSON_DOCUMENTS}},
            "description": f"Files as multipart/form-data (at most {max_files}) or documents as JSON, at most "
                           f"UPLOAD_MAX_BYTES in all (the figure is above). What the retriever refuses in a document "
                           f"(its limits on ids, titles and metadata, a file it cannot parse) fails that document "
                           f"in the stream, not the request."}


ERROR_HEADERS = {401: {"WWW-Authenticate": {"required": True, "description": "Bearer", "schema": {"type": "string"}}},
                 429: {"Retry-After": {"required": True, "description": "Seconds to wait before trying again",
                                       "schema": {"type": "string", "pattern": "^[0-9]+$"}}}}


def _error(status: int) -> dict[str, Any]:
    return {"description": ERRORS[status], "headers": {**REQUEST_ID, **ERROR_HEADERS.get(status, {})},
            "content": {"application/json": {"schema": {"$ref": SCHEMAS + "Error"}}}}


def build(app: FastAPI, *, offered_models: list[str], max_body_bytes: int, max_upload_bytes: int) -> dict[str, Any]:
    """FastAPI's generated document for the app, completed (see the module's docstring)."""
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=(
        "The REST/SSE bridge of the ragmesh gateway. Every /api route needs `Authorization: Bearer <API key "
        "or JWT>`. Errors are JSON {\"error\": {\"code\", \"message\"}} with the status codes each operation "
        f"lists. Request bodies are at most {max_body_bytes:,} bytes (HTTP_MAX_BODY_BYTES; uploads: "
        f"UPLOAD_MAX_BYTES, {max_upload_bytes:,} bytes), refused with 413 as they arrive. Every response carries "
        f"`{REQUEST_ID_HEADER}` (the request's own when it sent one of 1-64 letters, digits and `._:-`, else one "
        f"made for it). A request is identified from its headers before its body is read: without a valid "
        f"credential it is refused (401) at once. A body must arrive whole within HTTP_BODY_TIMEOUT_S "
        f"(uploads: HTTP_UPLOAD_TIMEOUT_S), else 408."))
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):  # validation errors are our 400s
        schemas.pop(unused, None)
    events = [(m, "serialization") for models, _ in STREAMS.values() for m in models]
    schemas.update(models_json_schema(events, ref_template=SCHEMAS + "{model}")[1].get("$defs", {}))
    schemas.update(strategy_schemas())
    schemas.update(models_json_schema([(AccessRequest, "validation")], ref_template=SCHEMAS + "{model}")[1]["$defs"])
    for name, (models, description) in STREAMS.items():
        schemas[name] = {"oneOf": [{"$ref": SCHEMAS + m.__name__} for m in models], "description": description}
    others = ", ".join(m for m in KNOWN_MODELS if m not in offered_models) or "none"
    schemas["AskRequest"]["properties"]["model"] = {"enum": ["", *offered_models, None], "description": (
        "Empty or null: the default model. The models this deployment served when this document was made (GET "
        f"/api/meta has them now); another known model ({others}) is a 400 naming the setting that enables it. Web "
        f"Search needs one of {', '.join(WEB_SEARCH_MODELS)}")}
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer",
                                                 "description": "An API key (rmk_...) or a JWT"}}
    components["headers"] = {"RequestId": {"required": True, "schema": {"type": "string"}, "description": (
        "The request's id: as sent in the request when it is 1-64 letters, digits and `._:-`, else made for it")}}
    doc["security"] = [{"bearer": []}]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            op["responses"].pop("422", None)  # validation errors are our 400s
            if not path.startswith("/api/"):
                op["security"] = []
            else:
                statuses = {*API_ERRORS, *(WRITE_ERRORS if method != "get" else ()),
                            *(BODY_ERRORS if method in ("post", "put", "patch") else ())}
                for status in statuses | {int(s) for s in op["responses"] if s != "200"}:
                    op["responses"][str(status)] = _error(status)
            if "requestBody" in op:
                op["requestBody"].setdefault("description", f"At most {max_body_bytes:,} bytes (HTTP_MAX_BODY_BYTES)")
            for response in op["responses"].values():
                response["headers"] = {**REQUEST_ID, **response.get("headers", {})}
    return doc


def install(app: FastAPI, offered_models: Callable[[], list[str]], **limits: int) -> None:
    """Serves the completed document at the app's openapi_url (made once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, offered_models=offered_models(), **limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
