"""An OpenAI chat completion request (POST /v1/chat/completions) as an Ask. The `messages` array is the
conversation the client holds: the last, a user message, is the question; the user/assistant pairs
before it its history (nothing of it is stored); system (or developer) messages the persona. `model`
names an answer profile (GET /v1/models). Ragmesh's filters are extension fields (the official SDK
sends them through `extra_body`) declared by `AskRequest` and nowhere else: ASK_FIELDS says how each
Ask field travels on this edge. OpenAI's fields that the endpoint does not honour are refused naming
the field, never ignored (OPENAI_FIELDS says what each does here)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ragmesh.errors import InvalidArgument
from ragmesh.validation import shown
from services.gateway.api.openai_errors import ModelNotFound, Unsupported, UnknownParameter
from services.gateway.request import MAX_HISTORY_TURNS, MAX_NAME_CHARS, AskInput, AskRequest, Declared

# Ask fields sent as extension fields of the same name and type (the SDK's extra_body).
EXTENSIONS = ("data_sources", "selected_funds", "start_date", "end_date", "document_ids", "context_window", "top_k",
              "conversation_id")
# How every field of an Ask travels on this edge: read by the declared-once test (every edge carries every field).
ASK_FIELDS: dict[str, str] = {
    **{name: f"extension field `{name}`" for name in EXTENSIONS},
    "question": "messages: the last message, a user message",
    "conversation_history": "messages: the user/assistant pairs before the last",
    "persona": "messages: the system (or developer) messages, joined",
    "model": "not carried: `model` names an answer profile, answered by the deployment's default model",
    "tenant": "not carried: the credential's own tenant",
    "user_id": "not carried: the credential's own user",
    "format": "not carried: the answer is a chat.completion (its citations a top-level `citations` list)",
}
# OpenAI's request fields the endpoint takes, and what each does (anything else OpenAI defines: Unsupported).
OPENAI_FIELDS: dict[str, str] = {
    "model": "an answer profile of GET /v1/models; absent or empty: the first",
    "messages": "the conversation, held by the client",
    "stream": "true: chat.completion.chunk events, then data: [DONE]",
    "stream_options": "include_usage: a last chunk with the usage and no choices",
    "n": "1 (or null) only",
    "logprobs": "false (or null) only",
    "response_format": '{"type": "text"} (or null) only',
    "user": "taken, not used: the credential names the caller",
}
REFUSED = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "top_logprobs", "audio",
           "modalities", "prediction", "temperature", "top_p", "max_tokens", "max_completion_tokens",
           "frequency_penalty", "presence_penalty", "seed", "stop", "logit_bias", "reasoning_effort",
           "service_tier", "web_search_options", "verbosity", "metadata", "store", "moderation", "prompt_cache_key",
           "prompt_cache_options", "prompt_cache_retention", "safety_identifier")
REFUSAL = ("not supported by ragmesh's chat completions: the answer profile (model) decides how answers are made "
           "and their length; send null or leave it out")
MAX_MESSAGES = 2 * MAX_HISTORY_TURNS + 11  # the history's pairs, the question, and up to ten system messages
MAX_USER_CHARS = 256


@dataclass(frozen=True)
class Profile:
    """An answer profile, named by `model`: what it searches (no data sources: what an Ask without them does)."""

    id: str
    description: str
    data_sources: tuple[str, ...] = ()


PROFILES = (
    Profile("ragmesh", "Meeting notes and factsheets, as an Ask without data_sources; the data_sources extension "
                       "field chooses others"),
    Profile("ragmesh-notes", "Meeting notes only", ("Meeting Notes",)),
    Profile("ragmesh-factsheets", "Factsheets only", ("Factsheet",)),
    Profile("ragmesh-documents", "Uploaded documents only", ("Documents",)),
)


def profile(model: str) -> Profile:
    """The profile `model` names (empty: the first); ModelNotFound (404, model_not_found) for any other."""
    found = next((p for p in PROFILES if p.id == (model or PROFILES[0].id)), None)
    if found is None:
        raise ModelNotFound(model)
    return found


class TextPart(Declared):
    type: Literal["text"]
    text: str


class ChatMessage(Declared):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, content: Any) -> Any:
        """Images, audio and files are not read: a part of another type is refused, naming its type."""
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise PydanticCustomError("text_only", "only text parts are read, got a part of type {kind}",
                                              {"kind": repr(kind)})
        return content

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(Declared):
    include_usage: bool | None = None


class TextFormat(Declared):
    type: Literal["text"]


class _OpenAIFields(Declared):
    model: str = Field("", max_length=MAX_NAME_CHARS)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: Literal[1] | None = None
    logprobs: Literal[False] | None = None
    response_format: TextFormat | None = None
    user: str | None = Field(None, max_length=MAX_USER_CHARS)

    @model_validator(mode="before")
    @classmethod
    def _honoured_only(cls, sent: Any) -> Any:
        """OpenAI's fields this endpoint does not honour (null: not sent), and fields no one defines,
        refused by name."""
        if not isinstance(sent, dict):
            return sent
        for name, value in sent.items():
            if name in REFUSED and value is not None:
                raise Unsupported(name, REFUSAL)
            if name not in REFUSED and name not in cls.model_fields:
                raise UnknownParameter(name if len(name) <= MAX_NAME_CHARS else shown(name), (
                    f"unrecognized request argument; ragmesh's extension fields: {', '.join(EXTENSIONS)}"))
        return {name: value for name, value in sent.items() if name not in REFUSED}

    @model_validator(mode="after")
    def _options_with_stream(self) -> _OpenAIFields:
        if self.stream_options is not None and not self.stream:
            raise InvalidArgument("stream_options", "only allowed when stream is true")
        return self


# The body: OpenAI's fields above, and the extension fields as AskRequest declares them.
ChatBody = create_model("ChatBody", __base__=_OpenAIFields, **{  # type: ignore[call-overload]
    name: (AskRequest.model_fields[name].annotation, AskRequest.model_fields[name]) for name in EXTENSIONS})


@dataclass(frozen=True)
class ChatCall:
    """A checked completion request: the profile it names, its Ask, and how the answer goes back."""

    profile: Profile
    ask: AskInput
    stream: bool
    include_usage: bool


def chat_call(sent: Any) -> ChatCall:
    """The request body `sent` (parsed JSON) checked and made an Ask; an InvalidArgument (or a subclass,
    or ModelNotFound) naming the field at fault."""
    if not isinstance(sent, dict):
        raise InvalidArgument("body", "must be a JSON object")
    body: Any = ChatBody.checked(sent)
    chosen = profile(body.model)
    options = body.stream_options
    return ChatCall(chosen, _ask(body, chosen), bool(body.stream), bool(options and options.include_usage))


def _ask(body: Any, chosen: Profile) -> AskInput:
    """The Ask of a checked ChatBody. A bound the Ask holds (a question's length, a persona's, an earlier
    answer's) is refused naming the message that breaks it."""
    messages: list[ChatMessage] = body.messages
    system = [i for i, m in enumerate(messages) if m.role in ("system", "developer")]
    said = [i for i, m in enumerate(messages) if m.role not in ("system", "developer")]
    if not said or messages[said[-1]].role != "user":
        raise InvalidArgument("messages", "the last user or assistant message must be a user message (the question)")
    for n, i in enumerate(said):
        if messages[i].role != ("user" if n % 2 == 0 else "assistant"):
            raise InvalidArgument(f"messages[{i}].role", "user and assistant messages must alternate, from a user "
                                                         "message (the history's pairs, then the question)")
    pairs = [(said[n], said[n + 1]) for n in range(0, len(said) - 1, 2)]
    sent = {name: getattr(body, name) for name in EXTENSIONS if name in body.model_fields_set}
    if body.conversation_id and pairs:
        raise InvalidArgument("messages", "with conversation_id the stored conversation is the history: send only "
                                          "the new question (and system messages)")
    if chosen.data_sources and "data_sources" in sent:
        raise InvalidArgument("data_sources", f"the model {chosen.id} searches {', '.join(chosen.data_sources)}; "
                                              f"use the model {PROFILES[0].id} to choose data_sources")
    where = {"question": said[-1], "persona": system[0] if system else 0}
    where |= {f"conversation_history[{n}].question": q for n, (q, _) in enumerate(pairs)}
    where |= {f"conversation_history[{n}].answer": a for n, (_, a) in enumerate(pairs)}
    try:
        request = AskRequest.checked({
            **sent, "question": messages[said[-1]].text, "persona": "\n\n".join(messages[i].text for i in system),
            "conversation_history": [{"question": messages[q].text, "answer": messages[a].text} for q, a in pairs],
            **({"data_sources": list(chosen.data_sources)} if chosen.data_sources else {})})
    except InvalidArgument as exc:
        if exc.field not in where:
            raise
        why = str(exc).removeprefix(f"{exc.field}: ")
        raise InvalidArgument(f"messages[{where[exc.field]}].content", f"{why} ({exc.field.split('[')[0]})") from None
    ask = request.to_input()
    ask.held = not request.conversation_id  # the client holds the conversation: nothing of it is stored
    return ask

