"""An Ask as the gateway's domain sees it, checked field by field before anything is written."""
from __future__ import annotations

from dataclasses import dataclass, field

from ragmesh.errors import InvalidArgument
from ragmesh.identity import Identity
from ragmesh.models import KNOWN_MODELS
from ragmesh.validation import check_date_range, check_list, check_name, check_text, check_top_k, shown

MAX_QUESTION_CHARS = 2000
MAX_NAME_CHARS = 128  # tenant, user, conversation and model names
MAX_FUNDS = 50
MAX_FUND_CHARS = 200
MAX_DOCUMENT_IDS = 20
MAX_DOCUMENT_ID_CHARS = 512
MAX_PERSONA_CHARS = 500
CONTEXT_WINDOWS = ("24h", "48h", "1w", "all")  # 003: documents dated within the last day, two, a week; or any


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
# How a whole answer is returned: ragmesh's own JSON, or 002's notes-assistant contract ([N1] citations).
RESPONSE_FORMATS = ("ragmesh", "notes")


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
    persona: str = ""  # 003: who the assistant is, put in the system prompt
    context_window: str = ""  # 003: one of CONTEXT_WINDOWS, or "" (the question may set one)
    response_format: str = "ragmesh"  # one of RESPONSE_FORMATS; "notes" asks for 002's contract
    identity: Identity | None = None  # who asks, settled by AskPipeline.prepare from the credential

    def validate(self) -> None:
        """Every field bounded and checked, lists deduplicated, before anything is searched or written."""
        check_text("question", self.question, MAX_QUESTION_CHARS)
        if not self.question.strip():
            raise InvalidArgument("question", "must not be empty")
        for name in ("conversation_id", "model", "tenant", "user_id"):
            check_text(name, getattr(self, name), MAX_NAME_CHARS)
        self.data_sources = check_list("data_sources", self.data_sources, len(DATA_SOURCES), MAX_NAME_CHARS)
        self.selected_funds = check_list("selected_funds", self.selected_funds, MAX_FUNDS, MAX_FUND_CHARS)
        self.document_ids = check_list("document_ids", self.document_ids, MAX_DOCUMENT_IDS, MAX_DOCUMENT_ID_CHARS)
        for i, ref in enumerate(self.document_ids):
            collection, doc_id = document_ref(ref)
            if collection:
                check_name(f"document_ids[{i}] collection", collection)
            check_text(f"document_ids[{i}]", doc_id, MAX_DOCUMENT_ID_CHARS, required=True)
        check_text("start_date", self.start_date, 10)
        check_text("end_date", self.end_date, 10)
        check_date_range(self.start_date, self.end_date)
        if self.model and self.model not in KNOWN_MODELS:
            raise InvalidArgument("model", f"unknown model {self.model!r}; known: {', '.join(KNOWN_MODELS)}")
        unknown = [s for s in self.data_sources if s not in DATA_SOURCES]
        if unknown:
            raise InvalidArgument(
                "data_sources", f"unknown data source {unknown[0]!r}; known: {', '.join(DATA_SOURCES)}"
            )
        check_top_k(self.top_k)
        check_text("persona", self.persona, MAX_PERSONA_CHARS)
        if self.context_window and self.context_window not in CONTEXT_WINDOWS:
            raise InvalidArgument("context_window", f"must be one of {', '.join(CONTEXT_WINDOWS)} (or empty), "
                                                    f"got {shown(self.context_window)}")
        if self.response_format not in RESPONSE_FORMATS:
            raise InvalidArgument("format", f"unknown response format {shown(self.response_format)}; "
                                            f"known: {', '.join(RESPONSE_FORMATS)}")

    @property
    def notes_contract(self) -> bool:
        """002's contract asked for: linear fusion and the citation-enforced prompt at 002's temperature."""
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
