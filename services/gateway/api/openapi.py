"""The HTTP bridge's OpenAPI document, completed so that it is the truth (issue 11): FastAPI generates
the routes and the JSON request bodies from the code; this adds what it cannot see there.

- The limits the gateway checks (request.py, memory.py CORRECTION_LIMITS, ragmesh.validation) as
  maxLength / maxItems / pattern / enum / minimum..maximum on the request schemas, the body size
  limits in the request bodies' descriptions, and the upload forms that routes read by hand.
- Every response a route really gives: the 200 bodies (the models below), the Server-Sent Events of
  the streaming routes (each event's `data:` a JSON object, one of the event schemas), and the
  errors, all in one shape {"error": {"code", "message"}}: 401 with `WWW-Authenticate`, 429 with
  `Retry-After`, and every response with the request id header.
- The bearer credential (an API key or a JWT) on every /api route; /healthz and / are open.

Rules across fields that JSON Schema cannot state are in the descriptions (`end_date` not before
`start_date`, for example). tests/integration/test_openapi.py runs schemathesis against it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from ragmesh.models import KNOWN_MODELS, WEB_SEARCH_MODELS
from ragmesh.request_context import REQUEST_ID_HEADER
from ragmesh.v1 import retriever_pb2
from ragmesh.validation import _NAME as COLLECTION_NAME
from ragmesh.validation import MAX_CHUNK_ID_CHARS, MAX_ID_CHARS, MAX_OFFSET, MAX_PAGE
from services.gateway.api.documents import MAX_FILES
from services.gateway.conversations import MAX_TITLE_CHARS
from services.gateway.memory import CORRECTION_LIMITS
from services.gateway.request import (CONTEXT_WINDOWS, DATA_SOURCES, DEFAULT_SOURCES, MAX_DOCUMENT_ID_CHARS,
                                      MAX_DOCUMENT_IDS, MAX_FUND_CHARS, MAX_FUNDS, MAX_NAME_CHARS, MAX_PERSONA_CHARS,
                                      MAX_QUESTION_CHARS, RESPONSE_FORMATS)
from services.gateway.transcripts import MAX_TAG_CHARS, MAX_TAGS, MAX_TRANSCRIPT_CHARS, MAX_TRANSCRIPT_ID_CHARS

SCHEME = "bearer"
SCHEMAS = "#/components/schemas/"
# Python's str.isspace() characters, as a regex class's contents: "blank" is what the gateway's
# checks (str.strip()) call empty, which ECMA's \s is not quite.
WHITESPACE = r"\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{WHITESPACE}]"
# A picked document (services.gateway.request.document_ref): a bare doc id without '/', or a collection
# name, '/' and the doc id; the doc id not blank.
DOCUMENT_REF = (f"^(?:[^/]*[^/{WHITESPACE}][^/]*|{COLLECTION_NAME.pattern.strip('^$')}/[\\s\\S]*"
                f"[^{WHITESPACE}][\\s\\S]*)$")


# -- response bodies --------------------------------------------------------------------------------

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


class StrategyFilter(_Exact):
    tenant: str
    start_date: str
    end_date: str
    in_: dict[str, list[str]] = Field(alias="in", description="Metadata field -> values, any of which matches")


class QualityStep(_Exact):
    """One of 003's quality steps, in the order they ran."""

    step: str = Field(description="rewrite | rerank | history | compress")
    status: str = Field(description="done | skipped | fallback")
    ms: float
    detail: str = Field(description="What it did, or why it was skipped or fell back")


class Followup(_Exact):
    """Whether the question reworks what the conversation holds (answered from it, no search), and the
    signal that decided (services/gateway/followup.py)."""

    rework: bool
    signal: str = Field(description="no_referent | no_earlier_search | filters_changed | new_period | new_entity | "
                                    "new_term | model | rework")
    detail: str


