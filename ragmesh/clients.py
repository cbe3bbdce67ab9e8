"""Clients for the services. Every call carries a deadline (the caller's remaining
deadline, capped by the configured default), the current request id and, with tracing
on, the trace context, and failures surface as domain errors so callers need not import grpc.
A call that did not reach a ready service (a restart, a warm-up, a drain) is tried again within
its deadline (ragmesh.retry: when, how often, and what is never tried again)."""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from ragmesh import convert, tls, tracing
from ragmesh import types as t
from ragmesh.access import Access
from ragmesh.config import Settings
from ragmesh.context_budget import ContextBudget
from ragmesh.errors import (InvalidArgument, Misconfigured, NotFound, PermissionDenied, RagmeshError, ResourceExhausted,
                            Unavailable)
from ragmesh.identity.authenticator import service_token
from ragmesh.request_context import REQUEST_ID_HEADER, clean_request_id, deadline_var, identity_var, request_id_var
from ragmesh.retry import RETRY_FOR_S, Attempts, Replay, lost_send
from ragmesh.v1 import (
    embedder_pb2,
    embedder_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
    retriever_pb2,
    retriever_pb2_grpc,
)

_CHANNEL_OPTIONS = [
    # Reconnect soon after a service restarts (gRPC's default first backoff is a second).
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


log = logging.getLogger(__name__)


def call_timeout(default: float) -> float:
    """The configured timeout, shortened to what is left of the caller's deadline."""
    deadline = deadline_var.get()
    if deadline is None:
        return default
    return max(0.001, min(default, deadline - time.monotonic()))


@dataclass(frozen=True)
class ClientAuth:
    """What a client proves on every call: a bearer token (the service token, or an operator's or
    a user's key) and, with TLS, the channel's credentials (our certificate under mTLS)."""

    token: str = ""
    # A service token also says on whose behalf it calls: the identity of the call being served.
    forward_identity: bool = False
    channel: grpc.ChannelCredentials | None = None

    @classmethod
    def service(cls, settings: Settings) -> "ClientAuth":
        """How one service calls another."""
        return cls(service_token(settings), True, tls.channel_credentials(settings))

    @classmethod
    def key(cls, settings: Settings, key: str) -> "ClientAuth":
        """How an operator's tool (the CLI, the demo loader, benchmarks) calls with an API key."""
        return cls(key, False, tls.channel_credentials(settings))

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if not self.token:
            return ()
        found = (("authorization", f"Bearer {self.token}"),)
        identity = identity_var.get() if self.forward_identity else None
        return found + identity.headers() if identity is not None else found


def call_metadata(auth: ClientAuth | None = None) -> tuple[tuple[str, str], ...]:
    # Whatever the current call's id is (the HTTP bridge takes it from a header), only a clean one goes on.
    request_id = ((REQUEST_ID_HEADER, clean_request_id(request_id_var.get())),)
    return request_id + auth.metadata() if auth is not None else request_id


def channel(address: str, auth: ClientAuth | None = None) -> grpc.aio.Channel:
    """With tracing on, every call on the channel has a CLIENT span and carries the trace context."""
    interceptors = tracing.client_interceptors() or None
    if auth is not None and auth.channel is not None:
        return grpc.aio.secure_channel(address, auth.channel, options=_CHANNEL_OPTIONS, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS, interceptors=interceptors)


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")), grpc.ClientCallDetails):
    pass


class _AddMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.extra = list(metadata)

    def _details(self, d: grpc.ClientCallDetails) -> _Details:
        return _Details(d.method, d.timeout, list(d.metadata or []) + self.extra, d.credentials,
                        getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    intercept_unary_stream = intercept_unary_unary

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    intercept_stream_stream = intercept_stream_unary


def blocking_channel(address: str, metadata: Sequence[tuple[str, str]],
                     credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A blocking channel that sends `metadata` (e.g. a credential) on every call: for scripts,
    benchmarks and tests that use generated stubs directly."""
    base = (grpc.secure_channel(address, credentials, options=_CHANNEL_OPTIONS) if credentials
            else grpc.insecure_channel(address, options=_CHANNEL_OPTIONS))
    return grpc.intercept_channel(base, _AddMetadata(metadata))


_ERRORS: dict[grpc.StatusCode, type[RagmeshError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    # The next hop refused *our* credential, or a provider refused its key: the caller's request was
    # fine, the deployment is not. Never a 401 to the caller, whose own credential was accepted.
    grpc.StatusCode.UNAUTHENTICATED: Misconfigured,
    grpc.StatusCode.PERMISSION_DENIED: Misconfigured,
    grpc.StatusCode.FAILED_PRECONDITION: Misconfigured,
}


@contextmanager
def _translated(service: str, for_the_user: bool = False) -> Iterator[None]:
    """The service's status as our error. `for_the_user`: a call whose PERMISSION_DENIED is the
    service's answer about the user the gateway acts for (its role may not change or delete this
    document, upload into that collection), not a refusal of the gateway's own credential."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        code, detail = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.PERMISSION_DENIED and for_the_user:
            raise PermissionDenied(detail) from exc
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            field, _, message = detail.partition(": ")
            raise InvalidArgument(field, message or detail) from exc
        if code == grpc.StatusCode.CANCELLED:  # the server ended the call (our own cancel raises CancelledError)
            raise Unavailable(f"{service}: the call was cancelled by the server: {detail}") from exc
        if lost_send(exc):
            raise Unavailable(f"{service}: the call was ended by the service while it was being sent") from exc
        error = _ERRORS.get(code, RagmeshError)
        raise error(f"{service}: {code.name}: {detail}") from exc


class _Client:
    #: How long a call keeps retrying a service that is not ready (within its deadline).
    retry_for_s = RETRY_FOR_S

    def __init__(self, address: str, timeout: float, auth: ClientAuth | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.auth = auth
        self.channel = channel(address, auth)

    def _opts(self, timeout: float | None = None) -> dict:
        return {"timeout": call_timeout(timeout or self.timeout), "metadata": call_metadata(self.auth)}

    def _attempts(self, opts: dict) -> Attempts:
        return Attempts(time.monotonic() + opts["timeout"], self.address, self.retry_for_s)

    async def _unary(self, method: Any, request: Any, timeout: float | None = None) -> Any:
        """One call, tried again while the service is not ready. Every unary call here is a read or an
        idempotent write."""
        opts = self._opts(timeout)
        attempts = self._attempts(opts)
        while True:
            try:
                return await method(request, timeout=attempts.timeout(), metadata=opts["metadata"])
            except grpc.aio.AioRpcError as exc:
                await attempts.wait(exc)

    async def _stream(self, start: Callable[[float], Any], opts: dict,
                      replayable: Callable[[], bool] = lambda: True) -> AsyncIterator[Any]:
        """The messages of a server stream (`start(timeout)` makes the call), tried again while the
        service is not ready, until the first message: one the caller has seen is never repeated, so a
        stream lost after that fails. Close it (aclosing) to cancel the call at once."""
        attempts = self._attempts(opts)
        while True:
            call, started = start(attempts.timeout()), False
            try:
                async for message in call:
                    started = True
                    yield message
                return
            except grpc.aio.AioRpcError as exc:
                if started or not replayable():
                    raise
                await attempts.wait(exc)
            finally:
                if not call.done():
                    call.cancel()

    async def close(self) -> None:
        await self.channel.close()


class EmbedderClient(_Client):
    def __init__(self, address: str, timeout: float, auth: ClientAuth | None = None) -> None:
        super().__init__(address, timeout, auth)
        self.stub = embedder_pb2_grpc.EmbedderStub(self.channel)

    async def embed(self, texts: list[str], task: str = "DOCUMENT", timeout: float | None = None) -> np.ndarray:
        """(len(texts), dims) float32, L2-normalised."""
        request = embedder_pb2.EmbedRequest(texts=texts, task=embedder_pb2.Task.Value(task))
        with _translated("embedder"):
            reply = await self._unary(self.stub.Embed, request, timeout)
        if not reply.vectors:
            return np.zeros((0, reply.dimensions), dtype=np.float32)
        return np.asarray([v.values for v in reply.vectors], dtype=np.float32)

    async def info(self, timeout: float | None = None) -> embedder_pb2.InfoResponse:
        with _translated("embedder"):
            return await self._unary(self.stub.Info, embedder_pb2.InfoRequest(), timeout)


@dataclass
class SearchResult:
    hits: list[t.Hit]
    candidate_count: int
    timings: dict[str, float]
    dense_skipped: bool = False
    threshold_layer: int = 0


class RetrieverClient(_Client):
    def __init__(self, address: str, timeout: float, ingest_timeout: float = 600.0,
                 auth: ClientAuth | None = None) -> None:
        super().__init__(address, timeout, auth)
        self.ingest_timeout = ingest_timeout
        self.stub = retriever_pb2_grpc.RetrieverStub(self.channel)

    async def search(
        self,
        query: str,
        collections: list[str],
        search_filter: t.SearchFilter,
        top_k: int | None = None,
        vector: np.ndarray | None = None,
        timeout: float | None = None,
        variants: list[str] | None = None,
        boosters: dict | None = None,
        fusion: str = "RRF",
        weights: tuple[float, float, float] | None = None,
    ) -> SearchResult:
        """`boosters` takes the fields of ragmesh.v1.Boosters by name; `fusion` is RRF or LINEAR, `weights`
        (dense, sparse, recency) replace the retriever's defaults for it."""
        request = retriever_pb2.SearchRequest(
            query=query, collections=collections, filter=convert.filter_to_proto(search_filter),
            variants=variants or [], boosters=retriever_pb2.Boosters(**(boosters or {})),
            fusion=retriever_pb2.Fusion.Value(f"FUSION_{fusion}"),
        )
        if weights is not None:
            request.dense_weight, request.sparse_weight, request.recency_weight = weights
        if vector is not None:
            request.query_vector.extend(vector.tolist())
        if top_k is not None:
            request.top_k = top_k
        with _translated("retriever"):
            reply = await self._unary(self.stub.Search, request, timeout)
        tm = reply.timings
        return SearchResult(
            hits=[convert.hit_from_proto(h) for h in reply.hits],
            candidate_count=reply.candidate_count,
            timings={
                "embed_ms": tm.embed_ms, "dense_ms": tm.dense_ms, "sparse_ms": tm.sparse_ms,
                "fusion_ms": tm.fusion_ms, "total_ms": tm.total_ms,
            },
            dense_skipped=reply.dense_skipped,
            threshold_layer=reply.threshold_layer,
        )

    async def ingest(
        self, documents: AsyncIterable[retriever_pb2.Document]
    ) -> AsyncIterator[retriever_pb2.IngestProgress]:
        """Progress for each document. A call the retriever never took (refused while it warmed up or
        drained, or lost as it restarted before any progress came back) is sent again whole; once
        progress came back, a lost call fails UNAVAILABLE: the documents reported INDEXED are stored,
        the others not at all (each is one store transaction), so sending those again is safe.
        A document the source refuses (it raised) ends the call with that error: raised inside
        gRPC's sending task it would be lost, and the call would wait for its deadline."""
        sent = Replay(documents)
        opts = self._opts(self.ingest_timeout)

        def start(timeout: float) -> Any:
            call = self.stub.Ingest(sent.attempt(lambda: call.cancel()), timeout=timeout, metadata=opts["metadata"])
            return call

        with _translated("retriever", for_the_user=True):
            try:
                async with aclosing(self._stream(start, opts, lambda: sent.replayable)) as progresses:
                    async for progress in progresses:
                        sent.commit()
                        yield progress
            except asyncio.CancelledError:
                if sent.error is None:
                    raise
            finally:
                sent.close()
            if sent.error is not None:
                raise sent.error

    async def stats(self) -> retriever_pb2.StatsResponse:
        with _translated("retriever"):
            return await self._unary(self.stub.Stats, retriever_pb2.StatsRequest())

    async def get_document(self, collection: str, doc_id: str) -> t.DocumentRecord:
        """A document's header with its summaries and outline, in the caller's tenant; NotFound when
        there is none."""
        request = retriever_pb2.GetDocumentRequest(collection=collection, doc_id=doc_id)
        with _translated("retriever"):
            return convert.document_info_from_proto(await self._unary(self.stub.GetDocument, request))

    async def list_documents(self, collection: str = "", limit: int = 0, offset: int = 0) -> list[t.DocumentEntry]:
        """The caller's documents, most recently written first (headers without summaries)."""
        request = retriever_pb2.ListDocumentsRequest(collection=collection, limit=limit, offset=offset)
        with _translated("retriever"):
            reply = await self._unary(self.stub.ListDocuments, request)
        return [convert.document_entry_from_proto(e) for e in reply.documents]

    async def get_chunk(self, chunk_id: str) -> t.ChunkContext:
        """A chunk of the caller's tenant with its parent's text and its document; NotFound otherwise."""
        with _translated("retriever"):
            reply = await self._unary(self.stub.GetChunk, retriever_pb2.GetChunkRequest(chunk_id=chunk_id))
        return convert.chunk_context_from_proto(reply)

    async def own_collections(self) -> list[retriever_pb2.CollectionInfo]:
        """The caller's tenant's collections with its document and chunk counts."""
        request = retriever_pb2.ListCollectionsRequest(own_tenant=True)
        with _translated("retriever"):
            return list((await self._unary(self.stub.ListCollections, request)).collections)

    async def field_values(self, field: str, collections: list[str]) -> list[str]:
        """Distinct values of a metadata field in the caller's tenant."""
        request = retriever_pb2.FieldValuesRequest(field=field, collections=collections)
        with _translated("retriever"):
            reply = await self._unary(self.stub.FieldValues, request)
        return list(reply.values)

    async def delete(self, collection: str, doc_ids: list[str] | None = None,
                     where: t.SearchFilter | None = None) -> tuple[int, int]:
        """Deletes documents by id or by filter in the caller's tenant; (documents, chunks) removed."""
        request = retriever_pb2.DeleteRequest(collection=collection, doc_ids=doc_ids or [])
        if where is not None:
            request.filter.CopyFrom(convert.filter_to_proto(where))
        with _translated("retriever", for_the_user=True):
            reply = await self._unary(self.stub.Delete, request)
        return reply.documents, reply.chunks

    async def set_document_access(self, collection: str, doc_id: str, access: Access) -> t.DocumentRecord:
        """Replaces who may read a document (its uploader or an admin); NotFound for one the caller
        may not read (an admin may change any), PermissionDenied for one it reads but does not manage."""
        request = retriever_pb2.SetDocumentAccessRequest(collection=collection, doc_id=doc_id,
                                                         access=convert.access_to_proto(access))
        with _translated("retriever", for_the_user=True):
            return convert.document_info_from_proto(await self._unary(self.stub.SetDocumentAccess, request))

    async def check_chunks(self, chunks: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (chunk_id, hex SHA-256 of the text held), whether the caller may still read that
        chunk with that text (ragmesh.text.sha256 makes the digest)."""
        request = retriever_pb2.CheckChunksRequest(
            chunks=[retriever_pb2.ChunkRef(chunk_id=c, text_sha256=d) for c, d in chunks])
        with _translated("retriever"):
            return list((await self._unary(self.stub.CheckChunks, request)).current)

    async def set_collection_access(self, collection: str, members_upload: bool,
                                    default_access: Access) -> retriever_pb2.CollectionAccess:
        """A collection's upload rule and default access in the caller's tenant (admins)."""
        request = retriever_pb2.CollectionAccess(collection=collection, members_upload=members_upload,
                                                 default_access=convert.access_to_proto(default_access))
        with _translated("retriever", for_the_user=True):
            return await self._unary(self.stub.SetCollectionAccess, request)


class GeneratorClient(_Client):
    def __init__(self, address: str, timeout: float, auth: ClientAuth | None = None) -> None:
        super().__init__(address, timeout, auth)
        self.stub = generator_pb2_grpc.GeneratorStub(self.channel)

    async def generate(
        self,
        *,
        model: str,
        question: str,
        blocks: list[t.ContextBlock],
        history: list[t.Turn],
        system_instruction: str,
        prompt: str,
        web_search: bool = False,
        temperature: float | None = None,
    ) -> AsyncIterator[t.GenEvent]:
        """Streams the answer; closing this iterator cancels the call on the generator. No temperature:
        the backend's own default."""
        request = generator_pb2.GenerateRequest(
            model=model, question=question,
            blocks=[convert.block_to_proto(b) for b in blocks],
            history=[generator_pb2.Turn(question=h.question, answer=h.answer) for h in history],
            system_instruction=system_instruction, prompt=prompt, web_search=web_search, temperature=temperature,
        )
        opts = self._opts()

        def start(timeout: float) -> Any:
            return self.stub.Generate(request, timeout=timeout, metadata=opts["metadata"])

        with _translated("generator"):
            async with aclosing(self._stream(start, opts)) as events:
                async for event in events:
                    yield convert.gen_event_from_proto(event)

    async def complete(self, *, model: str, system_instruction: str, prompt: str, question: str = "",
                       blocks: list[t.ContextBlock] | None = None, temperature: float | None = None) -> str:
        """The whole text of a short model reply (a tag list, a verdict, a summary): the content pieces of
        one Generate stream, closed when done so nothing keeps running upstream. `question`: the prompt."""
        parts: list[str] = []
        stream = self.generate(model=model, question=question or prompt, blocks=blocks or [], history=[],
                               system_instruction=system_instruction, prompt=prompt, temperature=temperature)
        async with aclosing(stream) as events:
            async for event in events:
                if event.kind == "content":
                    parts.append(event.text)
        return "".join(parts)

    async def stats(self) -> generator_pb2.GeneratorStatsResponse:
        with _translated("generator"):
            return await self._unary(self.stub.Stats, generator_pb2.GeneratorStatsRequest())

    async def budget(self, model: str, timeout: float | None = None) -> ContextBudget:
        """How much retrieved context `model` takes, as the generator's backend for it declares."""
        with _translated("generator"):
            reply = await self._unary(self.stub.Budget, generator_pb2.ContextBudgetRequest(model=model), timeout)
        return ContextBudget(reply.chars, reply.hits, reply.window_tokens, reply.complete_records)
