"""Documents: `GET /api/documents` lists the documents of the caller's tenant it may read (newest
first, paged, one collection or all; an admin key lists all of them); `GET` / `DELETE
/api/documents/{collection}/{doc_id}` read or delete one; `PUT .../{doc_id}/access` changes who may
read it. Each shows its `access` and `owner`.

`POST /api/documents`: files (multipart/form-data) or JSON text in, the retriever's ingest
progress out as Server-Sent Events, one JSON object per `data:` line.

The retriever decides, from the credential: a member uploads into the collections open to members
(`documents` by default), an admin into any; the uploader owns the document; its owner or an admin
changes its access and deletes it. The documents go into the key's tenant (a `tenant` field naming
another tenant is refused).

Multipart fields: `files` (one or more; `file` works too), `collection`, optional `tenant`,
`metadata` (a JSON object) and/or repeated `meta` (key=value), `summarize` (true/false), `access`
(the access object as JSON text). JSON body: {"collection", "tenant"?, "metadata"?, "summarize"?,
"access"?, "documents": [...]}, each document either {"doc_id", "text", "title"?, "date"?,
"metadata"?, "access"?} or a record the retriever parses as JSON (a transcript with raw_text /
refined_text / tags, a meeting note, a factsheet; its own "access" is who reads it). The access
object is {"users": [...], "groups": [...], "tenant": bool} (services/gateway/document_request.py);
omitted, the collection's default.

Events: one per stage of each document ({"doc_id", "filename", "stage", "chunks", ...}, with
"error" naming the file and the reason when a file fails), then {"done": true, "documents",
"chunks", "redactions", "errors"}; {"error": {code, message}} if the retriever fails mid-way. A
request that cannot be read gets HTTP 400 before any event, and one the retriever refuses whole
before its first event gets that status (PERMISSION_DENIED: 403); a document it refuses alone (a
collection not open to members) is FAILED with the reason."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from ragmesh import access, convert
from ragmesh.clients import RetrieverClient
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.identity import Identity
from ragmesh.paging import DEFAULT_PAGE
from ragmesh.request_context import identity_var
from ragmesh.types import DocumentEntry, DocumentRecord
from ragmesh.v1 import common_pb2, retriever_pb2
from ragmesh.validation import COLLECTION_NAME, MAX_ID_CHARS, NOT_BLANK, check_writable, shown
from services.gateway.api.openapi import JSON_DOCUMENTS, TEXT_DOCUMENT, streams, upload_body
from services.gateway.api.paging import Limit, Offset
from services.gateway.api.schemas import DocumentInfo, Documents, DocumentsDeleted, access_json, returns
from services.gateway.document_request import AccessChange, AccessRequest
from services.gateway.library import Library
from services.gateway.limits import RateLimiter
from services.gateway.upload_memory import FilePiece, TenantBytes, file_pieces

MAX_FILES = 100
MAX_FORM_FIELDS = 1000  # a multipart form's fields (files, repeated meta, ...)
Collection = Annotated[str, Path(pattern=COLLECTION_NAME, description="Letters, digits, '_', '-' or '.', 1-64")]
DocId = Annotated[str, Path(max_length=MAX_ID_CHARS, pattern=NOT_BLANK, description="The document's id (may contain "
                                                                                     "'/')")]


class _DocumentPath(PathConvertor):
    """A document's id in a path: any text, '/' included, but not ending in "/access", which names
    the document's access (PUT .../{doc_id}/access), so no URL is both a document and its access.
    (A document whose id ends so is read and deleted over gRPC.)"""

    regex = r".*(?<!/access)"


register_url_convertor("document", _DocumentPath())


@dataclass
class _Batch:
    """What one request asks to ingest: documents to send, and files refused before sending."""

    collection: str
    documents: list[retriever_pb2.Document | UploadFile] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    template: retriever_pb2.Document = field(default_factory=retriever_pb2.Document)

    async def close(self) -> None:
        """The uploads' spooled files removed (each may be read again until the ingest ends)."""
        for item in self.documents:
            if isinstance(item, UploadFile):
                await item.close()


def _template(collection: str, tenant: str, metadata: dict, summarize: object,
              sharing: common_pb2.Access | None) -> retriever_pb2.Document:
    """The fields every document of the request shares (the tenant is the caller's; the retriever
    takes it from the credential the gateway forwards); `sharing` carries the request's access, if any."""
    check_writable("collection", collection)
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise InvalidArgument("metadata", "must be an object of string values")
    try:
        doc = retriever_pb2.Document(collection=collection, tenant=tenant, metadata=metadata)
    except UnicodeEncodeError:
        raise InvalidArgument("tenant" if not _encodes(tenant) else "metadata",
                              "is not valid Unicode (a lone surrogate)") from None
    if summarize is not None:
        if not isinstance(summarize, bool):
            raise InvalidArgument("summarize", f"must be true or false, got {type(summarize).__name__}")
        doc.summarize = summarize
    _share(doc, sharing)
    return doc