class Strategy(_Exact):
    """How the question is answered: the route, what was searched and found."""

    route: str
    retrieval: str
    reason: str
    cache_hit: bool
    collections: list[str]
    filter: StrategyFilter
    time_hint: str
    time_window: str = Field(description="The retriever's window filter: 24h, 48h, 1w or all (empty: none)")
    detected_funds: list[str]
    k: int
    candidate_count: int
    chunks: int
    threshold_layer: int
    retrieval_ms: float
    embed_ms: float = Field(description="The question's embedding, request to vector; a question every route "
                                        "searches for starts it while the conversation is read")
    search_ms: float = Field(description="Of retrieval_ms, the wait for the searches (0 when the scope was reused)")
    context_chars: int
    corrections: int = Field(description="The user's corrections given to the model")
    conversation_id: str
    cache_key: str
    dense_skipped: bool
    unavailable: list[str] = Field(description="Collections whose search failed or timed out")
    model: str
    variants: list[str] = Field(description="More queries searched beside the question: the model's rewrites, or "
                                           "the earlier question a follow-up with no words of its own refers to")
    rerank_count: int = Field(description="Candidates the model reranked (0: none)")
    quality: list[QualityStep]
    followup: Followup
    recency: str = Field(description="Words asking for the latest (e.g. 'latest', 'as of now') that sent the "
                                     "retriever's time decay; empty: none")
    default_window: dict[str, int] = Field(description="Collections searched within their default window "
                                                       "(DEFAULT_WINDOW_DAYS): collection -> days")
    relaxed: list[str] = Field(description="Filters read from the question, or a default window, that found "
                                           "nothing and were loosened, each with why")


class Retrieval(_Exact):
    k: int
    candidateCount: int
    timeMs: float


