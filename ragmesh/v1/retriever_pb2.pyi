from ragmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Fusion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_RRF: _ClassVar[Fusion]
    FUSION_LINEAR: _ClassVar[Fusion]

class IngestStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INGEST_STAGE_UNSPECIFIED: _ClassVar[IngestStage]
    PARSED: _ClassVar[IngestStage]
    CHUNKED: _ClassVar[IngestStage]
    EMBEDDED: _ClassVar[IngestStage]
    INDEXED: _ClassVar[IngestStage]
    UNCHANGED: _ClassVar[IngestStage]
    FAILED: _ClassVar[IngestStage]
FUSION_RRF: Fusion
FUSION_LINEAR: Fusion
INGEST_STAGE_UNSPECIFIED: IngestStage
PARSED: IngestStage
CHUNKED: IngestStage
EMBEDDED: IngestStage
INDEXED: IngestStage
UNCHANGED: IngestStage
FAILED: IngestStage

class SearchRequest(_message.Message):
    __slots__ = ("query", "collections", "filter", "top_k", "query_vector", "dense_weight", "sparse_weight", "rrf_k", "variants", "fusion", "boosters", "recency_weight")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    DENSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SPARSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RRF_K_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    BOOSTERS_FIELD_NUMBER: _ClassVar[int]
    RECENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    query: str
    collections: _containers.RepeatedScalarFieldContainer[str]
    filter: _common_pb2.Filter
    top_k: int
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    dense_weight: float
    sparse_weight: float
    rrf_k: int
    variants: _containers.RepeatedScalarFieldContainer[str]
    fusion: Fusion
    boosters: Boosters
    recency_weight: float
    def __init__(self, query: _Optional[str] = ..., collections: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[_common_pb2.Filter, _Mapping]] = ..., top_k: _Optional[int] = ..., query_vector: _Optional[_Iterable[float]] = ..., dense_weight: _Optional[float] = ..., sparse_weight: _Optional[float] = ..., rrf_k: _Optional[int] = ..., variants: _Optional[_Iterable[str]] = ..., fusion: _Optional[_Union[Fusion, str]] = ..., boosters: _Optional[_Union[Boosters, _Mapping]] = ..., recency_weight: _Optional[float] = ...) -> None: ...

class Boosters(_message.Message):
    __slots__ = ("time_window", "half_life_days", "decay_floor", "recent_boost", "recent_days", "conversation_id", "same_conversation_boost", "tag_boost", "prefer_authoritative", "min_similarity", "fallback_similarity", "expand_parents", "now")
    TIME_WINDOW_FIELD_NUMBER: _ClassVar[int]
    HALF_LIFE_DAYS_FIELD_NUMBER: _ClassVar[int]
    DECAY_FLOOR_FIELD_NUMBER: _ClassVar[int]
    RECENT_BOOST_FIELD_NUMBER: _ClassVar[int]
    RECENT_DAYS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SAME_CONVERSATION_BOOST_FIELD_NUMBER: _ClassVar[int]
    TAG_BOOST_FIELD_NUMBER: _ClassVar[int]
    PREFER_AUTHORITATIVE_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    EXPAND_PARENTS_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    time_window: str
    half_life_days: float
    decay_floor: float
    recent_boost: float
    recent_days: int
    conversation_id: str
    same_conversation_boost: float
    tag_boost: float
    prefer_authoritative: bool
    min_similarity: float
    fallback_similarity: float
    expand_parents: bool
    now: str
    def __init__(self, time_window: _Optional[str] = ..., half_life_days: _Optional[float] = ..., decay_floor: _Optional[float] = ..., recent_boost: _Optional[float] = ..., recent_days: _Optional[int] = ..., conversation_id: _Optional[str] = ..., same_conversation_boost: _Optional[float] = ..., tag_boost: _Optional[float] = ..., prefer_authoritative: _Optional[bool] = ..., min_similarity: _Optional[float] = ..., fallback_similarity: _Optional[float] = ..., expand_parents: _Optional[bool] = ..., now: _Optional[str] = ...) -> None: ...

