"""Shared fixtures: one in-process stack with the demo corpus for the integration tests, and a
Gemini-backed gateway beside it."""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every embedder a test starts (in process or as a subprocess) shares one ONNX export of the model, named by
# a fingerprint of the weights and the exporting versions, instead of exporting it again in each data dir.
os.environ.setdefault("MODEL_CACHE_DIR", str(Path(sys.prefix) / "ragmesh-model-cache"))

from ragmesh.clients import ClientAuth, RetrieverClient  # noqa: E402
from tests.stack import Stack  # noqa: E402

# The fake provider servers' fixtures (fake_gemini, fake_openai) for every test module.
pytest_plugins = ["tests.fakes.gemini", "tests.fakes.openai"]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from demo.loader import load

    st = Stack(tmp_path_factory.mktemp("stack")).start()

    async def load_demo():
        client = RetrieverClient(st.address("retriever"), 30, 600, ClientAuth.key(st.settings, st.admin_key))
        try:
            return await load(client)
        finally:
            await client.close()

    outcome = st.call(load_demo(), timeout=600)
    assert outcome["INDEXED"] > 40, outcome
    yield st
    st.stop()


@pytest.fixture(scope="module", params=["memory", "milvus"])
def backend(request: pytest.FixtureRequest, stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(search backend, address) of a retriever over the stack's store: the stack's own for memory,
    for milvus one more retriever on a milvus-lite file of the test module's own (shared by its tests)."""
    if request.param == "memory":
        yield "memory", stack.address("retriever")
        return
    uri = tmp_path_factory.mktemp("milvus") / "index.db"
    host = stack.start_variant("retriever", retriever_backend="milvus", milvus_uri=str(uri))
    yield "milvus", host.address
    stack.extra.remove(host)
    stack.call(host.stop())


@pytest.fixture(scope="module")
def ask_url(stack: Stack, backend: tuple[str, str]) -> Iterator[str]:
    """The HTTP bridge of a gateway asking the retriever on each search backend (the whole stack on it)."""
    name, address = backend
    if name == "memory":
        yield stack.http_url
        return
    host = stack.start_variant("gateway", retriever_addr=address)
    yield f"http://{stack.settings.host}:{host.app.http_port}"
    stack.extra.remove(host)
    stack.call(host.stop())


# The quality stack's model calls off: tests that script the model's replies in order get the answer's call.
QUALITY_OFF = dict(quality_rewrite=False, quality_rerank=False, quality_compress=False, quality_history=False)


@pytest.fixture(scope="module")
def gemini_gateway(stack: Stack) -> Iterator[tuple]:
    """A generator on the fake Gemini server and a gateway in front of it, beside the stack's
    own: (the gateway's HTTP base URL, the FakeGemini, the gateway's gRPC address)."""
    from tests.fakes.gemini import FakeGemini  # a plugin module: imported after pytest registers it

    fake = FakeGemini()
    fake.server.start()
    generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
    gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                  default_model="gemini-2.5-flash", **QUALITY_OFF)
    yield f"http://127.0.0.1:{gateway.app.http_port}", fake, gateway.address
    fake.server.stop()


def sse(url: str, body: dict, headers: dict[str, str], timeout: float = 60) -> list[dict]:
    """POSTs to an SSE endpoint with a credential and returns its events, checking the wire format."""
    events = []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=timeout) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line:
                assert line.startswith("data: "), line
                events.append(json.loads(line[len("data: "):]))
    return events


def answer_of(events: list[dict]) -> str:
    return "".join(e["content"] for e in events if "content" in e)


def one(events: list[dict], key: str) -> dict | list:
    found = [e[key] for e in events if key in e]
    assert len(found) == 1, (key, events)
    return found[0]


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Whether `check` holds within `timeout` seconds (for what another thread or process does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture()
def slow_generation(stack: Stack) -> Iterator[None]:
    """The stack's offline answerer a quarter second a sentence: an answer is still running when a test
    stops it or goes away."""
    backend = stack.app("generator").service.backends["extractive"]
    backend.delay, saved = 0.25, backend.delay
    yield
    backend.delay = saved
