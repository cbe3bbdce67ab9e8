"""Models honestly offered (issue 13 item 5): GET /api/meta and Gateway.ListModels list only the models
the generator is configured for; a question naming another known model is refused before anything is
stored (400 / INVALID_ARGUMENT naming the model and the setting that enables it), never answered by the
extractive backend; Web Search with a model that cannot search says so in the strategy event."""
from __future__ import annotations

import grpc
import httpx
import pytest

from ragmesh.models import GEMINI_MODELS, LOCAL
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import one, sse
from tests.fakes.gemini import text
from tests.stack import DEMO, Stack

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.key(DEMO, "models-analyst")


def _offline(models: list[str]) -> list[str]:
    return [m for m in models if m != LOCAL]  # served where the local-llm extra is installed


def _conversations(url: str, key: str) -> list[str]:
    return [c["conversation_id"] for c in httpx.get(url + "/api/conversations", headers=headers(key)).json()
            ["conversations"]]


def test_meta_and_list_models_name_only_the_configured_models(stack: Stack, key: str, gemini_gateway) -> None:
    meta = httpx.get(stack.http_url + "/api/meta", headers=headers(key)).json()
    assert _offline(meta["models"]) == ["extractive"] and meta["web_search_models"] == []
    listed = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key))).ListModels(
        gateway_pb2.ListModelsRequest(), timeout=10)
    assert (list(listed.models), listed.default_model, list(listed.web_search_models)) == (
        meta["models"], "extractive", [])
    url, _, address = gemini_gateway
    with_gemini = httpx.get(url + "/api/meta", headers=headers(key)).json()
    assert _offline(with_gemini["models"]) == ["extractive", *GEMINI_MODELS]
    assert with_gemini["web_search_models"] == list(GEMINI_MODELS)
    listed = gateway_pb2_grpc.GatewayStub(channel(address, bearer(key))).ListModels(
        gateway_pb2.ListModelsRequest(), timeout=10)
    assert list(listed.web_search_models) == list(GEMINI_MODELS) and listed.default_model == "gemini-2.5-flash"


def test_list_models_needs_a_credential(stack: Stack) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), ())).ListModels(
            gateway_pb2.ListModelsRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert httpx.get(stack.http_url + "/api/meta").status_code == 401


@pytest.mark.parametrize("path", ["/api/chat/ask", "/api/chat/ask/stream"])
@pytest.mark.parametrize("model,setting", [("gemini-2.5-pro", "GEMINI_API_KEY"), ("openai", "OPENAI_BASE_URL")])
def test_a_model_that_is_not_configured_is_400_naming_it_and_its_setting(stack: Stack, key: str, path: str,
                                                                        model: str, setting: str) -> None:
    before = _conversations(stack.http_url, key)
    reply = httpx.post(stack.http_url + path, json={"question": QUESTION, "model": model}, headers=headers(key),
                       timeout=30)
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error["message"].startswith(f"model: model {model!r} is not "
                                                                               f"configured")
    assert setting in error["message"] and "configured: extractive" in error["message"]
    assert _conversations(stack.http_url, key) == before, "nothing stored, nothing answered"


def test_over_grpc_too_and_garbage_names_stay_unknown(stack: Stack, key: str) -> None:
    stub = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key)))
    for model, why in (("gemini-3-high-thinking", "is not configured"), ("gpt-9", "unknown model 'gpt-9'"),
                       ("x" * 129, "the limit is 128")):
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Ask(gateway_pb2.AskRequest(question=QUESTION, model=model), timeout=30))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith("model") and why in refused.value.details()


def test_the_configured_default_and_a_configured_model_still_answer(stack: Stack, key: str) -> None:
    for body in ({"question": QUESTION}, {"question": QUESTION, "model": "extractive"}):
        reply = httpx.post(stack.http_url + "/api/chat/ask", json=body, headers=headers(key), timeout=60)
        assert reply.status_code == 200 and reply.json()["meta"]["model"] == "extractive"


def test_web_search_with_a_model_that_cannot_search_says_so(stack: Stack, key: str) -> None:
    events = sse(stack.http_url + "/api/chat/ask/stream",
                 {"question": QUESTION, "data_sources": ["Meeting Notes", "Web Search"]}, headers(key))
    reason = one(events, "strategy")["reason"]
    assert "Web Search asked, but model 'extractive' cannot search the web" in reason
    assert "answered from internal data only" in reason
    plain = one(sse(stack.http_url + "/api/chat/ask/stream", {"question": QUESTION}, headers(key)), "strategy")
    assert "Web Search" not in plain["reason"]


def test_web_search_with_gemini_searches_and_says_nothing_of_it(gemini_gateway, stack: Stack, key: str) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("Kestrel cut Brazil to 4% [1]."))
    events = sse(url + "/api/chat/ask/stream",
                 {"question": QUESTION, "data_sources": ["Meeting Notes", "Web Search"]}, headers(key))
    assert "cannot search" not in one(events, "strategy")["reason"]
    body = fake.requests("streamGenerateContent")[-1].body
    assert any("googleSearch" in tool or "google_search" in tool for tool in body.get("tools", []))
