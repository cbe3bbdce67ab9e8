"""What the HTTP bridge answers, as the routes declare it (`response_model=`, `responses=`), so the OpenAPI
document is generated from these models: the JSON bodies, the events of the streams (each `data:` line
one of the event models), and the one error shape {"error": {"code", "message"}}. The strategy event's
schema is derived from services.gateway.strategy.Strategy, the record the pipeline fills."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema

from ragmesh import access
from ragmesh.v1 import retriever_pb2
from services.gateway.strategy import Strategy

SCHEMAS = "#/components/schemas/"


def strategy_schemas() -> dict[str, Any]:
    """The Strategy record's schema and those it refers to, as components."""
    schema = TypeAdapter(Strategy).json_schema(mode="serialization", ref_template=SCHEMAS + "{model}")
    return {**schema.pop("$defs", {}), "Strategy": schema}


# The strategy as the events and stored answers carry it (strategy_json); its schema is the Strategy component.
StrategyJson = Annotated[dict[str, Any], WithJsonSchema({"allOf": [{"$ref": SCHEMAS + "Strategy"}]})]


class _Exact(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Exact):
    code: str = Field(description="INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, "
                                  "RESOURCE_EXHAUSTED, FAILED_PRECONDITION, UNAVAILABLE or INTERNAL")
    message: str = Field(description="For the caller: names the field at fault; an INTERNAL error quotes "
                                     "the request id to report, never internals")


class Error(_Exact):
    """Every error: as the body of an HTTP error, and as the `error` event of a stream."""

    error: ErrorDetail


class Citation(_Exact):
    index: int = Field(description="The [n] the answer cites")
    chunk_id: str
    doc_id: str
    collection: str
    title: str
    date: str
    metadata: dict[str, str]
    url: str = Field(description="Web citations")
    snippet: str
    ref: str
    chapter: str = Field("", description="Where in a book: the chapter's title (empty for documents without chapters)")
    section: str = Field("", description="The section's title in the chapter; empty in the chapter's opening text")
    paragraph: int = Field(0, description="The paragraph's number in the section, from 1; 0 when not known")


class Retrieval(_Exact):
    k: int
    candidateCount: int
    timeMs: float


class AnswerMeta(_Exact):
    model: str
    strategy: StrategyJson
    retrieval: Retrieval


class Answer(_Exact):
    """POST /api/chat/ask: the answer whole, once it is done."""

    answer: str
    citations: list[Citation]
    web_queries: list[str]
    conversation_id: str = Field(description="Send it back to go on with the conversation")
    meta: AnswerMeta


class NotesCitation(_Exact):
    cid: str = Field(description="The [N1] the answer cites")
    noteId: str = Field(description="The cited document's id (doc_id)")
    chunkId: str
    createdAt: str = Field(description="The chunk's date as an ISO timestamp (the start of that day, UTC)")
    snippet: str
    score: float = Field(description="The chunk's fused retrieval score")
    title: str
    url: str = Field(description="Web citations")
    ref: str = Field(description="Persistent id (#chk_...)")


class NotesRetrieval(_Exact):
    k: int
    strategy: str = Field(description="none, summary, or hybrid / keyword (embedder down), with _reranked when a "
                                      "model reranked and _cached when the cached scope was reused")
    candidateCount: int
    rerankCount: int
    timeMs: int


class NotesMeta(_Exact):
    model: str
    retrieval: NotesRetrieval


class NotesAnswer(_Exact):
    """POST /api/chat/ask with format "notes": the notes contract."""

    answer: str = Field(description="Cites [N1], [N2] as the citations' cid")
    citations: list[NotesCitation]
    conversation_id: str
    meta: NotesMeta


