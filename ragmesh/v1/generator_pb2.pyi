from ragmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContextBlock(_message.Message):
    __slots__ = ("index", "text", "chunk", "label")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    chunk: _common_pb2.Chunk
    label: str
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., chunk: _Optional[_Union[_common_pb2.Chunk, _Mapping]] = ..., label: _Optional[str] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("question", "answer")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "question", "blocks", "history", "system_instruction", "prompt", "web_search", "temperature")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    model: str
    question: str
    blocks: _containers.RepeatedCompositeFieldContainer[ContextBlock]
    history: _containers.RepeatedCompositeFieldContainer[Turn]
    system_instruction: str
    prompt: str
    web_search: bool
    temperature: float
    def __init__(self, model: _Optional[str] = ..., question: _Optional[str] = ..., blocks: _Optional[_Iterable[_Union[ContextBlock, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., system_instruction: _Optional[str] = ..., prompt: _Optional[str] = ..., web_search: _Optional[bool] = ..., temperature: _Optional[float] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ("model", "finish_reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    model: str
    finish_reason: str
    def __init__(self, model: _Optional[str] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class Grounding(_message.Message):
    __slots__ = ("web", "queries")
    WEB_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    web: _containers.RepeatedCompositeFieldContainer[_common_pb2.Citation]
    queries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, web: _Optional[_Iterable[_Union[_common_pb2.Citation, _Mapping]]] = ..., queries: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("thinking", "content", "citation", "grounding", "usage", "done")
    THINKING_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CITATION_FIELD_NUMBER: _ClassVar[int]
    GROUNDING_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    thinking: str
    content: str
    citation: _common_pb2.Citation
    grounding: Grounding
    usage: _common_pb2.Usage
    done: Done
    def __init__(self, thinking: _Optional[str] = ..., content: _Optional[str] = ..., citation: _Optional[_Union[_common_pb2.Citation, _Mapping]] = ..., grounding: _Optional[_Union[Grounding, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ...) -> None: ...

class GeneratorStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GeneratorStatsResponse(_message.Message):
    __slots__ = ("started", "completed", "cancelled", "models")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    started: int
    completed: int
    cancelled: int
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, started: _Optional[int] = ..., completed: _Optional[int] = ..., cancelled: _Optional[int] = ..., models: _Optional[_Iterable[str]] = ...) -> None: ...

class ContextBudgetRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ContextBudget(_message.Message):
    __slots__ = ("chars", "hits", "window_tokens", "complete_records")
    CHARS_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    chars: int
    hits: int
    window_tokens: int
    complete_records: bool
    def __init__(self, chars: _Optional[int] = ..., hits: _Optional[int] = ..., window_tokens: _Optional[int] = ..., complete_records: _Optional[bool] = ...) -> None: ...
