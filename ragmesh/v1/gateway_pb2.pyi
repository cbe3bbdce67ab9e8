from ragmesh.v1 import common_pb2 as _common_pb2
from ragmesh.v1 import retriever_pb2 as _retriever_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AskRequest(_message.Message):
    __slots__ = ("question", "data_sources", "start_date", "end_date", "selected_funds", "conversation_id", "model", "tenant", "user_id", "top_k", "document_ids", "persona", "context_window", "conversation_history")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    DATA_SOURCES_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FUNDS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    PERSONA_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_HISTORY_FIELD_NUMBER: _ClassVar[int]
    question: str
    data_sources: _containers.RepeatedScalarFieldContainer[str]
    start_date: str
    end_date: str
    selected_funds: _containers.RepeatedScalarFieldContainer[str]
    conversation_id: str
    model: str
    tenant: str
    user_id: str
    top_k: int
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    persona: str
    context_window: str
    conversation_history: _containers.RepeatedCompositeFieldContainer[HistoryTurn]
    def __init__(self, question: _Optional[str] = ..., data_sources: _Optional[_Iterable[str]] = ..., start_date: _Optional[str] = ..., end_date: _Optional[str] = ..., selected_funds: _Optional[_Iterable[str]] = ..., conversation_id: _Optional[str] = ..., model: _Optional[str] = ..., tenant: _Optional[str] = ..., user_id: _Optional[str] = ..., top_k: _Optional[int] = ..., document_ids: _Optional[_Iterable[str]] = ..., persona: _Optional[str] = ..., context_window: _Optional[str] = ..., conversation_history: _Optional[_Iterable[_Union[HistoryTurn, _Mapping]]] = ...) -> None: ...

class HistoryTurn(_message.Message):
    __slots__ = ("question", "answer")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class Strategy(_message.Message):
    __slots__ = ("route", "reason", "cache_hit", "collections", "filter", "k", "candidate_count", "retrieval_ms", "conversation_id", "cache_key", "chunks", "retrieval", "dense_skipped", "unavailable", "threshold_layer", "time_hint", "detected_funds", "context_chars", "corrections", "model", "variants", "rerank_count", "quality", "time_window", "embed_ms", "search_ms", "followup", "recency", "default_window", "relaxed", "carried")
    class DefaultWindowEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_MS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_FIELD_NUMBER: _ClassVar[int]
    DENSE_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_LAYER_FIELD_NUMBER: _ClassVar[int]
    TIME_HINT_FIELD_NUMBER: _ClassVar[int]
    DETECTED_FUNDS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    CORRECTIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    RERANK_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    TIME_WINDOW_FIELD_NUMBER: _ClassVar[int]
    EMBED_MS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWUP_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    RELAXED_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    route: str
    reason: str
    cache_hit: bool
    collections: _containers.RepeatedScalarFieldContainer[str]
    filter: _common_pb2.Filter
    k: int
    candidate_count: int
    retrieval_ms: float
    conversation_id: str
    cache_key: str
    chunks: int
    retrieval: str
    dense_skipped: bool
    unavailable: _containers.RepeatedScalarFieldContainer[str]
    threshold_layer: int
    time_hint: str
    detected_funds: _containers.RepeatedScalarFieldContainer[str]
    context_chars: int
    corrections: int
    model: str
    variants: _containers.RepeatedScalarFieldContainer[str]
    rerank_count: int
    quality: _containers.RepeatedCompositeFieldContainer[QualityStep]
    time_window: str
    embed_ms: float
    search_ms: float
    followup: Followup
    recency: str
    default_window: _containers.ScalarMap[str, int]
    relaxed: _containers.RepeatedScalarFieldContainer[str]
    carried: Carried
    def __init__(self, route: _Optional[str] = ..., reason: _Optional[str] = ..., cache_hit: _Optional[bool] = ..., collections: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[_common_pb2.Filter, _Mapping]] = ..., k: _Optional[int] = ..., candidate_count: _Optional[int] = ..., retrieval_ms: _Optional[float] = ..., conversation_id: _Optional[str] = ..., cache_key: _Optional[str] = ..., chunks: _Optional[int] = ..., retrieval: _Optional[str] = ..., dense_skipped: _Optional[bool] = ..., unavailable: _Optional[_Iterable[str]] = ..., threshold_layer: _Optional[int] = ..., time_hint: _Optional[str] = ..., detected_funds: _Optional[_Iterable[str]] = ..., context_chars: _Optional[int] = ..., corrections: _Optional[int] = ..., model: _Optional[str] = ..., variants: _Optional[_Iterable[str]] = ..., rerank_count: _Optional[int] = ..., quality: _Optional[_Iterable[_Union[QualityStep, _Mapping]]] = ..., time_window: _Optional[str] = ..., embed_ms: _Optional[float] = ..., search_ms: _Optional[float] = ..., followup: _Optional[_Union[Followup, _Mapping]] = ..., recency: _Optional[str] = ..., default_window: _Optional[_Mapping[str, int]] = ..., relaxed: _Optional[_Iterable[str]] = ..., carried: _Optional[_Union[Carried, _Mapping]] = ...) -> None: ...