class TranscriptStored(_Exact):
    """POST /api/transcripts: the stored transcript, its tags and who made them."""

    doc_id: str = Field(description="transcript_ and the transcript id (GET /api/documents/{collection}/{doc_id})")
    collection: str
    chunks: int = Field(description="Chunks stored")
    tags: list[str] = Field(description="3-6 topics from the model, or the ones sent; empty without a model")
    tagged_by: str = Field(description="The model that made the tags, \"request\" when they were sent, empty when none")
    note: str = Field(description="Why there are no tags, when there are none")
    stage: Literal["INDEXED", "UNCHANGED"] = Field(description="UNCHANGED: the same transcript was stored already")


class SearchingEvent(_Exact):
    searching: bool = Field(description="true while the sources are searched, false when done")


class StrategyEvent(_Exact):
    strategy: StrategyJson


class GeneratingEvent(_Exact):
    generating: bool


class ThinkingEvent(_Exact):
    thinking: str = Field(description="Reasoning text of models that show it")


class ContentEvent(_Exact):
    content: str = Field(description="The next piece of the answer")


class CitationsEvent(_Exact):
    citations: list[Citation]
    web_queries: list[str]


class AskDone(_Exact):
    done: Literal[True]
    conversation_id: str
    message_id: str
    model: str
    stopped: bool = Field(description="The answer was stopped (POST /api/chat/stop): the partial answer is kept; "
                                      "stopped before any content, the question is removed (message_id empty)")
    usage: dict[str, int] = Field(description="Token counts, when the model reports them")
    held: bool = Field(False, description="The client holds the conversation (conversation_history): "
                                          "conversation_id is derived from it, nothing is stored, message_id is "
                                          "empty, and only closing the stream stops the answer")


class IngestProgress(_Exact):
    """One stage of one document (or a file refused before it was sent: stage FAILED)."""

    doc_id: str
    collection: str
    filename: str
    stage: Literal[tuple(retriever_pb2.IngestStage.keys())]  # type: ignore[valid-type]
    chunks: int
    doc_type: str = Field("", description="FAQ, BOOK, SENSITIVE or USER; from CHUNKED on")
    redactions: int = Field(0, description="Personal data replaced by [REDACTED_*] labels")
    sensitivity: str = Field("", description="HIGH, MEDIUM or LOW")
    summarized: bool = Field(False, description="INDEXED with a summary of the whole document")
    error: str = Field("", description="FAILED: names the file and the reason")


class IngestDone(_Exact):
    done: Literal[True]
    documents: int = Field(description="Documents indexed or unchanged")
    chunks: int
    redactions: int
    errors: int = Field(description="Documents that failed")


class Identity(_Exact):
    tenant: str
    user: str
    role: Literal["admin", "member", "service"]
    groups: list[str] = Field(description="The groups the credential names (a JWT claim, the key's record), sorted; "
                                          "documents shared with one of them are readable")


class Meta(_Exact):
    models: list[str] = Field(description="The models this deployment serves; asking for another is 400")
    default_model: str
    web_search_models: list[str] = Field(description="Of the models, those that can search the web (Web Search)")
    data_sources: list[str]
    funds: list[str] = Field(description="Fund names in the tenant's corpus")
    identity: Identity = Field(description="Who the credential is")


class ConversationInfo(_Exact):
    conversation_id: str
    tenant: str
    user_id: str
    created_at: str
    updated_at: str
    title: str = Field(description="The first question, shortened")


class Conversations(_Exact):
    conversations: list[ConversationInfo] = Field(description="Newest first; the caller's own, whatever its role")
    next_offset: int | None = Field(description="The offset of the next page; null on the last page")


