"""What a client may send the gateway, declared once: the pydantic types and models below carry every
field's shape and limits. The HTTP bridge parses its bodies and path parameters with them (so its
OpenAPI document is generated from them), and the gRPC edge puts each request through the same
models and types, so both edges check alike and answer a bad field with INVALID_ARGUMENT / 400
naming it. `AskInput` is the Ask as the gateway's domain carries it through the pipeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, \
    WithJsonSchema, field_validator, model_validator

from ragmesh.errors import InvalidArgument
from ragmesh.identity import Identity
from ragmesh.models import KNOWN_MODELS
from ragmesh.types import Turn
from ragmesh.validation import (COLLECTION_NAME, MAX_TOP_K, NOT_BLANK, PATTERN_MEANINGS, WHITESPACE,
                                check_date_range, invalid_argument)

MAX_QUESTION_CHARS = 2000
MAX_NAME_CHARS = 128  # tenant, user, conversation, message and model names
MAX_FUNDS = 50
MAX_FUND_CHARS = 200
MAX_DOCUMENT_IDS = 20
MAX_DOCUMENT_ID_CHARS = 512
MAX_PERSONA_CHARS = 500
MAX_HISTORY_TURNS = 50  # of a client-held conversation; the prompt carries the newest that fit its budget
MAX_ANSWER_CHARS = 8_000  # an earlier answer a client sends back; 50 such turns fit HTTP_MAX_BODY_BYTES
CONTEXT_WINDOWS = ("24h", "48h", "1w", "all")  # documents dated within the last day, two, a week; or any


# Data source (what the web client shows) -> collection in the retriever.
SOURCE_COLLECTIONS = {
    "Meeting Notes": "meeting_notes",
    "Factsheet": "factsheets",
    "Documents": "documents",
    "Conversation memory": "conversations",
}
WEB_SEARCH = "Web Search"
DATA_SOURCES = (*SOURCE_COLLECTIONS, WEB_SEARCH)
DEFAULT_SOURCES = ("Meeting Notes", "Factsheet")
# How a whole answer is returned: ragmesh's own JSON, or the notes contract ([N1] citations).
RESPONSE_FORMATS = ("ragmesh", "notes")

# A conversation id: what the gateway makes (32 hex digits) fits it; anything else cannot name one.
CONVERSATION_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
# A picked document: a bare doc id without '/', or a collection name, '/' and the doc id; the doc id not blank.
DOCUMENT_REF = (f"^(?:[^/]*[^/{WHITESPACE}][^/]*|{COLLECTION_NAME.strip('^$')}/[\\s\\S]*"
                f"[^{WHITESPACE}][\\s\\S]*)$")
PATTERN_MEANINGS.update({
    CONVERSATION_ID: "a conversation id (letters, digits, '_', '.', ':' or '-', from a letter or digit)",
    f"(?:{CONVERSATION_ID})|^$": "empty or a conversation id (letters, digits, '_', '.', ':' or '-')",
    DOCUMENT_REF: "a doc_id, or a collection name, '/' and a doc_id (not blank)",
})


def _whole(value: object) -> object:
    """50.0 is the integer 50 in JSON; 50.5, "50" and true are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _distinct(values: list[str]) -> list[str]:
    """Repeats dropped, order kept."""
    return list(dict.fromkeys(values))


Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
ConversationId = Annotated[str, Field(max_length=MAX_NAME_CHARS, pattern=CONVERSATION_ID,
                                      description="One of the caller's conversations (404 otherwise)")]
# Where an id may be left out: empty (or null) starts a new conversation / names none.
MaybeConversationId = Annotated[str, Field(max_length=MAX_NAME_CHARS, pattern=f"(?:{CONVERSATION_ID})|^$")]
Date = Annotated[str, WithJsonSchema({"anyOf": [{"type": "string", "format": "date"},
                                                {"type": "string", "maxLength": 0}]})]


