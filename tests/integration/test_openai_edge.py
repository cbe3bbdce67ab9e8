"""The OpenAI-compatible edge (/v1) as its users reach it: the official `openai` SDK and LangChain's
ChatOpenAI pointed at the stack with a ragmesh key. Whole and streamed answers carry their citations;
the messages are the conversation (a follow-up is answered from them, nothing is stored); filters go
through extra_body; closing the stream stops the generator; a colleague's private memo and another
tenant's data are never reached; and every refusal (bad fields, a bad key, garbage, oversized input,
a spent rate window, a failure mid-stream) arrives as OpenAI's error object, raised by the SDK as
the error class its callers catch."""
from __future__ import annotations

import re
import time
import typing
from pathlib import Path

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

from ragmesh.errors import Unavailable
from services.gateway.api.openai_request import ASK_FIELDS, EXTENSIONS, OPENAI_FIELDS, PROFILES, REFUSED
from services.gateway.request import AskRequest
from tests.auth import headers
from tests.conftest import one, sse, wait_for
from tests.stack import DEMO, Stack

KESTREL_Q = "What did Kestrel do with its Brazil exposure in March 2024?"
NORTHWIND = "Northwind Global Macro Fund"
TENANT, OTHER = "openai-t", "openai-u"
SECRET = "Osprey memo: the quokka-lantern bonus pool is 23 percent of salary this year."
MEMO_Q = "What is the quokka-lantern bonus pool in the Osprey memo?"
CITATION_KEYS = {"index", "chunk_id", "doc_id", "collection", "title", "date", "url", "chapter", "section", "paragraph"}


def client(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def sdk(stack: Stack) -> openai.OpenAI:
    return client(stack.http_url, stack.key(DEMO, "openai-member"))


def markers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}


def refused(call, kind: type[openai.APIStatusError], param: str | None, code: str) -> str:
    """The SDK raised `kind` for OpenAI's error object naming `param` and `code`; its message."""
    with pytest.raises(kind) as caught:
        call()
    error = caught.value.body
    assert set(error) >= {"message", "type", "param", "code"}, error
    assert (error["param"], error["code"]) == (param, code), error
    return error["message"]


# -- declarations ------------------------------------------------------------------------------------

def test_every_field_of_openais_request_is_taken_or_refused_and_documented() -> None:
    """A field a new SDK adds fails here until it is decided (honoured or refused) and documented."""
    sent = set(typing.get_type_hints(CompletionCreateParamsStreaming))
    assert sent <= set(OPENAI_FIELDS) | set(REFUSED), sent - set(OPENAI_FIELDS) - set(REFUSED)
    assert set(ASK_FIELDS) == set(AskRequest.model_fields) and set(EXTENSIONS) <= set(AskRequest.model_fields)
    for p in PROFILES:  # each profile's sources are an Ask's
        assert AskRequest.checked({"question": "q", "data_sources": list(p.data_sources)}).data_sources == \
            list(p.data_sources)
    section = Path("docs/api.md").read_text().split("## OpenAI SDK")[1].split("\n## Documents")[0]
    for name in (*OPENAI_FIELDS, *REFUSED, *EXTENSIONS, *(p.id for p in PROFILES)):
        assert f"`{name}`" in section, name


# -- answers ------------------------------------------------------------------------------------------

def test_models_lists_the_answer_profiles_the_first_the_default(sdk: openai.OpenAI) -> None:
    models = sdk.models.list().data
    ids = [m.id for m in models]
    assert ids[0] == "ragmesh" and {"ragmesh-notes", "ragmesh-documents"} <= set(ids)
    assert all(m.object == "model" and m.owned_by == "ragmesh" for m in models)
    assert sdk.models.retrieve("ragmesh-notes").data_sources == ["Meeting Notes"]


