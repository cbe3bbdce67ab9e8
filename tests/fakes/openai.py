"""A fake OpenAI-compatible server: `POST /v1/chat/completions` with `stream: true`,
answered from replies scripted per test as SSE `data:` chunks ending in `[DONE]`,
or as errors in OpenAI's shape. Requests are recorded for assertions."""
from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator

import pytest

from tests.fakes.http import FakeHTTPServer, Reply, Request, Rules

MODEL = "llama3.2:3b"


def delta(content: str = "", reasoning: str = "", finish_reason: str | None = None) -> dict:
    """One streamed chat.completion.chunk."""
    d = {"role": "assistant"} | ({"content": content} if content else {}) | (
        {"reasoning_content": reasoning} if reasoning else {})
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": MODEL,
            "choices": [{"index": 0, "delta": d, "finish_reason": finish_reason}]}


def usage(prompt: int, completion: int) -> dict:
    """The final chunk `stream_options.include_usage` asks for: usage and no choices."""
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": MODEL, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


class FakeOpenAI:
    def __init__(self) -> None:
        self.server = FakeHTTPServer(self._handle)
        self._script: deque[Reply] = deque()
        self.rules = Rules()  # replies chosen by the request's messages, before the script

    @property
    def url(self) -> str:
        """The base URL clients are configured with (OPENAI_BASE_URL)."""
        return self.server.url + "/v1"

    @property
    def hung_up(self) -> threading.Event:
        return self.server.hung_up

    def requests(self) -> list[Request]:
        return self.server.recorded()

    def stream(self, *chunks: dict, hold_after: int | None = None, delay: float = 0.0) -> None:
        events = [json.dumps(c) for c in chunks] + ["[DONE]"]
        self._script.append(Reply(events=events, hold_after=hold_after, delay=delay))

    def respond(self, containing: str, reply: str | Callable[[str], str]) -> None:
        """A standing streamed reply to every request whose messages contain `containing`; `reply` may
        make it from their text."""
        self.rules.add(containing, lambda sent: Reply(events=[json.dumps(delta(
            reply(sent) if callable(reply) else reply, finish_reason="stop")), "[DONE]"]))

    def error(self, status: int, message: str, retry_after: str | None = None) -> None:
        headers = {"retry-after": retry_after} if retry_after else {}
        body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        self._script.append(Reply(status=status, json=body, headers=headers))

    def _handle(self, request: Request) -> Reply:
        if request.method != "POST" or request.path != "/v1/chat/completions":
            return Reply(404, {"error": {"message": f"no route {request.path}"}})
        if ruled := self.rules.reply("\n".join(str(m.get("content", "")) for m in request.body["messages"])):
            return ruled
        if not self._script:
            return Reply(500, {"error": {"message": "the test scripted no reply"}})
        return self._script.popleft()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.server.start()
    yield fake
    fake.server.stop()
