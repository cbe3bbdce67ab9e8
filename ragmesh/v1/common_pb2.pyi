from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("chunk_id", "doc_id", "collection", "text", "metadata", "date", "tenant", "parent_chunk_id", "chunk_index")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PARENT_CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    doc_id: str
    collection: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    date: str
    tenant: str
    parent_chunk_id: str
    chunk_index: int
    def __init__(self, chunk_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., date: _Optional[str] = ..., tenant: _Optional[str] = ..., parent_chunk_id: _Optional[str] = ..., chunk_index: _Optional[int] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("tenant", "start_date", "end_date", "date_field", "equals", "doc_ids")
    class InEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StringList
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...
    class EqualsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_FIELD_NUMBER: _ClassVar[int]
    IN_FIELD_NUMBER: _ClassVar[int]
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    start_date: str
    end_date: str
    date_field: str
    equals: _containers.ScalarMap[str, str]
    doc_ids: StringList
    def __init__(self, tenant: _Optional[str] = ..., start_date: _Optional[str] = ..., end_date: _Optional[str] = ..., date_field: _Optional[str] = ..., equals: _Optional[_Mapping[str, str]] = ..., doc_ids: _Optional[_Union[StringList, _Mapping]] = ..., **kwargs) -> None: ...

class Access(_message.Message):
    __slots__ = ("users", "groups", "tenant", "owner")
    USERS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    tenant: bool
    owner: str
    def __init__(self, users: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ..., tenant: _Optional[bool] = ..., owner: _Optional[str] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("index", "chunk_id", "doc_id", "collection", "title", "date", "metadata", "url", "snippet", "ref", "chapter", "section", "paragraph")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    CHAPTER_FIELD_NUMBER: _ClassVar[int]
    SECTION_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPH_FIELD_NUMBER: _ClassVar[int]
    index: int
    chunk_id: str
    doc_id: str
    collection: str
    title: str
    date: str
    metadata: _containers.ScalarMap[str, str]
    url: str
    snippet: str
    ref: str
    chapter: str
    section: str
    paragraph: int
    def __init__(self, index: _Optional[int] = ..., chunk_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., title: _Optional[str] = ..., date: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., url: _Optional[str] = ..., snippet: _Optional[str] = ..., ref: _Optional[str] = ..., chapter: _Optional[str] = ..., section: _Optional[str] = ..., paragraph: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "thinking_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    THINKING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    thinking_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., thinking_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...