def test_a_whole_answer_with_its_citations(sdk: openai.OpenAI) -> None:
    completion = sdk.chat.completions.create(model="ragmesh", messages=[{"role": "user", "content": KESTREL_Q}])
    assert completion.object == "chat.completion" and completion.model == "ragmesh"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert "12% to 4%" in choice.message.content
    citations = completion.citations
    assert markers(choice.message.content) == {c["index"] for c in citations}
    assert all(set(c) == CITATION_KEYS and c["chunk_id"] for c in citations)
    assert any(c["doc_id"] == "mn-kestrel-2024-03-14" and c["collection"] == "meeting_notes" for c in citations)
    assert completion.usage.total_tokens > 0


def test_completions_are_counted_by_their_route(stack: Stack, sdk: openai.OpenAI) -> None:
    sdk.models.list()
    scraped = httpx.get(stack.http_url + "/metrics", timeout=30).text
    assert 'ragmesh_http_requests_total{code="200",route="/v1/models"}' in scraped, "counted as /api requests are"


def test_a_streamed_answer_ends_with_its_citations_usage_and_done(stack: Stack, sdk: openai.OpenAI) -> None:
    chunks = list(sdk.chat.completions.create(model="ragmesh", stream=True, stream_options={"include_usage": True},
                                              messages=[{"role": "user", "content": KESTREL_Q}]))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "12% to 4%" in text
    last, usage = chunks[-2], chunks[-1]
    assert last.choices[0].finish_reason == "stop" and markers(text) == {c["index"] for c in last.citations}
    assert usage.choices == [] and usage.usage.total_tokens > 0
    with httpx.stream("POST", stack.http_url + "/v1/chat/completions", headers=headers(sdk.api_key), timeout=60,
                      json={"messages": [{"role": "user", "content": KESTREL_Q}], "stream": True}) as raw:
        lines = [line for line in raw.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: {") for line in lines[:-1])


def test_langchain_chat_openai_invokes_and_streams(stack: Stack, sdk: openai.OpenAI) -> None:
    llm = ChatOpenAI(model="ragmesh", base_url=stack.http_url + "/v1", api_key=sdk.api_key, max_retries=0)
    reply = llm.invoke([("system", "You are terse."), ("user", KESTREL_Q)])
    assert "12% to 4%" in reply.content and markers(reply.content)
    chunks = list(llm.stream(KESTREL_Q, stream_usage=True))
    streamed = "".join(chunk.content for chunk in chunks)
    assert "12% to 4%" in streamed and markers(streamed)
    assert sum((c.usage_metadata or {}).get("total_tokens", 0) for c in chunks) > 0


def test_system_messages_are_the_persona_and_earlier_pairs_the_history(stack: Stack, sdk: openai.OpenAI,
                                                                       monkeypatch) -> None:
    generator = stack.app("gateway").pipeline.generator
    calls: list[dict] = []
    generate = generator.generate

    def recorded(**kwargs):
        calls.append(kwargs)
        return generate(**kwargs)

    monkeypatch.setattr(generator, "generate", recorded)
    sdk.chat.completions.create(model="ragmesh", messages=[
        {"role": "system", "content": "You are the quarterly-letter assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Who manages Northwind?"}]},
        {"role": "assistant", "content": "Eleanor Whitcombe [1]."},
        {"role": "developer", "content": "Answer in one line."},
        {"role": "user", "content": KESTREL_Q}])
    assert calls and calls[-1]["question"] == KESTREL_Q
    system = calls[-1]["system_instruction"]
    assert "You are the quarterly-letter assistant." in system and "Answer in one line." in system