class Declared(BaseModel):
    """A request model: strict types (no "5" for 5), and a ValidationError raised as the InvalidArgument
    that names the first field at fault."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def checked(cls, sent: dict[str, Any]) -> Self:
        """The request `sent` (a proto's fields, or the domain's), checked as the HTTP body is."""
        try:
            return cls.model_validate(sent)
        except ValidationError as exc:
            raise invalid_argument(exc.errors()) from None


_CONVERSATION_ID: TypeAdapter[str] = TypeAdapter(ConversationId)


def checked_conversation_id(value: str) -> str:
    """A conversation id a call names, by the rule the HTTP path parameter declares."""
    try:
        return _CONVERSATION_ID.validate_python(value)
    except ValidationError as exc:
        raise invalid_argument([{**e, "loc": ("conversation_id",)} for e in exc.errors()]) from None


class HistoryTurn(Declared):
    """One earlier turn of a conversation the client holds (the fund-research design's
    `conversation_history` pairs)."""

    question: str = Field(max_length=MAX_QUESTION_CHARS)
    answer: str = Field("", max_length=MAX_ANSWER_CHARS)


class Dated(Declared):
    """A request with the Ask's dates (or some of them), held to their rule: the end not before the start.
    The edges that take a subset of the Ask's fields (the MCP tools) build on it too."""

    @model_validator(mode="after")
    def _dates_in_order(self) -> Self:
        check_date_range(getattr(self, "start_date", "") or "", getattr(self, "end_date", "") or "")
        return self


class AskRequest(Dated):
    """An Ask as a client sends it (the JSON body of POST /api/chat/ask[/stream]; Gateway.Ask's
    AskRequest carries the same fields)."""

    question: str = Field(max_length=MAX_QUESTION_CHARS, pattern=NOT_BLANK, description="Not blank")
    data_sources: Annotated[list[Literal[DATA_SOURCES]], AfterValidator(_distinct)] = Field(  # type: ignore[valid-type]
        default_factory=list, description=f"Repeats are dropped; none: {', '.join(DEFAULT_SOURCES)}")
    start_date: Date | None = Field("", description="YYYY-MM-DD; empty or null: no start date")
    end_date: Date | None = Field("", description="YYYY-MM-DD; empty or null: no end date. Not before start_date "
                                                  "(400)")
    selected_funds: Annotated[list[Annotated[str, Field(max_length=MAX_FUND_CHARS)]], AfterValidator(_distinct)] = \
        Field(default_factory=list, max_length=MAX_FUNDS, description="Restricts the search to these funds")
    conversation_id: MaybeConversationId | None = Field("", description=(
        "One of the caller's conversations (404 otherwise); empty or null starts a new one, named in the strategy "
        "and done events"))
    model: Name | None = Field("", description="Empty or null: the default model")
    tenant: Name = Field("", description="Empty or the credential's own tenant (403 otherwise)")
    user_id: Name = Field("", description="Empty or the caller's own user (403 otherwise, for an admin key too)")
    top_k: Annotated[int | None, BeforeValidator(_whole)] = Field(None, ge=1, le=MAX_TOP_K, description=(
        "Passages to retrieve; null: the strategy decides"))
    document_ids: Annotated[list[Annotated[str, Field(max_length=MAX_DOCUMENT_ID_CHARS, pattern=DOCUMENT_REF)]],
                            AfterValidator(_distinct)] = Field(default_factory=list, max_length=MAX_DOCUMENT_IDS,
                                                               description=(
        "Documents in scope, as collection/doc_id (GET /api/documents) or a bare doc_id (in any searched "
        "collection): every search of the question admits only their chunks. One enables a summary of it (404 "
        "when it is unknown)"))
    persona: Annotated[str, Field(max_length=MAX_PERSONA_CHARS)] | None = Field("", description=(
        "Who the assistant is (\"You are terse.\"), put in the system prompt"))
    context_window: Literal[("", *CONTEXT_WINDOWS)] | None = Field("", description=(  # type: ignore[valid-type]
        "Only documents dated within the last 24h, 48h or week (1w); all: any date, whatever the question says; "
        "empty: any date unless the question names a window (\"in the last 24 hours\")"))
    conversation_history: list[HistoryTurn] = Field(default_factory=list, max_length=MAX_HISTORY_TURNS,
                                                    description=(
        "The conversation so far as the client holds it, oldest first: routed, reused and carried into the prompt "
        "as stored turns are; nothing is stored. Only without conversation_id (400 naming both)"))
    format: Literal[("", *RESPONSE_FORMATS)] | None = Field("", description=(  # type: ignore[valid-type]
        "Empty, null or ragmesh: the Answer; notes: POST /api/chat/ask answers in the notes contract (NotesAnswer: "
        "[N1] citations with cid, noteId, chunkId, createdAt, snippet, score). The stream's events are the same in "
        "both"))

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str | None) -> str | None:
        if model and model not in KNOWN_MODELS:
            raise InvalidArgument("model", f"unknown model {model!r}; known: {', '.join(KNOWN_MODELS)}")
        return model

    @model_validator(mode="after")
    def _one_history(self) -> AskRequest:
        if self.conversation_id and self.conversation_history:
            raise InvalidArgument("conversation_history", "give conversation_id (a stored conversation) or "
                                                          "conversation_history (one the client holds), not both")
        return self

    def to_input(self) -> AskInput:
        """The domain's Ask: every field by its name (null: the domain's default), but those the domain holds
        in another shape (`_CONVERTED`). A field AskInput lacks is a TypeError here, not a field dropped."""
        same = {name: value for name in type(self).model_fields
                if name not in _CONVERTED and (value := getattr(self, name)) is not None}
        return AskInput(**same, response_format=self.format or "ragmesh",
                        conversation_history=[Turn(t.question, t.answer) for t in self.conversation_history],
                        held=bool(self.conversation_history))


