"""Shared fixtures: one in-process stack with the demo corpus for the integration tests."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ragmesh.clients import RetrieverClient  # noqa: E402
from tests.stack import Stack  # noqa: E402

# The fake provider servers' fixtures (fake_gemini, fake_openai) for every test module.
pytest_plugins = ["tests.fakes.gemini", "tests.fakes.openai"]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from demo.loader import load

    st = Stack(tmp_path_factory.mktemp("stack")).start()

    async def load_demo():
        client = RetrieverClient(st.address("retriever"), 30, 600)
        try:
            return await load(client)
        finally:
            await client.close()

    outcome = st.call(load_demo(), timeout=600)
    assert outcome["INDEXED"] > 40, outcome
    yield st
    st.stop()


def sse(url: str, body: dict, timeout: float = 60) -> list[dict]:
    """POSTs to an SSE endpoint and returns its events, checking the wire format."""
    events = []
    with httpx.stream("POST", url, json=body, timeout=timeout) as resp:
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