def test_filters_through_extra_body_narrow_the_citations(sdk: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "How did net exposure change?"}]
    anywhere = sdk.chat.completions.create(model="ragmesh", messages=question).citations
    assert {c["doc_id"].split("-")[1] for c in anywhere} - {"northwind"}, "unfiltered, other funds are cited"
    northwind = sdk.chat.completions.create(model="ragmesh", messages=question,
                                            extra_body={"selected_funds": [NORTHWIND], "top_k": 5}).citations
    assert northwind and {c["doc_id"].split("-")[1] for c in northwind} == {"northwind"}
    none = sdk.chat.completions.create(model="ragmesh", messages=question,
                                       extra_body={"start_date": "2019-01-01", "end_date": "2019-12-31"})
    # nothing in 2019: said first, then the most recent notes (tests/integration/test_fallback_recent_notes.py)
    assert none.choices[0].message.content.startswith("I don't have any notes that match this question")
    assert not [c for c in none.citations if c["date"].startswith("2019")]


def test_data_sources_through_extra_body_choose_what_the_default_profile_searches(sdk: openai.OpenAI) -> None:
    facts = sdk.chat.completions.create(model="ragmesh", messages=[{"role": "user", "content": KESTREL_Q}],
                                        extra_body={"data_sources": ["Factsheet"]})
    assert facts.citations and {c["collection"] for c in facts.citations} == {"factsheets"}


def test_a_profile_searches_its_data_sources_only(sdk: openai.OpenAI) -> None:
    notes = sdk.chat.completions.create(model="ragmesh-notes", messages=[{"role": "user", "content": KESTREL_Q}])
    assert notes.citations and {c["collection"] for c in notes.citations} == {"meeting_notes"}
    assert notes.model == "ragmesh-notes"


def test_a_follow_up_is_answered_from_the_messages_and_nothing_is_stored(stack: Stack, sdk: openai.OpenAI,
                                                                           monkeypatch) -> None:
    pipeline = stack.app("gateway").pipeline
    strategies: list = []
    run = pipeline.run

    async def recorded(prepared):
        async for event in run(prepared):
            if event.kind == "strategy":
                strategies.append(event.value)
            yield event

    monkeypatch.setattr(pipeline, "run", recorded)
    listed = httpx.get(stack.http_url + "/api/conversations", headers=headers(sdk.api_key), timeout=30).json()
    first = sdk.chat.completions.create(model="ragmesh", messages=[{"role": "user", "content": KESTREL_Q}])
    said = first.choices[0].message.content
    follow = sdk.chat.completions.create(model="ragmesh", messages=[
        {"role": "user", "content": KESTREL_Q}, {"role": "assistant", "content": said},
        {"role": "user", "content": "summarize that"}])
    assert strategies[-1].route == "NO_RAG", strategies[-1]
    assert "12% to 4%" in follow.choices[0].message.content
    searched = stack.app("retriever").engine.searches
    sdk.chat.completions.create(model="ragmesh", messages=[
        {"role": "user", "content": KESTREL_Q}, {"role": "assistant", "content": said},
        {"role": "user", "content": "Why did Kestrel cut the Brazil exposure in March 2024?"}])
    assert strategies[-1].retrieval == "RAG_REUSE", strategies[-1]
    assert stack.app("retriever").engine.searches == searched, "the first question's search is reused"
    assert httpx.get(stack.http_url + "/api/conversations", headers=headers(sdk.api_key),
                     timeout=30).json() == listed, "a conversation the client holds is not stored"


# -- stopping -----------------------------------------------------------------------------------------

def test_closing_the_stream_stops_the_generator(stack: Stack, sdk: openai.OpenAI, slow_generation) -> None:
    generator = stack.app("generator").service
    cancelled = generator.cancelled
    stream = sdk.chat.completions.create(model="ragmesh", stream=True, messages=[
        {"role": "user", "content": "How did Harborview change its net exposure?"}])
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break  # leave mid-answer
    stream.close()
    assert wait_for(lambda: generator.cancelled == cancelled + 1), "the generator never saw the stream close"