def _access(where: str, sent: object) -> common_pb2.Access | None:
    """The access object `sent` at `where`, checked (absent or null: None, the collection's default)."""
    if sent is None:
        return None
    if not isinstance(sent, dict):
        raise InvalidArgument(where, f"must be an object, got {type(sent).__name__}")
    return convert.access_to_proto(AccessRequest.checked_at(where, sent).to_access())


def _share(doc: retriever_pb2.Document, sharing: common_pb2.Access | None) -> None:
    """Sets who reads the document (replacing what the request's template said), unless `sharing` is None."""
    if sharing is not None:
        doc.access.CopyFrom(sharing)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class _LongInteger:
    """An integer literal past Python's int-string limit (sys.get_int_max_str_digits): kept as its
    length, so the field that holds it can be named instead of the whole body failing to parse."""

    def __init__(self, digits: str) -> None:
        self.digits = len(digits.lstrip("-"))


def _integer(digits: str) -> int | _LongInteger:
    try:
        return int(digits)
    except ValueError:
        return _LongInteger(digits)


def _parsed(where: str, text: str | bytes) -> object:
    """JSON text parsed; InvalidArgument naming the field of an integer too long to convert."""
    value = json.loads(text, parse_int=_integer)  # JSONDecodeError / UnicodeDecodeError for the caller
    _check_integers(where, value)
    return value


def _check_integers(where: str, value: object) -> None:
    if isinstance(value, _LongInteger):
        raise InvalidArgument(where or "body", f"is an integer of {value.digits:,} digits; the limit is "
                                     f"{sys.get_int_max_str_digits():,}")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        _check_integers(f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key, item)


def _form_object(where: str, text: str) -> dict:
    """A form field holding a JSON object."""
    try:
        value = _parsed(where, text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgument(where, "must be a JSON object")
    return value


async def _from_form(request: Request, max_bytes: int) -> _Batch:
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=MAX_FORM_FIELDS)
    except (HTTPException, MultiPartException) as exc:
        raise InvalidArgument("body", f"unreadable multipart form ({getattr(exc, 'detail', exc)})") from None
    files = [f for f in form.getlist("files") + form.getlist("file") if isinstance(f, UploadFile)]
    if not files:
        raise InvalidArgument("files", "no file uploaded (use the multipart field `files`)")
    metadata = _form_object("metadata", str(form.get("metadata") or "{}"))
    for pair in form.getlist("meta"):
        key, sep, value = str(pair).partition("=")
        if not sep or not key.strip():
            raise InvalidArgument("meta", f"expected key=value, got {shown(str(pair))}")
        metadata[key.strip()] = value
    flag = str(form.get("summarize", "")).lower()
    if flag not in ("", "true", "false"):
        raise InvalidArgument("summarize", f"must be true or false, got {shown(flag)}")
    sharing = _form_object("access", str(form.get("access"))) if form.get("access") else None
    batch = _Batch(str(form.get("collection") or ""))
    batch.template = _template(batch.collection, str(form.get("tenant") or ""), metadata,
                               None if not flag else flag == "true", _access("access", sharing))
    for upload in files:
        name = upload.filename or "upload"
        if upload.size is not None and upload.size > max_bytes:
            batch.refused.append({"doc_id": name, "collection": batch.collection, "filename": name, "stage": "FAILED",
                                  "chunks": 0, "error": f"{name}: is {upload.size:,} bytes, over the limit of {max_bytes:,} bytes"})
        else:
            batch.documents.append(upload)
    return batch


def _text(where: str, value: object) -> str:
    """An optional string field of a JSON body: absent or null is ""; anything but a string is refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(where, f"must be a string, got {type(value).__name__}")
    return value


def _object(where: str, value: object) -> dict:
    """An optional object field of a JSON body: absent or null is {}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(where, f"must be an object, got {type(value).__name__}")
    return value


def _declared(where: str, body: dict, schema: dict) -> None:
    """A field the documented schema does not name is refused as the declared bodies refuse one."""
    unknown = next((name for name in body if name not in schema["properties"]), None)
    if unknown is not None:
        raise InvalidArgument(f"{where}{unknown}", "Extra inputs are not permitted")