# AskRequest fields AskInput holds in another shape: the response format by its domain name (empty: ragmesh's
# own), the client's turns as the domain's Turns (and that the client holds the conversation).
_CONVERTED = frozenset({"format", "conversation_history"})


def document_ref(ref: str) -> tuple[str, str]:
    """A picked document as (collection, doc_id): `collection/doc_id` (what the page's picker sends;
    the doc id may hold more slashes), or a bare doc_id, which names it in any searched collection ("")."""
    collection, slash, doc_id = ref.partition("/")
    return (collection, doc_id) if slash else ("", ref)


@dataclass
class AskInput:
    question: str
    data_sources: list[str] = field(default_factory=list)
    start_date: str = ""
    end_date: str = ""
    selected_funds: list[str] = field(default_factory=list)
    conversation_id: str = ""
    model: str = ""
    tenant: str = ""
    user_id: str = ""
    top_k: int | None = None
    document_ids: list[str] = field(default_factory=list)  # documents in scope; one enables SUMMARY
    persona: str = ""  # who the assistant is, put in the system prompt
    context_window: str = ""  # one of CONTEXT_WINDOWS, or "" (the question may set one)
    response_format: str = "ragmesh"  # one of RESPONSE_FORMATS; "notes" asks for the notes contract
    # A conversation the client holds (oldest first), instead of a stored one: nothing is stored of it.
    conversation_history: list[Turn] = field(default_factory=list)
    held: bool = False  # the client holds the conversation (conversation_history, the OpenAI edge): none stored
    identity: Identity | None = None  # who asks, settled by AskPipeline.prepare from the credential

    @property
    def notes_contract(self) -> bool:
        """The notes contract asked for: linear fusion and the citation-enforced prompt at its temperature."""
        return self.response_format == "notes"

    @property
    def sources(self) -> list[str]:
        return self.data_sources or list(DEFAULT_SOURCES)

    @property
    def collections(self) -> list[str]:
        return [SOURCE_COLLECTIONS[s] for s in self.sources if s in SOURCE_COLLECTIONS]

    def picked(self, collection: str) -> list[str] | None:
        """The picked documents' ids in a collection, for the search filter: None when none is
        picked (the whole collection), [] when all of them are elsewhere (nothing here)."""
        if not self.document_ids:
            return None
        return [doc_id for c, doc_id in map(document_ref, self.document_ids) if c in ("", collection)]

    @property
    def web_search(self) -> bool:
        return WEB_SEARCH in self.sources