# -- access -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def memo_keys(stack: Stack) -> dict[str, str]:
    """ana's private memo in tenant TENANT; the keys of ana, of ben (her colleague) and of another tenant's user."""
    keys = {"ana": stack.key(TENANT, "ana"), "ben": stack.key(TENANT, "ben"), "eve": stack.key(OTHER, "eve")}
    events = sse(stack.http_url + "/api/documents", {"collection": "documents", "access": {}, "documents": [
        {"doc_id": "osprey", "text": SECRET, "title": "Osprey memo"}]}, headers(keys["ana"]))
    assert one(events, "done") is True, events
    return keys


def test_a_colleagues_private_memo_and_another_tenants_data_are_never_reached(stack: Stack,
                                                                              memo_keys: dict[str, str]) -> None:
    def asked(who: str, model: str, question: str, **extra) -> openai.types.chat.ChatCompletion:
        return client(stack.http_url, memo_keys[who]).chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], extra_body=extra or None)

    mine = asked("ana", "ragmesh-documents", MEMO_Q)
    assert "23 percent" in mine.choices[0].message.content and mine.citations[0]["doc_id"] == "ana:osprey"
    for who in ("ben", "eve"):
        for extra in ({}, {"document_ids": ["documents/ana:osprey"]}):
            theirs = asked(who, "ragmesh-documents", MEMO_Q, **extra)
            assert "23 percent" not in theirs.choices[0].message.content and not theirs.citations, (who, extra)
        demo = asked(who, "ragmesh", KESTREL_Q)  # the demo tenant's notes are not theirs
        assert "12% to 4%" not in demo.choices[0].message.content and not demo.citations, who


def test_a_jwt_is_a_key_as_good_and_held_to_the_same_rules(stack: Stack, memo_keys: dict[str, str]) -> None:
    import jwt

    secret = "j" * 48
    gateway = stack.start_variant("gateway", jwt_secret=secret, jwt_audience="ragmesh")
    base = f"http://{stack.settings.host}:{gateway.app.http_port}"
    claims = {"tenant": TENANT, "aud": "ragmesh", "exp": int(time.time()) + 120}
    try:
        def asked(token: str) -> openai.types.chat.ChatCompletion:
            return client(base, token).chat.completions.create(model="ragmesh-documents",
                                                               messages=[{"role": "user", "content": MEMO_Q}])

        ana = asked(jwt.encode({**claims, "sub": "ana"}, secret, algorithm="HS256"))
        assert "23 percent" in ana.choices[0].message.content
        ben = asked(jwt.encode({**claims, "sub": "ben"}, secret, algorithm="HS256"))
        assert "23 percent" not in ben.choices[0].message.content and not ben.citations
        expired = jwt.encode({**claims, "sub": "ana", "exp": int(time.time()) - 120}, secret, algorithm="HS256")
        refused(lambda: asked(expired), openai.AuthenticationError, None, "invalid_api_key")
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())


def test_another_users_conversation_is_not_found(stack: Stack, sdk: openai.OpenAI, memo_keys: dict[str, str]) -> None:
    events = sse(stack.http_url + "/api/chat/ask/stream", {"question": KESTREL_Q}, headers(memo_keys["ana"]))
    conv = one(events, "strategy")["conversation_id"]
    ben = client(stack.http_url, memo_keys["ben"])
    for who in (ben, sdk):
        message = refused(lambda: who.chat.completions.create(
            model="ragmesh", messages=[{"role": "user", "content": "And then?"}], extra_body={"conversation_id": conv}),
            openai.NotFoundError, None, "not_found")
        assert "conversation" in message and "ana" not in message
    continued = client(stack.http_url, memo_keys["ana"]).chat.completions.create(
        model="ragmesh", messages=[{"role": "user", "content": "Why?"}], extra_body={"conversation_id": conv})
    assert continued.choices[0].message.content


# -- refusals -----------------------------------------------------------------------------------------