class AnswerMeta(_Exact):
    model: str
    strategy: Strategy
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
    """POST /api/chat/ask with format "notes": 002's chat response contract."""

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
    strategy: Strategy


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
    conversations: list[ConversationInfo] = Field(description="Newest first; an admin key sees its tenant's")
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
    strategy: Strategy | None = Field(description="How the answer was made, as its strategy event said; null for "
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


class DocumentInfo(_Exact):
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


class Documents(_Exact):
    documents: list[DocumentLine] = Field(description="The tenant's documents, most recently written first")
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


class Collections(_Exact):
    collections: list[CollectionLine]


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
MODELS = (Answer, NotesAnswer, Meta, Conversations, Conversation, ConversationRenamed, ConversationDeleted, Stopped,
          CorrectionRecorded, TranscriptStored, DocumentInfo, Documents, DocumentsDeleted, ChunkView, Collections, Funds,
          Health,
          *ASK_EVENTS, *INGEST_EVENTS)


# -- errors -----------------------------------------------------------------------------------------

def _errors(max_body: int, max_upload: int) -> dict[int, str]:
    return {
        400: "INVALID_ARGUMENT: a field missing, of the wrong type or out of bounds (the message names it), "
             "an unreadable body, a malformed Host or Origin header, or a Host header not in ALLOWED_HOSTS",
        401: "UNAUTHENTICATED: no `Authorization: Bearer` credential, or an unknown, revoked, expired or "
             "badly signed one",
        403: "PERMISSION_DENIED: the key's role may not do this (a member key ingesting or deleting), the body "
             "names another tenant (or, with a member key, another user), or a browser page of another "
             "origin sent it",
        404: "NOT_FOUND: no such conversation, document or chunk for this caller (another tenant's or user's answers "
             "exactly as an unknown id)",
        408: "DEADLINE_EXCEEDED: the body did not arrive whole within HTTP_BODY_TIMEOUT_S (uploads to "
             "/api/documents: HTTP_UPLOAD_TIMEOUT_S); the connection is closed",
        413: f"INVALID_ARGUMENT: the body is over HTTP_MAX_BODY_BYTES ({max_body:,} bytes; uploads to "
             f"/api/documents: UPLOAD_MAX_BYTES, {max_upload:,} bytes), refused as it arrives",
        415: "INVALID_ARGUMENT: a POST or PATCH body must be application/json (or multipart/form-data for files)",
        429: "RESOURCE_EXHAUSTED: too many calls in flight (MAX_CONCURRENT_CALLS), credentials being checked "
             "(HTTP_UNAUTHENTICATED_MAX) or questions being planned (MAX_CONCURRENT_RETRIEVALS), too many failed "
             "credentials from this address (AUTH_FAILURES_PER_MINUTE), the user's rate (RATE_LIMIT_PER_MINUTE) "
             "or monthly quota is used up, or a provider's; wait Retry-After seconds",
        500: "INTERNAL: a fault of ours; the message quotes the request id to report",
        502: "FAILED_PRECONDITION: a service or provider refused the gateway's own credentials",
        503: "UNAVAILABLE: a service or the database is down or did not answer in time; try again",
    }


API_ERRORS = (400, 401, 408, 413, 429, 500, 503)  # any /api route: host, credential, body time and size, admission, store
WRITE_ERRORS = (403,)  # POST and DELETE: the Origin rule
BODY_ERRORS = (415,)  # POST: the content type

# method, path -> operationId, summary, 200 (a model, "sse" + events, "html" or "text"), errors of its own
OPERATIONS: dict[tuple[str, str], tuple[str, str, Any, tuple[int, ...]]] = {
    ("get", "/"): ("web_page", "The web chat page", "html", ()),
    ("get", "/metrics"): ("metrics", "Prometheus metrics of the gateway process (text exposition format)", "text",
                          ()),
    ("get", "/healthz"): ("health", "Health of the gateway and the services it calls (503 when degraded)",
                          Health, ()),
    ("get", "/api/meta"): ("meta", "Configured models, data sources, the tenant's fund names, and who the "
                                   "credential is", Meta, ()),
    ("get", "/api/collections"): ("list_collections", "The tenant's collections, for pickers", Collections, (502,)),
    ("get", "/api/funds"): ("list_funds", "The tenant's fund names, for pickers", Funds, ()),
    ("get", "/api/chunks/{chunk_id}"): ("get_chunk", "A chunk with its parent's text and its document (citation "
                                                     "panels)", ChunkView, (404, 502)),
    ("post", "/api/chat/ask/stream"): ("ask_stream", "Ask, the answer streamed as Server-Sent Events",
                                       ("sse", ASK_EVENTS), (403, 404)),
    ("post", "/api/chat/ask"): ("ask", "Ask, the answer whole as JSON", Answer, (403, 404, 502)),
    ("post", "/api/chat/stop"): ("stop", "Stop the conversation's running answer", Stopped, (404,)),
    ("post", "/api/corrections"): ("correct", "Say an answer was wrong and what is right", CorrectionRecorded,
                                   (403, 404)),
    ("get", "/api/conversations"): ("list_conversations", "The caller's conversations, newest first, titled by "
                                                          "their first question", Conversations, ()),
    ("get", "/api/conversations/{conversation_id}"): ("read_conversation", "A conversation's messages with each "
                                                                           "answer's citations, model, route and "
                                                                           "timings", Conversation, (404,)),
    ("patch", "/api/conversations/{conversation_id}"): ("rename_conversation", "Rename a conversation",
                                                       ConversationRenamed, (404,)),
    ("delete", "/api/conversations/{conversation_id}"): (
        "delete_conversation", "Delete a conversation: messages, summary, corrections and its conversation memory",
        ConversationDeleted, (404, 502)),
    ("post", "/api/documents"): ("ingest_documents", "Ingest files or JSON documents (admin keys), progress "
                                                     "streamed as Server-Sent Events", ("sse", INGEST_EVENTS), ()),
    ("post", "/api/transcripts"): ("ingest_transcript", "Store a call transcript (admin keys) as a document of "
                                                        "type transcript, tagged with 3-6 topics by the configured "
                                                        "model", TranscriptStored, (502,)),
    ("get", "/api/documents"): ("list_documents", "The tenant's documents (one collection's or all), most "
                                                  "recently written first", Documents, (502,)),
    ("get", "/api/documents/{collection}/{doc_id}"): ("get_document", "A document's header, summary and outline",
                                                     DocumentInfo, (404, 502)),
    ("delete", "/api/documents/{collection}/{doc_id}"): ("delete_document", "Delete a document (admin keys)",
                                                        DocumentsDeleted, (403, 404, 502)),
}


# -- request schemas ----------------------------------------------------------------------------------

def _text(max_chars: int, description: str = "", *, required: bool = False, nullable: bool = False) -> dict:
    schema: dict[str, Any] = {"type": "string", "maxLength": max_chars}
    if required:
        schema |= {"minLength": 1, "pattern": NOT_BLANK}
    if nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema | ({"description": description} if description else {})


def _date(name: str) -> dict:
    return {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "maxLength": 0}, {"type": "null"}],
            "description": f"YYYY-MM-DD; empty or null: no {name}. end_date must not be before start_date (400)"}