async def _from_json(request: Request) -> _Batch:
    try:
        body = _parsed("", await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidArgument("body", "is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidArgument("body", "must be a JSON object")
    _declared("", body, JSON_DOCUMENTS)
    items = body.get("documents")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise InvalidArgument("documents", "must be a non-empty list of objects")
    batch = _Batch(_text("collection", body.get("collection")))
    batch.template = _template(batch.collection, _text("tenant", body.get("tenant")),
                               _object("metadata", body.get("metadata")), body.get("summarize"),
                               _access("access", body.get("access")))
    for number, item in enumerate(items, 1):
        where = f"documents[{number - 1}]"
        doc = retriever_pb2.Document()
        doc.CopyFrom(batch.template)
        item = dict(item)
        _share(doc, _access(f"{where}.access", item.pop("access", None)))
        try:  # a lone surrogate ("\ud800" in the JSON) cannot be encoded for the retriever
            if "text" in item:
                _declared(f"{where}.", item, TEXT_DOCUMENT)
                doc_id = item.get("doc_id")
                if not isinstance(item["text"], str) or not isinstance(doc_id, str) or not doc_id:
                    raise InvalidArgument(where, "a text document needs a string `text` and a `doc_id`")
                extra = _object(f"{where}.metadata", item.get("metadata"))
                doc.doc_id, doc.text = doc_id, item["text"]
                doc.title, doc.date = _text(f"{where}.title", item.get("title")), _text(f"{where}.date", item.get("date"))
                doc.metadata.update({k: str(v) for k, v in extra.items()})
            else:  # a record: the retriever's JSON parser maps its fields and finds its id
                doc.filename = f"record-{number}.json"
                doc.content = json.dumps(item, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise InvalidArgument(where, "is not valid Unicode (a lone surrogate)") from None
        batch.documents.append(doc)
    return batch


def _event(p: retriever_pb2.IngestProgress) -> dict:
    event = {"doc_id": p.doc_id, "collection": p.collection, "filename": p.filename,
             "stage": retriever_pb2.IngestStage.Name(p.stage), "chunks": p.chunks}
    if p.doc_type:
        event |= {"doc_type": p.doc_type, "redactions": p.redactions, "sensitivity": p.sensitivity}
    if p.stage == retriever_pb2.INDEXED:
        event["summarized"] = p.summarized
    if p.error:
        event["error"] = p.error
    return event


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _pieces(template: retriever_pb2.Document, upload: UploadFile, memory: TenantBytes, tenant: str) -> list[FilePiece]:
    """A file of the request as the retriever takes it: in pieces read from the multipart spool only
    while each is sent (services/gateway/upload_memory), and read again if the call is sent again."""

    def head() -> retriever_pb2.Document:
        doc = retriever_pb2.Document()
        doc.CopyFrom(template)
        doc.doc_id = doc.filename = upload.filename or "upload"
        doc.mime_type = upload.content_type or ""
        return doc

    async def read(start: int, stop: int) -> bytes:
        await upload.seek(start)
        return await upload.read(stop - start)

    size = upload.size if upload.size is not None else upload.file.seek(0, os.SEEK_END)
    return file_pieces(head, size, read, memory, tenant)


async def _documents(batch: _Batch, memory: TenantBytes, tenant: str
                     ) -> AsyncIterator[retriever_pb2.Document | FilePiece]:
    """The request's documents as the retriever takes them, each upload read piece by piece as it is sent."""
    for item in batch.documents:
        for message in _pieces(batch.template, item, memory, tenant) if isinstance(item, UploadFile) else [item]:
            yield message


async def _started(progress: AsyncIterator[retriever_pb2.IngestProgress]
                   ) -> AsyncIterator[retriever_pb2.IngestProgress]:
    """The ingest's progress, started up to its first event: what the retriever refuses the whole
    upload for (PERMISSION_DENIED for the call) raises here, before the response begins, so it is the
    response's status (403), not an event."""
    first = await anext(progress, None)

    async def again() -> AsyncIterator[retriever_pb2.IngestProgress]:
        if first is not None:
            yield first
            async for p in progress:
                yield p

    return again()


async def _progress(progress: AsyncIterator[retriever_pb2.IngestProgress] | None, batch: _Batch,
                    who: Identity) -> AsyncIterator[str]:
    """The events: the files refused before sending, each stage of each document, then done."""
    identity_var.set(who)  # the retriever ingests into the caller's tenant
    totals = {"documents": 0, "chunks": 0, "redactions": 0, "errors": len(batch.refused)}
    try:
        for refused in batch.refused:
            yield _sse(refused)
        if progress is not None:
            try:
                async for p in progress:
                    if p.stage in (retriever_pb2.INDEXED, retriever_pb2.UNCHANGED):
                        totals["documents"] += 1
                        totals["chunks"] += p.chunks
                        totals["redactions"] += p.redactions
                    totals["errors"] += p.stage == retriever_pb2.FAILED
                    yield _sse(_event(p))
            except RagmeshError as exc:
                yield _sse({"error": {"code": exc.code, "message": str(exc)}})
                return
        yield _sse({"done": True, **totals})
    finally:
        await batch.close()


def _shown(d: DocumentRecord) -> dict:
    """What every view of a document adds: who may read it and its owner, apart from its metadata."""
    a = access.of_metadata(d.metadata)
    return {"metadata": access.shown(d.metadata), "access": access_json(a), "owner": a.owner}


def document_line(e: DocumentEntry) -> dict:
    """A documents list's line: what a picker shows (the type is the ingest's doc_type, else the file's)."""
    d = e.document
    kind = d.metadata.get("doc_type") or d.metadata.get("filetype") or ""
    return {"doc_id": d.doc_id, "collection": d.collection, "title": d.title, "type": kind, "date": d.date,
            "chunk_count": d.chunk_count, "summarized": e.summarized, "updated_at": e.updated_at, **_shown(d)}


def document_json(d: DocumentRecord) -> dict:
    """A document's header, summary and outline, with who may read it."""
    return {**asdict(d), **_shown(d)}


def documents_router(retriever: Callable[[], RetrieverClient], library: Library, max_bytes: int,
                     caller: Callable[..., Awaitable[Identity]], rate: RateLimiter, memory: TenantBytes) -> APIRouter:
    """The router; `retriever` returns the gateway's client (made once its event loop runs); `rate`
    counts uploads with the same user's asks, before an upload's body is read; `max_bytes` bounds each file;
    `memory` is each tenant's share of the bytes of files read to be sent."""
    router = APIRouter()

    @router.post("/api/documents", summary="Ingest files or JSON documents (admins: any collection; members: those "
                                           "open to members), progress streamed as Server-Sent Events",
                 **streams("IngestEvent", 403, 502), openapi_extra={"requestBody": upload_body(
                     max_bytes, MAX_FILES, MAX_FORM_FIELDS)})
    async def ingest_documents(request: Request, who: Identity = Depends(caller)):
        await rate.check(who.tenant, who.user)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            if kind == "multipart/form-data":
                batch = await _from_form(request, max_bytes)
            elif kind == "application/json":
                batch = await _from_json(request)
            else:
                raise InvalidArgument("content-type", "send files as multipart/form-data or text as application/json")
        except InvalidArgument as exc:
            return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, status_code=400)
        who.acting_for(batch.template.tenant, "")  # a tenant field naming another tenant: 403
        try:
            progress = await _started(retriever().ingest(_documents(batch, memory, who.tenant))) \
                if batch.documents else None
        except BaseException:
            await batch.close()
            raise
        return StreamingResponse(_progress(progress, batch, who), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @router.get("/api/documents", summary="The documents of the tenant the caller may read (one collection's or "
                                          "all), most recently written first", **returns(Documents, 502))
    async def list_documents(collection: str = Query("", pattern=f"(?:{COLLECTION_NAME})|^$", description=(
                                 "One collection's documents; empty: every collection's")),
                             limit: Limit = DEFAULT_PAGE, offset: Offset = 0, who: Identity = Depends(caller)) -> dict:
        found = await library.documents(who, collection, limit, offset)
        return {"documents": [document_line(e) for e in found.items], "next_offset": found.next_offset}

    @router.get("/api/documents/{collection}/{doc_id:document}", summary="A document's header, summary, outline and "
                                                                      "access", **returns(DocumentInfo, 404, 502))
    async def get_document(collection: Collection, doc_id: DocId, who: Identity = Depends(caller)) -> dict:
        return document_json(await library.document(who, collection, doc_id))

    @router.put("/api/documents/{collection}/{doc_id:path}/access", summary="Change who may read a document (its "
                                                                             "owner or an admin)",
                **returns(DocumentInfo, 403, 404, 502))
    async def set_document_access(collection: Collection, doc_id: DocId, change: AccessChange,
                                  who: Identity = Depends(caller)) -> dict:
        return document_json(await library.set_document_access(who, collection, doc_id, change.to_access()))

    @router.delete("/api/documents/{collection}/{doc_id:document}", summary="Delete a document (its owner or an admin)",
                   **returns(DocumentsDeleted, 403, 404, 502))
    async def delete_document(collection: Collection, doc_id: DocId, who: Identity = Depends(caller)) -> dict:
        documents, chunks = await library.delete_document(who, collection, doc_id)
        return {"documents": documents, "chunks": chunks}

    return router