def ask_with(sdk: openai.OpenAI, content: str = KESTREL_Q, **fields):
    return lambda: sdk.chat.completions.create(
        model=fields.pop("model", "ragmesh"), messages=fields.pop("messages", [{"role": "user", "content": content}]),
        **fields)


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools", "unsupported_parameter"),
    ({"tool_choice": "auto"}, "tool_choice", "unsupported_parameter"),
    ({"temperature": 0.2}, "temperature", "unsupported_parameter"),
    ({"max_tokens": 10}, "max_tokens", "unsupported_parameter"),
    ({"top_logprobs": 2}, "top_logprobs", "unsupported_parameter"),
    ({"n": 2}, "n", "invalid_value"),
    ({"logprobs": True}, "logprobs", "invalid_value"),
    ({"response_format": {"type": "json_object"}}, "response_format.type", "invalid_value"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
    ({"extra_body": {"bogus": 1}}, "bogus", "unknown_parameter"),
    ({"extra_body": {"x" * 10_000: 1}}, "'" + "x" * 40 + "'... (10,000 characters)", "unknown_parameter"),
    ({"extra_body": {"question": "Who manages Kestrel?"}}, "question", "unknown_parameter"),
    ({"extra_body": {"tenant": "another"}}, "tenant", "unknown_parameter"),
    ({"extra_body": {"top_k": 0}}, "top_k", "invalid_value"),
    ({"extra_body": {"selected_funds": "Kestrel"}}, "selected_funds", "invalid_value"),
    ({"extra_body": {"start_date": "2024-05-01", "end_date": "2024-01-01"}}, "end_date", "invalid_value"),
    ({"extra_body": {"data_sources": ["Documents"]}, "model": "ragmesh-notes"}, "data_sources", "invalid_value"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages", "invalid_value"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, "messages[1].role",
     "invalid_value"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages[0].role", "invalid_value"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     "messages[0].content", "invalid_value"),
    ({"messages": [{"role": "system", "content": "p" * 501}, {"role": "user", "content": "Hi"}]},
     "messages[0].content", "invalid_value"),
    ({"messages": [{"role": "user", "content": "q" * 10_000}]}, "messages[0].content", "invalid_value"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a" * 20_001},
                   {"role": "user", "content": "q"}]}, "messages[1].content", "invalid_value"),
    ({"messages": [{"role": m, "content": "x"} for m in ("user", "assistant") * 120] + [{"role": "user",
                                                                                          "content": "q"}]},
     "messages", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                   {"role": "user", "content": "z"}], "extra_body": {"conversation_id": "0" * 32}}, "messages",
     "invalid_value"),
])
def test_bad_input_is_refused_in_openais_error_shape(sdk: openai.OpenAI, fields: dict, param: str, code: str) -> None:
    refused(ask_with(sdk, **fields), openai.BadRequestError, param, code)


def test_openais_fields_at_their_taken_values_are_accepted(sdk: openai.OpenAI) -> None:
    completion = ask_with(sdk, model="", n=1, logprobs=False, response_format={"type": "text"}, user="u-17",
                          temperature=None, tools=None)()
    assert completion.model == "ragmesh" and "12% to 4%" in completion.choices[0].message.content


def test_an_unknown_model_is_not_found_as_openai_says(sdk: openai.OpenAI) -> None:
    message = refused(ask_with(sdk, model="gpt-5"), openai.NotFoundError, "model", "model_not_found")
    assert message == "The model `gpt-5` does not exist or you do not have access to it."
    refused(lambda: sdk.models.retrieve("gpt-5"), openai.NotFoundError, "model", "model_not_found")