def _case_insensitive(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" for c in word)


ASK_FIELDS = {
    "question": _text(MAX_QUESTION_CHARS, "Not blank", required=True),
    "data_sources": {"type": "array", "items": {"type": "string", "enum": list(DATA_SOURCES)},
                     "description": f"Repeats are dropped; none: {', '.join(DEFAULT_SOURCES)}"},
    "start_date": _date("start"),
    "end_date": _date("end"),
    "selected_funds": {"type": "array", "maxItems": MAX_FUNDS, "items": {"type": "string", "maxLength": MAX_FUND_CHARS},
                       "description": "Restricts the search to these funds"},
    "conversation_id": _text(MAX_NAME_CHARS, "One of the caller's conversations (404 otherwise); empty or null "
                                             "starts a new one, named in the strategy and done events",
                             nullable=True),
    "format": {"enum": ["", *RESPONSE_FORMATS, None],
               "description": "Empty, null or ragmesh: this document's Answer; notes: POST /api/chat/ask answers in "
                              "the notes assistant's contract (NotesAnswer: [N1] citations with cid, noteId, chunkId, "
                              "createdAt, snippet, score). The stream's events are the same in both"},
    "tenant": _text(MAX_NAME_CHARS, "Empty or the credential's own tenant (403 otherwise)"),
    "user_id": _text(MAX_NAME_CHARS, "Empty or the caller; an admin key may name another user of its tenant (403 "
                                     "for a member key)"),
    "top_k": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 200}, {"type": "null"}],  # check_top_k
              "description": "Passages to retrieve; null: the strategy decides"},
    "document_ids": {"type": "array", "maxItems": MAX_DOCUMENT_IDS,
                     "items": {"type": "string", "maxLength": MAX_DOCUMENT_ID_CHARS, "pattern": DOCUMENT_REF},
                     "description": "Documents in scope, as collection/doc_id (GET /api/documents) or a bare "
                                    "doc_id (in any searched collection): every search of the question admits "
                                    "only their chunks. One enables a summary of it (404 when it is unknown)"},
    "persona": _text(MAX_PERSONA_CHARS, "Who the assistant is (\"You are terse.\"), put in the system prompt",
                     nullable=True),
    "context_window": {"enum": ["", *CONTEXT_WINDOWS, None],
                       "description": "Only documents dated within the last 24h, 48h or week (1w); all or empty: "
                                      "any date (the question may still name a window, \"in the last 24 hours\")"},
}
CORRECTION_FIELDS = {
    "correction": _text(CORRECTION_LIMITS["correction"], "What the right answer is", required=True),
    "question": _text(CORRECTION_LIMITS["question"], "The question answered wrongly; may be empty with message_id"),
    "wrong_answer": _text(CORRECTION_LIMITS["wrong_answer"], "Empty with message_id: that answer"),
    "conversation_id": _text(CORRECTION_LIMITS["conversation_id"], "One of the caller's own conversations (404 "
                                                                   "otherwise); needed with message_id"),
    "message_id": _text(MAX_NAME_CHARS, "The wrong answer's message in conversation_id (404 when there is none)"),
    "tenant": ASK_FIELDS["tenant"],
    "user_id": ASK_FIELDS["user_id"],
}
TRANSCRIPT_FIELDS = {
    "raw_text": _text(MAX_TRANSCRIPT_CHARS, "The call as said; not blank", required=True),
    "refined_text": _text(MAX_TRANSCRIPT_CHARS, "Notes made from the call, stored after the raw text", nullable=True),
    "polished_text": _text(MAX_TRANSCRIPT_CHARS, "The older name of refined_text (used when that is empty)",
                           nullable=True),
    "tags": {"type": "array", "maxItems": MAX_TAGS,
             "items": {"type": "string", "maxLength": MAX_TAG_CHARS, "pattern": f"^[^,]*[^,{WHITESPACE}][^,]*$"},
             "description": "Topics, not blank and without commas (repeats are dropped); sent, no model is asked"},
    "echotag": _text(MAX_TAG_CHARS, "The transcript's main tag; empty or null: the first tag", nullable=True),
    "transcript_id": _text(MAX_TRANSCRIPT_ID_CHARS, "Empty or null: a new id; an id stored already is replaced",
                           nullable=True),
    "collection": {"anyOf": [{"type": "string", "pattern": COLLECTION_NAME.pattern}, {"type": "string", "maxLength": 0},
                             {"type": "null"}], "description": "Empty or null: documents"},
    "date": {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "maxLength": 0}, {"type": "null"}],
             "description": "YYYY-MM-DD of the call; empty or null: today"},
    "tenant": ASK_FIELDS["tenant"],
}
CORRECTION_RULES = {  # the question, or the message whose question it was; a message_id needs its conversation
    "anyOf": [{"required": ["question"], "properties": {"question": {"pattern": NOT_BLANK}}},
              {"required": ["message_id", "conversation_id"],
               "properties": {"message_id": {"minLength": 1}, "conversation_id": {"minLength": 1}}}],
    "if": {"required": ["message_id"], "properties": {"message_id": {"minLength": 1}}},
    "then": {"required": ["conversation_id"], "properties": {"conversation_id": {"minLength": 1}}},
}