class Carried(_message.Message):
    __slots__ = ("funds", "period", "start_date", "end_date", "people", "question", "replaced")
    FUNDS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    PEOPLE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    funds: _containers.RepeatedScalarFieldContainer[str]
    period: str
    start_date: str
    end_date: str
    people: _containers.RepeatedScalarFieldContainer[str]
    question: str
    replaced: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, funds: _Optional[_Iterable[str]] = ..., period: _Optional[str] = ..., start_date: _Optional[str] = ..., end_date: _Optional[str] = ..., people: _Optional[_Iterable[str]] = ..., question: _Optional[str] = ..., replaced: _Optional[_Iterable[str]] = ...) -> None: ...

class Followup(_message.Message):
    __slots__ = ("rework", "signal", "detail")
    REWORK_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    rework: bool
    signal: str
    detail: str
    def __init__(self, rework: _Optional[bool] = ..., signal: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class QualityStep(_message.Message):
    __slots__ = ("step", "status", "ms", "detail")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    step: str
    status: str
    ms: float
    detail: str
    def __init__(self, step: _Optional[str] = ..., status: _Optional[str] = ..., ms: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Citations(_message.Message):
    __slots__ = ("items", "web_queries")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    WEB_QUERIES_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[_common_pb2.Citation]
    web_queries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, items: _Optional[_Iterable[_Union[_common_pb2.Citation, _Mapping]]] = ..., web_queries: _Optional[_Iterable[str]] = ...) -> None: ...

class ChatDone(_message.Message):
    __slots__ = ("conversation_id", "message_id", "model", "stopped", "usage", "held")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    message_id: str
    model: str
    stopped: bool
    usage: _common_pb2.Usage
    held: bool
    def __init__(self, conversation_id: _Optional[str] = ..., message_id: _Optional[str] = ..., model: _Optional[str] = ..., stopped: _Optional[bool] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., held: _Optional[bool] = ...) -> None: ...

class ChatEvent(_message.Message):
    __slots__ = ("searching", "strategy", "generating", "thinking", "content", "citations", "done", "error")
    SEARCHING_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    GENERATING_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    searching: bool
    strategy: Strategy
    generating: bool
    thinking: str
    content: str
    citations: Citations
    done: ChatDone
    error: ErrorInfo
    def __init__(self, searching: _Optional[bool] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., generating: _Optional[bool] = ..., thinking: _Optional[str] = ..., content: _Optional[str] = ..., citations: _Optional[_Union[Citations, _Mapping]] = ..., done: _Optional[_Union[ChatDone, _Mapping]] = ..., error: _Optional[_Union[ErrorInfo, _Mapping]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...

class GetConversationRequest(_message.Message):
    __slots__ = ("conversation_id", "tenant")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    tenant: str
    def __init__(self, conversation_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("message_id", "role", "content", "created_at", "meta", "citations", "strategy", "chunk_map", "web_queries")
    class MetaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ChunkMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CHUNK_MAP_FIELD_NUMBER: _ClassVar[int]
    WEB_QUERIES_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    role: str
    content: str
    created_at: str
    meta: _containers.ScalarMap[str, str]
    citations: _containers.RepeatedCompositeFieldContainer[_common_pb2.Citation]
    strategy: Strategy
    chunk_map: _containers.ScalarMap[str, str]
    web_queries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message_id: _Optional[str] = ..., role: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[str] = ..., meta: _Optional[_Mapping[str, str]] = ..., citations: _Optional[_Iterable[_Union[_common_pb2.Citation, _Mapping]]] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., chunk_map: _Optional[_Mapping[str, str]] = ..., web_queries: _Optional[_Iterable[str]] = ...) -> None: ...

class Conversation(_message.Message):
    __slots__ = ("conversation_id", "messages")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, conversation_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class ListConversationsRequest(_message.Message):
    __slots__ = ("limit", "offset")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    def __init__(self, limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ConversationSummary(_message.Message):
    __slots__ = ("conversation_id", "user_id", "title", "created_at", "updated_at")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    user_id: str
    title: str
    created_at: str
    updated_at: str
    def __init__(self, conversation_id: _Optional[str] = ..., user_id: _Optional[str] = ..., title: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class ListConversationsResponse(_message.Message):
    __slots__ = ("conversations", "next_offset")
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    conversations: _containers.RepeatedCompositeFieldContainer[ConversationSummary]
    next_offset: int
    def __init__(self, conversations: _Optional[_Iterable[_Union[ConversationSummary, _Mapping]]] = ..., next_offset: _Optional[int] = ...) -> None: ...

class DeleteConversationRequest(_message.Message):
    __slots__ = ("conversation_id", "tenant")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    tenant: str
    def __init__(self, conversation_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class DeleteConversationResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class CorrectionRequest(_message.Message):
    __slots__ = ("tenant", "user_id", "conversation_id", "message_id", "question", "wrong_answer", "correction")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    WRONG_ANSWER_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    user_id: str
    conversation_id: str
    message_id: str
    question: str
    wrong_answer: str
    correction: str
    def __init__(self, tenant: _Optional[str] = ..., user_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., message_id: _Optional[str] = ..., question: _Optional[str] = ..., wrong_answer: _Optional[str] = ..., correction: _Optional[str] = ...) -> None: ...

class CorrectionResponse(_message.Message):
    __slots__ = ("correction_id",)
    CORRECTION_ID_FIELD_NUMBER: _ClassVar[int]
    correction_id: str
    def __init__(self, correction_id: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "default_model", "web_search_models")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    default_model: str
    web_search_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ..., default_model: _Optional[str] = ..., web_search_models: _Optional[_Iterable[str]] = ...) -> None: ...

class TranscriptRequest(_message.Message):
    __slots__ = ("raw_text", "refined_text", "tags", "echotag", "transcript_id", "collection", "date", "tenant")
    RAW_TEXT_FIELD_NUMBER: _ClassVar[int]
    REFINED_TEXT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    ECHOTAG_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    raw_text: str
    refined_text: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    echotag: str
    transcript_id: str
    collection: str
    date: str
    tenant: str
    def __init__(self, raw_text: _Optional[str] = ..., refined_text: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., echotag: _Optional[str] = ..., transcript_id: _Optional[str] = ..., collection: _Optional[str] = ..., date: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class TranscriptResponse(_message.Message):
    __slots__ = ("doc_id", "collection", "chunks", "tags", "tagged_by", "note", "stage")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TAGGED_BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    collection: str
    chunks: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    tagged_by: str
    note: str
    stage: str
    def __init__(self, doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., chunks: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., tagged_by: _Optional[str] = ..., note: _Optional[str] = ..., stage: _Optional[str] = ...) -> None: ...

class RenameConversationRequest(_message.Message):
    __slots__ = ("conversation_id", "title")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    title: str
    def __init__(self, conversation_id: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class RenameConversationResponse(_message.Message):
    __slots__ = ("conversation_id", "title")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    title: str
    def __init__(self, conversation_id: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("collection", "doc_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ...) -> None: ...

class ListFundsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFundsResponse(_message.Message):
    __slots__ = ("funds",)
    FUNDS_FIELD_NUMBER: _ClassVar[int]
    funds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, funds: _Optional[_Iterable[str]] = ...) -> None: ...

class GetMetaRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Caller(_message.Message):
    __slots__ = ("tenant", "user", "role", "groups")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    user: str
    role: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class Meta(_message.Message):
    __slots__ = ("models", "default_model", "web_search_models", "data_sources", "funds", "identity")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_MODELS_FIELD_NUMBER: _ClassVar[int]
    DATA_SOURCES_FIELD_NUMBER: _ClassVar[int]
    FUNDS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    default_model: str
    web_search_models: _containers.RepeatedScalarFieldContainer[str]
    data_sources: _containers.RepeatedScalarFieldContainer[str]
    funds: _containers.RepeatedScalarFieldContainer[str]
    identity: Caller
    def __init__(self, models: _Optional[_Iterable[str]] = ..., default_model: _Optional[str] = ..., web_search_models: _Optional[_Iterable[str]] = ..., data_sources: _Optional[_Iterable[str]] = ..., funds: _Optional[_Iterable[str]] = ..., identity: _Optional[_Union[Caller, _Mapping]] = ...) -> None: ...

class NoteCitation(_message.Message):
    __slots__ = ("cid", "note_id", "chunk_id", "created_at", "snippet", "score", "title", "url", "ref")
    CID_FIELD_NUMBER: _ClassVar[int]
    NOTE_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    cid: str
    note_id: str
    chunk_id: str
    created_at: str
    snippet: str
    score: float
    title: str
    url: str
    ref: str
    def __init__(self, cid: _Optional[str] = ..., note_id: _Optional[str] = ..., chunk_id: _Optional[str] = ..., created_at: _Optional[str] = ..., snippet: _Optional[str] = ..., score: _Optional[float] = ..., title: _Optional[str] = ..., url: _Optional[str] = ..., ref: _Optional[str] = ...) -> None: ...

class NotesRetrieval(_message.Message):
    __slots__ = ("k", "strategy", "candidate_count", "rerank_count", "time_ms")
    K_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    RERANK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    k: int
    strategy: str
    candidate_count: int
    rerank_count: int
    time_ms: int
    def __init__(self, k: _Optional[int] = ..., strategy: _Optional[str] = ..., candidate_count: _Optional[int] = ..., rerank_count: _Optional[int] = ..., time_ms: _Optional[int] = ...) -> None: ...

class NotesAnswer(_message.Message):
    __slots__ = ("answer", "citations", "conversation_id", "model", "retrieval")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[NoteCitation]
    conversation_id: str
    model: str
    retrieval: NotesRetrieval
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[NoteCitation, _Mapping]]] = ..., conversation_id: _Optional[str] = ..., model: _Optional[str] = ..., retrieval: _Optional[_Union[NotesRetrieval, _Mapping]] = ...) -> None: ...