class Hit(_message.Message):
    __slots__ = ("chunk", "score", "dense_rank", "sparse_rank", "dense_score", "sparse_score", "fused_score", "boosts", "parent_text")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    DENSE_RANK_FIELD_NUMBER: _ClassVar[int]
    SPARSE_RANK_FIELD_NUMBER: _ClassVar[int]
    DENSE_SCORE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_SCORE_FIELD_NUMBER: _ClassVar[int]
    FUSED_SCORE_FIELD_NUMBER: _ClassVar[int]
    BOOSTS_FIELD_NUMBER: _ClassVar[int]
    PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    chunk: _common_pb2.Chunk
    score: float
    dense_rank: int
    sparse_rank: int
    dense_score: float
    sparse_score: float
    fused_score: float
    boosts: _containers.RepeatedScalarFieldContainer[str]
    parent_text: str
    def __init__(self, chunk: _Optional[_Union[_common_pb2.Chunk, _Mapping]] = ..., score: _Optional[float] = ..., dense_rank: _Optional[int] = ..., sparse_rank: _Optional[int] = ..., dense_score: _Optional[float] = ..., sparse_score: _Optional[float] = ..., fused_score: _Optional[float] = ..., boosts: _Optional[_Iterable[str]] = ..., parent_text: _Optional[str] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("embed_ms", "dense_ms", "sparse_ms", "fusion_ms", "total_ms")
    EMBED_MS_FIELD_NUMBER: _ClassVar[int]
    DENSE_MS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_MS_FIELD_NUMBER: _ClassVar[int]
    FUSION_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    embed_ms: float
    dense_ms: float
    sparse_ms: float
    fusion_ms: float
    total_ms: float
    def __init__(self, embed_ms: _Optional[float] = ..., dense_ms: _Optional[float] = ..., sparse_ms: _Optional[float] = ..., fusion_ms: _Optional[float] = ..., total_ms: _Optional[float] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("hits", "timings", "candidate_count", "dense_skipped", "threshold_layer")
    HITS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DENSE_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_LAYER_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[Hit]
    timings: Timings
    candidate_count: int
    dense_skipped: bool
    threshold_layer: int
    def __init__(self, hits: _Optional[_Iterable[_Union[Hit, _Mapping]]] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., candidate_count: _Optional[int] = ..., dense_skipped: _Optional[bool] = ..., threshold_layer: _Optional[int] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("doc_id", "collection", "text", "metadata", "date", "tenant", "title", "content", "filename", "mime_type", "summarize", "access", "more_content", "vector")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    MORE_CONTENT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    collection: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    date: str
    tenant: str
    title: str
    content: bytes
    filename: str
    mime_type: str
    summarize: bool
    access: _common_pb2.Access
    more_content: bool
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., date: _Optional[str] = ..., tenant: _Optional[str] = ..., title: _Optional[str] = ..., content: _Optional[bytes] = ..., filename: _Optional[str] = ..., mime_type: _Optional[str] = ..., summarize: _Optional[bool] = ..., access: _Optional[_Union[_common_pb2.Access, _Mapping]] = ..., more_content: _Optional[bool] = ..., vector: _Optional[_Iterable[float]] = ...) -> None: ...

class IngestProgress(_message.Message):
    __slots__ = ("doc_id", "collection", "stage", "chunks", "error", "filename", "doc_type", "redactions", "sensitivity", "summarized")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    DOC_TYPE_FIELD_NUMBER: _ClassVar[int]
    REDACTIONS_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    collection: str
    stage: IngestStage
    chunks: int
    error: str
    filename: str
    doc_type: str
    redactions: int
    sensitivity: str
    summarized: bool
    def __init__(self, doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., stage: _Optional[_Union[IngestStage, str]] = ..., chunks: _Optional[int] = ..., error: _Optional[str] = ..., filename: _Optional[str] = ..., doc_type: _Optional[str] = ..., redactions: _Optional[int] = ..., sensitivity: _Optional[str] = ..., summarized: _Optional[bool] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("collection", "doc_ids", "tenant", "filter")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    filter: _common_pb2.Filter
    def __init__(self, collection: _Optional[str] = ..., doc_ids: _Optional[_Iterable[str]] = ..., tenant: _Optional[str] = ..., filter: _Optional[_Union[_common_pb2.Filter, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("documents", "chunks")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    documents: int
    chunks: int
    def __init__(self, documents: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ("own_tenant",)
    OWN_TENANT_FIELD_NUMBER: _ClassVar[int]
    own_tenant: bool
    def __init__(self, own_tenant: _Optional[bool] = ...) -> None: ...

class CollectionInfo(_message.Message):
    __slots__ = ("name", "documents", "chunks", "indexed_chunks", "dense_index", "data_source", "members_upload", "default_access")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    INDEXED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DENSE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ACCESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    documents: int
    chunks: int
    indexed_chunks: int
    dense_index: str
    data_source: str
    members_upload: bool
    default_access: _common_pb2.Access
    def __init__(self, name: _Optional[str] = ..., documents: _Optional[int] = ..., chunks: _Optional[int] = ..., indexed_chunks: _Optional[int] = ..., dense_index: _Optional[str] = ..., data_source: _Optional[str] = ..., members_upload: _Optional[bool] = ..., default_access: _Optional[_Union[_common_pb2.Access, _Mapping]] = ...) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionInfo]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionInfo, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("collections", "store", "dimensions", "searches")
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionInfo]
    store: str
    dimensions: int
    searches: int
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionInfo, _Mapping]]] = ..., store: _Optional[str] = ..., dimensions: _Optional[int] = ..., searches: _Optional[int] = ...) -> None: ...

class FieldValuesRequest(_message.Message):
    __slots__ = ("field", "collections", "tenant")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    field: str
    collections: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    def __init__(self, field: _Optional[str] = ..., collections: _Optional[_Iterable[str]] = ..., tenant: _Optional[str] = ...) -> None: ...

class FieldValuesResponse(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class UpsertRequest(_message.Message):
    __slots__ = ("chunk", "vector")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    chunk: _common_pb2.Chunk
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, chunk: _Optional[_Union[_common_pb2.Chunk, _Mapping]] = ..., vector: _Optional[_Iterable[float]] = ...) -> None: ...

class UpsertResponse(_message.Message):
    __slots__ = ("documents", "chunks", "errors", "rejected")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    documents: int
    chunks: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    rejected: int
    def __init__(self, documents: _Optional[int] = ..., chunks: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ..., rejected: _Optional[int] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("collection", "doc_id", "tenant")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    tenant: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class SectionOutline(_message.Message):
    __slots__ = ("title", "summary", "page")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    title: str
    summary: str
    page: int
    def __init__(self, title: _Optional[str] = ..., summary: _Optional[str] = ..., page: _Optional[int] = ...) -> None: ...

class DocumentInfo(_message.Message):
    __slots__ = ("doc_id", "collection", "tenant", "title", "metadata", "date", "chunk_count", "content_hash", "summary", "sections", "access")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SECTIONS_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    collection: str
    tenant: str
    title: str
    metadata: _containers.ScalarMap[str, str]
    date: str
    chunk_count: int
    content_hash: str
    summary: str
    sections: _containers.RepeatedCompositeFieldContainer[SectionOutline]
    access: _common_pb2.Access
    def __init__(self, doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., tenant: _Optional[str] = ..., title: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., date: _Optional[str] = ..., chunk_count: _Optional[int] = ..., content_hash: _Optional[str] = ..., summary: _Optional[str] = ..., sections: _Optional[_Iterable[_Union[SectionOutline, _Mapping]]] = ..., access: _Optional[_Union[_common_pb2.Access, _Mapping]] = ...) -> None: ...

class ConfigureCollectionRequest(_message.Message):
    __slots__ = ("name", "dense_index", "stemming", "stopwords", "min_token_len")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DENSE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STEMMING_FIELD_NUMBER: _ClassVar[int]
    STOPWORDS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKEN_LEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    dense_index: str
    stemming: bool
    stopwords: bool
    min_token_len: int
    def __init__(self, name: _Optional[str] = ..., dense_index: _Optional[str] = ..., stemming: _Optional[bool] = ..., stopwords: _Optional[bool] = ..., min_token_len: _Optional[int] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("collection", "limit", "offset")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    collection: str
    limit: int
    offset: int
    def __init__(self, collection: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class DocumentEntry(_message.Message):
    __slots__ = ("document", "updated_at", "summarized")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_FIELD_NUMBER: _ClassVar[int]
    document: DocumentInfo
    updated_at: str
    summarized: bool
    def __init__(self, document: _Optional[_Union[DocumentInfo, _Mapping]] = ..., updated_at: _Optional[str] = ..., summarized: _Optional[bool] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_offset")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentEntry]
    next_offset: int
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentEntry, _Mapping]]] = ..., next_offset: _Optional[int] = ...) -> None: ...

class GetChunkRequest(_message.Message):
    __slots__ = ("chunk_id",)
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    def __init__(self, chunk_id: _Optional[str] = ...) -> None: ...

class ChunkInfo(_message.Message):
    __slots__ = ("chunk", "parent_text", "document")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    chunk: _common_pb2.Chunk
    parent_text: str
    document: DocumentInfo
    def __init__(self, chunk: _Optional[_Union[_common_pb2.Chunk, _Mapping]] = ..., parent_text: _Optional[str] = ..., document: _Optional[_Union[DocumentInfo, _Mapping]] = ...) -> None: ...

class SetDocumentAccessRequest(_message.Message):
    __slots__ = ("collection", "doc_id", "access")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    access: _common_pb2.Access
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ..., access: _Optional[_Union[_common_pb2.Access, _Mapping]] = ...) -> None: ...

class ChunkRef(_message.Message):
    __slots__ = ("chunk_id", "text_sha256")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_SHA256_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    text_sha256: str
    def __init__(self, chunk_id: _Optional[str] = ..., text_sha256: _Optional[str] = ...) -> None: ...

class CheckChunksRequest(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkRef]
    def __init__(self, chunks: _Optional[_Iterable[_Union[ChunkRef, _Mapping]]] = ...) -> None: ...

class CheckChunksResponse(_message.Message):
    __slots__ = ("current",)
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    current: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, current: _Optional[_Iterable[bool]] = ...) -> None: ...

class CollectionAccess(_message.Message):
    __slots__ = ("collection", "members_upload", "default_access")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ACCESS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    members_upload: bool
    default_access: _common_pb2.Access
    def __init__(self, collection: _Optional[str] = ..., members_upload: _Optional[bool] = ..., default_access: _Optional[_Union[_common_pb2.Access, _Mapping]] = ...) -> None: ...