# A JSON object of string values, as text (the multipart `metadata` field): what json.loads reads as one.
_JSON_SPACE = r"[ \t\n\r]*"
_JSON_STRING = (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
                r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})*"')  # no lone surrogate escapes
_JSON_PAIR = f"{_JSON_STRING}{_JSON_SPACE}:{_JSON_SPACE}{_JSON_STRING}"
JSON_OBJECT_OF_STRINGS = (f"^(?:{_JSON_SPACE}\\{{{_JSON_SPACE}(?:{_JSON_PAIR}{_JSON_SPACE}"
                          f"(?:,{_JSON_SPACE}{_JSON_PAIR}{_JSON_SPACE})*)?\\}}{_JSON_SPACE})?$")


def _ingest_bodies(max_upload: int, max_file: int) -> dict:
    collection = {"type": "string", "pattern": COLLECTION_NAME.pattern,
                  "description": "Letters, digits, '_', '-' or '.', 1-64 characters"}
    tenant = {"type": "string", "description": "Empty or the credential's own tenant (403 otherwise)"}
    form = {
        "type": "object",
        "required": ["files", "collection"],
        "properties": {
            "files": {"type": "array", "minItems": 1, "maxItems": MAX_FILES,
                      "items": {"type": "string", "format": "binary"},
                      "description": f"PDF, Word, PowerPoint, text, Markdown, HTML or JSON files (the field `file` "
                                     f"works too); a file over INGEST_MAX_BYTES ({max_file:,} bytes) fails alone"},
            "collection": collection,
            "tenant": tenant,
            "metadata": {"type": "string", "pattern": JSON_OBJECT_OF_STRINGS,
                         "description": "A JSON object of string values, stored with every document"},
            "meta": {"type": "array", "items": {"type": "string", "pattern": f"^[^=]*[^={WHITESPACE}][^=]*="},
                     "description": "key=value metadata, repeated (a form has at most 1,000 fields)"},
            "summarize": {"type": "string", "pattern": f"^(?:{_case_insensitive('true')}|"
                                                       f"{_case_insensitive('false')})?$",
                          "description": "true or false (any case); empty: the collection's setting"},
        },
    }
    text_document = {
        "type": "object", "title": "TextDocument", "required": ["doc_id", "text"],
        "properties": {
            "doc_id": {"type": "string", "minLength": 1}, "text": {"type": "string"},
            "title": {"type": ["string", "null"]}, "date": {"type": ["string", "null"]},
            "metadata": {"type": ["object", "null"], "description": "Values are stored as text"},
        },
    }
    record = {"type": "object", "title": "Record", "not": {"required": ["text"]},
              "description": "A record the retriever parses as JSON: a transcript (raw_text / refined_text / "
                             "tags), a meeting note or a factsheet"}
    json_body = {
        "type": "object",
        "required": ["collection", "documents"],
        "properties": {
            "collection": collection,
            "tenant": {"type": ["string", "null"], "description": tenant["description"]},
            "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"},
                         "description": "Stored with every document"},
            "summarize": {"type": ["boolean", "null"], "description": "null: the collection's setting"},
            "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [text_document, record]}},
        },
    }
    return {
        "required": True,
        "description": f"Files as multipart/form-data (at most {MAX_FILES}) or documents as JSON, at most "
                       f"{max_upload:,} bytes in all (UPLOAD_MAX_BYTES, not HTTP_MAX_BODY_BYTES). What the retriever "
                       f"refuses in a document (its limits on ids, titles and metadata, a file it cannot parse) "
                       f"fails that document in the stream, not the request.",
        "content": {"multipart/form-data": {"schema": form}, "application/json": {"schema": json_body}},
    }