class Message(_Exact):
    message_id: str
    role: Literal["user", "assistant"]
    content: str
    created_at: str
    model: str = Field(description="The model that answered; empty for questions")
    route: str = Field(description="DIRECT, NO_RAG, SUMMARY, DEEP, LOOKUP or SPECIFIC; empty for questions")
    retrieval: str = Field(description="RAG_NEW_QUERY, RAG_REUSE or NO_RAG")
    citations: list[Citation] = Field(description="What the answer cites, as the stream's citations event")
    web_queries: list[str]
    chunk_map: dict[str, str] = Field(description="Persistent ref (#chk_...) -> chunk id; GET /api/chunks/{chunk_id}")
    strategy: StrategyJson | None = Field(description="How the answer was made, as its strategy event said; null for "
                                                  "questions")
    timings: dict[str, float] = Field(description="retrieval_ms, generation_ms, and from the start of generation "
                                              "first_token_ms (the generator's first token) and first_content_ms "
                                              "(the first text sent)")
    usage: dict[str, int]
    failed: str = Field(description="The error code that cut the answer short; empty otherwise")
    meta: dict[str, Any] = Field(description="Everything stored with the message")


class Conversation(_Exact):
    conversation_id: str
    messages: list[Message]


class ConversationRenamed(_Exact):
    conversation_id: str
    title: str = Field(description="The title kept (spaces collapsed); empty: the first question again")


class ConversationDeleted(_Exact):
    deleted: Literal[True]


class Stopped(_Exact):
    stopped: bool = Field(description="An answer was running and is now stopped")


class CorrectionRecorded(_Exact):
    correction_id: str


class SectionOutline(_Exact):
    title: str
    summary: str
    page: int = Field(description="First page; 0 when the document has no pages")


class Access(_Exact):
    """Who may read a document besides its owner."""

    users: list[str] = Field(description="Users of the tenant it is shared with")
    groups: list[str] = Field(description="Groups it is shared with (a credential's groups)")
    tenant: bool = Field(description="Every user of the tenant reads it")


def access_json(a: access.Access) -> dict[str, Any]:
    return {"users": list(a.users), "groups": list(a.groups), "tenant": a.tenant}


OWNER = Field(description="Who uploaded it (or an admin re-assigned it to): reads it, changes its access, replaces "
                          "and deletes it, as the tenant's admins may; empty for a document written before access "
                          "lists (the whole tenant reads it)")


class DocumentInfo(_Exact):
    """A document's header, summary and outline, with who may read it."""

    doc_id: str
    collection: str
    tenant: str
    content_hash: str
    title: str
    metadata: dict[str, str]
    date: str
    chunk_count: int
    summary: str = Field(description="The summary of the whole document made at ingest; empty when none")
    sections: list[SectionOutline]
    access: Access
    owner: str = OWNER


class DocumentLine(_Exact):
    doc_id: str
    collection: str
    title: str
    type: str = Field(description="FAQ, BOOK, SENSITIVE or USER (the ingest's), else the file type")
    date: str
    chunk_count: int
    summarized: bool = Field(description="A summary of the whole document was made at ingest")
    updated_at: str = Field(description="Last written (ISO 8601 UTC)")
    metadata: dict[str, str]
    access: Access
    owner: str = OWNER


class Documents(_Exact):
    documents: list[DocumentLine] = Field(description="The documents of the tenant the caller may read (an admin "
                                                      "key: all of them), most recently written first")
    next_offset: int | None = Field(description="The offset of the next page; null on the last page")


class ChunkDocument(_Exact):
    doc_id: str
    collection: str
    title: str
    date: str
    chunk_count: int
    summary: str
    metadata: dict[str, str]


class ChunkView(_Exact):
    """A chunk as a citation panel shows it."""

    chunk_id: str
    doc_id: str
    collection: str
    text: str
    parent_text: str = Field(description="The parent chunk's text (the wider context); empty when none")
    date: str
    page: str = Field(description="First page of the chunk; empty when the document has no pages")
    fund: str
    metadata: dict[str, str]
    document: ChunkDocument | None


class CollectionLine(_Exact):
    name: str
    documents: int = Field(description="The tenant's documents in it")
    chunks: int
    data_source: str = Field(description="The data source (POST /api/chat/ask) that searches it; empty: none")
    members_upload: bool = Field(description="Members may upload documents into it (admins always may)")
    default_access: Access = Field(description="A document's access when its upload names none (its uploader "
                                               "always reads it)")