def test_no_key_or_a_bad_key_is_401_authentication_error(stack: Stack) -> None:
    for key in ("rk_not-a-key", "Bearer", "x" * 5000):
        bad = client(stack.http_url, key)
        refused(ask_with(bad), openai.AuthenticationError, None, "invalid_api_key")
        refused(lambda: bad.models.list(), openai.AuthenticationError, None, "invalid_api_key")
    none = httpx.post(stack.http_url + "/v1/chat/completions", timeout=30,  # the SDK will not send no key
                      json={"model": "ragmesh", "messages": [{"role": "user", "content": "Hi"}]})
    assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
    assert (none.json()["error"]["type"], none.json()["error"]["code"]) == ("authentication_error", "invalid_api_key")


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"', b"[" * 5000 + b"]" * 5000, b"\xff\xfe"])
def test_garbage_bodies_are_400_in_openais_shape(stack: Stack, sdk: openai.OpenAI, body: bytes) -> None:
    reply = httpx.post(stack.http_url + "/v1/chat/completions", content=body, timeout=30,
                       headers={**headers(sdk.api_key), "content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "body", "invalid_value"), error


def test_a_body_over_the_limit_is_413_in_openais_shape(stack: Stack, sdk: openai.OpenAI) -> None:
    limit = stack.settings.http_max_body_bytes
    reply = httpx.post(stack.http_url + "/v1/chat/completions", timeout=30, headers=headers(sdk.api_key),
                       json={"model": "ragmesh", "messages": [{"role": "user", "content": "x" * limit}]})
    assert reply.status_code == 413
    assert reply.json()["error"]["type"] == "invalid_request_error" and "limit" in reply.json()["error"]["message"]


def test_the_browser_rules_hold_under_v1_in_openais_shape(stack: Stack, sdk: openai.OpenAI) -> None:
    body = {"model": "ragmesh", "messages": [{"role": "user", "content": "Hi"}]}
    elsewhere = httpx.post(stack.http_url + "/v1/chat/completions", json=body, timeout=30,
                           headers={**headers(sdk.api_key), "origin": "https://evil.example"})
    assert elsewhere.status_code == 403 and elsewhere.json()["error"]["type"] == "permission_error"
    text = httpx.post(stack.http_url + "/v1/chat/completions", content=b"{}", timeout=30,
                      headers={**headers(sdk.api_key), "content-type": "text/plain"})
    assert text.status_code == 415 and text.json()["error"]["type"] == "invalid_request_error"


def test_an_unknown_path_under_v1_is_404_in_openais_shape(stack: Stack, sdk: openai.OpenAI) -> None:
    reply = httpx.get(stack.http_url + "/v1/embeddings", headers=headers(sdk.api_key), timeout=30)
    assert reply.status_code == 404 and reply.json()["error"]["type"] == "invalid_request_error"


def test_a_spent_rate_window_is_429_rate_limit_error(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", rate_limit_per_minute=2)
    try:
        limited = client(f"http://{stack.settings.host}:{gateway.app.http_port}", stack.key(DEMO, "openai-rate"))
        for _ in range(2):
            limited.chat.completions.create(model="ragmesh", messages=[{"role": "user", "content": "Hi"}])
        with pytest.raises(openai.RateLimitError) as caught:
            limited.chat.completions.create(model="ragmesh", messages=[{"role": "user", "content": "Hi"}])
        assert caught.value.body["code"] == "rate_limit_exceeded" and caught.value.response.headers["retry-after"]
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())


def test_a_failure_mid_stream_is_an_error_event_the_sdk_raises(stack: Stack, sdk: openai.OpenAI,
                                                                monkeypatch) -> None:
    async def unavailable(*args, **kwargs):
        raise Unavailable("retrieval: no answer in time")

    monkeypatch.setattr(stack.app("gateway").pipeline.planner, "plan", unavailable)
    stream = sdk.chat.completions.create(model="ragmesh", stream=True,
                                         messages=[{"role": "user", "content": KESTREL_Q}])
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert caught.value.body["code"] == "unavailable" and "no answer in time" in caught.value.message
    refused(ask_with(sdk), openai.InternalServerError, None, "unavailable")  # whole: 503


def test_a_fault_of_ours_is_500_with_a_request_id(stack: Stack, sdk: openai.OpenAI, monkeypatch) -> None:
    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(stack.app("gateway").pipeline, "prepare", broken)
    message = refused(ask_with(sdk), openai.InternalServerError, None, "internal")
    assert "request id" in message and "a bug" not in message