PATH_PARAMETERS = {
    "conversation_id": {"type": "string", "minLength": 1},
    "collection": {"type": "string", "pattern": COLLECTION_NAME.pattern},
}
DOC_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": NOT_BLANK}  # read or delete


# -- the document -------------------------------------------------------------------------------------

def _component_schemas() -> dict[str, Any]:
    _, top = models_json_schema([(m, "serialization") for m in MODELS], ref_template=SCHEMAS + "{model}")
    schemas = top.get("$defs", {})
    schemas["AskEvent"] = {"oneOf": [{"$ref": SCHEMAS + e.__name__} for e in ASK_EVENTS],
                           "description": "One event of an answer's stream: searching (true, false), strategy, "
                                          "generating, thinking and content (repeated), citations, done; or "
                                          "error, which ends the stream"}
    schemas["IngestEvent"] = {"oneOf": [{"$ref": SCHEMAS + e.__name__} for e in INGEST_EVENTS],
                              "description": "One event of an ingest stream: a stage of one document (repeated), "
                                             "then done; or error, which ends the stream"}
    return schemas


def _event_stream(event: str) -> dict:
    """Server-Sent Events: every event is one `data:` line holding a JSON object (Open API 3.1 has the
    media type's schema describe one event of the stream)."""
    return {"text/event-stream": {"schema": {
        "type": "object", "required": ["data"],
        "properties": {"data": {"type": "string", "contentMediaType": "application/json",
                                "contentSchema": {"$ref": SCHEMAS + event}}},
        "description": f"One event per `data:` line, a JSON {event} object",
    }}}


def _response(description: str, content: dict | None, headers: dict) -> dict:
    return {"description": description, "headers": headers, **({"content": content} if content else {})}


def _error_response(status: int, description: str) -> dict:
    headers: dict[str, Any] = {REQUEST_ID_HEADER: {"$ref": "#/components/headers/RequestId"}}
    if status == 401:
        headers["WWW-Authenticate"] = {"required": True, "description": "Bearer", "schema": {"type": "string"}}
    if status == 429:
        headers["Retry-After"] = {"required": True, "description": "Seconds to wait before trying again",
                                  "schema": {"type": "string", "pattern": "^[0-9]+$"}}
    return _response(description, {"application/json": {"schema": {"$ref": SCHEMAS + "Error"}}}, headers)


def _model_field(offered: list[str]) -> dict:
    return {"enum": ["", *offered, None],
            "description": "Empty or null: the default model. The models this deployment served when this document "
                           "was made (GET /api/meta has them now); another known model "
                           f"({', '.join(m for m in KNOWN_MODELS if m not in offered) or 'none'}) is a 400 naming "
                           f"the setting that enables it. Web Search needs one of {', '.join(WEB_SEARCH_MODELS)}"}