class Collections(_Exact):
    collections: list[CollectionLine]


class CollectionAccess(_Exact):
    """A collection's rules in the caller's tenant, as they are now."""

    collection: str
    members_upload: bool = Field(description="Members may upload documents into it (admins always may)")
    default_access: Access = Field(description="A document's access when its upload names none")


class Funds(_Exact):
    funds: list[str] = Field(description="Fund names in the tenant's corpus, sorted")


class DocumentsDeleted(_Exact):
    documents: int
    chunks: int


class Health(_Exact):
    status: Literal["ok", "degraded"]
    services: dict[str, str] = Field(description="Service -> SERVING, NOT_SERVING or the error code of its check")


ASK_EVENTS = (SearchingEvent, StrategyEvent, GeneratingEvent, ThinkingEvent, ContentEvent, CitationsEvent,
              AskDone, Error)
INGEST_EVENTS = (IngestProgress, IngestDone, Error)
STREAMS = {  # the events a streaming route sends, one of them per `data:` line
    "AskEvent": (ASK_EVENTS, "One event of an answer's stream: searching (true, false), strategy, generating, thinking "
                             "and content (repeated), citations, done; or error"),
    "IngestEvent": (INGEST_EVENTS, "One event of an ingest stream: a stage of one document (repeated), then done; or "
                                   "error, which ends the stream"),
}


ERRORS = {
    400: "INVALID_ARGUMENT: a field missing, of the wrong type or out of bounds (the message names it), "
         "an unreadable body, a malformed Host or Origin header, or a Host header not in ALLOWED_HOSTS",
    401: "UNAUTHENTICATED: no `Authorization: Bearer` credential, or an unknown, revoked, expired or "
         "badly signed one",
    403: "PERMISSION_DENIED: the key's role may not do this (a member key uploading into a collection not open to "
         "members, sharing with the whole tenant, changing or deleting another user's document, changing a "
         "collection's rules), the body names another tenant (or, with a member key, another user), or a browser "
         "page of another origin sent it",
    404: "NOT_FOUND: no such conversation, document or chunk for this caller (another tenant's or user's answers "
         "exactly as an unknown id)",
    408: "DEADLINE_EXCEEDED: the body did not arrive whole within HTTP_BODY_TIMEOUT_S (uploads to "
         "/api/documents: HTTP_UPLOAD_TIMEOUT_S); the connection is closed",
    413: "INVALID_ARGUMENT: the body is over HTTP_MAX_BODY_BYTES (uploads to /api/documents: UPLOAD_MAX_BYTES), "
         "refused as it arrives",
    415: "INVALID_ARGUMENT: a POST or PATCH body must be application/json (or multipart/form-data for files)",
    429: "RESOURCE_EXHAUSTED: too many calls in flight (MAX_CONCURRENT_CALLS), credentials being checked "
         "(HTTP_UNAUTHENTICATED_MAX) or questions being planned (MAX_CONCURRENT_RETRIEVALS), too many failed "
         "credentials from this address (AUTH_FAILURES_PER_MINUTE), the user's rate (RATE_LIMIT_PER_MINUTE) "
         "or monthly quota is used up, or a provider's; wait Retry-After seconds",
    500: "INTERNAL: a fault of ours; the message quotes the request id to report",
    502: "FAILED_PRECONDITION: a service or provider refused the gateway's own credentials",
    503: "UNAVAILABLE: a service or the database is down or did not answer in time; try again",
}


def returns(model: Any, *errors: int) -> dict[str, Any]:
    """A route's declaration of what it answers: its 200 body, and the errors of its own (404, 502, ...)
    besides those every /api route may answer (openapi.py adds them)."""
    return {"response_model": model, "response_description": getattr(model, "__doc__", None) or "OK",
            "responses": {status: {"model": Error, "description": ERRORS[status]} for status in errors}}