def build(app: FastAPI, *, offered_models: list[str], max_body_bytes: int, max_upload_bytes: int,
          max_file_bytes: int) -> dict[str, Any]:
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
    schemas.update(_component_schemas())
    _constrain(schemas["AskBody"], {**ASK_FIELDS, "model": _model_field(offered_models)}, required=["question"])
    _constrain(schemas["CorrectionBody"], CORRECTION_FIELDS, required=["correction"])
    _constrain(schemas["TranscriptBody"], TRANSCRIPT_FIELDS, required=["raw_text"])
    schemas["CorrectionBody"].update(CORRECTION_RULES)
    _constrain(schemas["RenameBody"], {"title": _text(MAX_TITLE_CHARS, "Empty or blank: the first question again; "
                                                                       "spaces are collapsed")}, required=["title"])
    _constrain(schemas["StopBody"], {"conversation_id": _text(MAX_NAME_CHARS, "One of the caller's conversations "
                                                                              "(404 otherwise)")},
               required=["conversation_id"])
    components["securitySchemes"] = {SCHEME: {"type": "http", "scheme": "bearer",
                                              "description": "An API key (rmk_...) or a JWT"}}
    components["headers"] = {
        "RequestId": {"required": True, "schema": {"type": "string"},
                      "description": "The request's id: as sent in the request when it is 1-64 letters, digits "
                                     "and `._:-`, else made for it"},
    }
    doc["security"] = [{SCHEME: []}]

    errors = _errors(max_body_bytes, max_upload_bytes)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            op_id, summary, ok, own = OPERATIONS[(method, path)]
            op["operationId"], op["summary"] = op_id, summary
            request_id = {REQUEST_ID_HEADER: {"$ref": "#/components/headers/RequestId"}}
            if ok == "html":
                op["responses"] = {"200": _response("The page", {"text/html": {"schema": {"type": "string"}}},
                                                    request_id)}
            elif ok == "text":
                op["responses"] = {"200": _response("Every metric, as Prometheus scrapes it", {
                    "text/plain": {"schema": {"type": "string"}}}, request_id)}
            elif isinstance(ok, tuple):
                event = "AskEvent" if ok[1] is ASK_EVENTS else "IngestEvent"
                op["responses"] = {"200": _response("Server-Sent Events until done or error", _event_stream(event),
                                                    request_id)}
            else:
                op["responses"] = {"200": _response(ok.__doc__ or "OK", {
                    "application/json": {"schema": {"$ref": SCHEMAS + ok.__name__}}}, request_id)}
            if not path.startswith("/api/"):
                op["security"] = []
                if path == "/healthz":
                    op["responses"]["503"] = _response("Degraded: a service is not serving", {
                        "application/json": {"schema": {"$ref": SCHEMAS + "Health"}}}, request_id)
                if path == "/metrics":
                    op["responses"]["404"] = _error_response(404, "NOT_FOUND: metrics are off (METRICS_ENABLED=false)")
                continue
            statuses = set(API_ERRORS) | set(own)
            if method in ("post", "patch", "delete"):
                statuses |= set(WRITE_ERRORS)
            if method in ("post", "patch"):
                statuses |= set(BODY_ERRORS)
            for status in sorted(statuses):
                op["responses"][str(status)] = _error_response(status, errors[status])
            for parameter in op.get("parameters", []):
                _parameter(parameter)
            body = op.get("requestBody")
            if body is not None:
                body["description"] = f"At most {max_body_bytes:,} bytes (HTTP_MAX_BODY_BYTES)"
    answered = doc["paths"]["/api/chat/ask"]["post"]["responses"]["200"]["content"]["application/json"]
    answered["schema"] = {"oneOf": [{"$ref": SCHEMAS + Answer.__name__}, {"$ref": SCHEMAS + NotesAnswer.__name__}]}
    ingest = doc["paths"]["/api/documents"]["post"]
    ingest["requestBody"] = _ingest_bodies(max_upload_bytes, max_file_bytes)
    return doc


def _constrain(schema: dict, fields: dict[str, dict], required: list[str]) -> None:
    """The request model's properties as the gateway checks them."""
    for name, constrained in fields.items():
        title = schema["properties"][name].get("title")
        schema["properties"][name] = {**({"title": title} if title else {}), **constrained}
    schema["required"] = sorted(set(schema.get("required", [])) | set(required))


def _parameter(parameter: dict) -> None:
    name = parameter["name"]
    if name == "limit":
        parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}
        parameter["description"] = f"At most this many (1..{MAX_PAGE})"
    elif name == "offset":
        parameter["schema"] = {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0}
        parameter["description"] = "Skip this many (the previous page's next_offset)"
    elif name == "collection" and parameter["in"] == "query":
        parameter["schema"] = {"type": "string", "pattern": f"(?:{COLLECTION_NAME.pattern})|^$", "default": ""}
        parameter["description"] = "One collection's documents; empty: every collection's"
    elif name == "chunk_id":
        parameter["schema"] = {"type": "string", "minLength": 1, "maxLength": MAX_CHUNK_ID_CHARS, "pattern": NOT_BLANK}
        parameter["description"] = "A citation's chunk_id (tenant/collection/doc_id#n: percent-encode '#' and '/')"
    elif name == "doc_id":
        parameter["schema"] = dict(DOC_ID)
        parameter["description"] = "The document's id (may contain '/')"
    elif name in PATH_PARAMETERS:
        parameter["schema"] = dict(PATH_PARAMETERS[name])


def install(app: FastAPI, offered_models: Callable[[], list[str]], **limits: int) -> None:
    """Serves the completed document at the app's openapi_url (made once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, offered_models=offered_models(), **limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

