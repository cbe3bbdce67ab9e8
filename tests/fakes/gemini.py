"""A fake Gemini API (the Developer API's REST surface) for the real google-genai SDK.

Point the SDK at `FakeGemini.url` with `HttpOptions(base_url=...)`. It serves
`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` from a script of replies
queued per test (thought parts, text parts, grounding and usage metadata, errors shaped
like Google's, with RetryInfo / ErrorInfo details), and `:embedContent` /
`:batchEmbedContents` with deterministic, deliberately unnormalised vectors. Every
request is recorded so tests can assert on what the SDK actually sent.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tests.fakes.http import FakeHTTPServer, Reply, Request, Rules

_ROUTE = re.compile(r"^/v1(?:beta)?/models/(?P<model>[^:/]+):(?P<rpc>\w+)$")
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


# -- pieces of a streamed GenerateContentResponse ----------------------------------------------
def chunk(*parts: dict, finish_reason: str | None = None, grounding: dict | None = None,
          usage: dict | None = None, model: str = "gemini-2.5-flash") -> dict:
    """One streamed response chunk, as the API sends it."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish_reason:
        candidate["finishReason"] = finish_reason
    if grounding:
        candidate["groundingMetadata"] = grounding
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": "fake"}
    if usage:
        out["usageMetadata"] = usage
    return out


def thought(text: str) -> dict:
    return chunk({"text": text, "thought": True})


def text(value: str) -> dict:
    return chunk({"text": value})


def grounding(sources: list[tuple[str, str]], queries: list[str]) -> dict:
    """groundingMetadata from (title, uri) pairs, as Google Search grounding returns it."""
    return {
        "webSearchQueries": queries,
        "groundingChunks": [{"web": {"uri": uri, "title": title}} for title, uri in sources],
        "groundingSupports": [
            {"segment": {"startIndex": 0, "endIndex": 10, "text": "grounded"}, "groundingChunkIndices": [i]}
            for i in range(len(sources))
        ],
    }


def usage(prompt: int, candidates: int, thoughts: int = 0) -> dict:
    return {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "thoughtsTokenCount": thoughts,
            "totalTokenCount": prompt + candidates + thoughts}


def fake_vector(text: str, dims: int) -> list[float]:
    """Deterministic per text and not of unit length, like truncated Gemini embeddings."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return (np.random.default_rng(seed).standard_normal(dims) * 3.0).round(6).tolist()


class FakeGemini:
    def __init__(self) -> None:
        self.server = FakeHTTPServer(self._handle)
        self._script: dict[str, deque[Reply]] = defaultdict(deque)  # rpc -> replies in order
        self.rules = Rules()  # streamed replies chosen by the request's text, before the script

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def hung_up(self) -> threading.Event:
        """Set when a client closed its connection mid-stream."""
        return self.server.hung_up

    def requests(self, rpc: str | None = None) -> list[Request]:
        return [r for r in self.server.recorded() if rpc is None or r.path.endswith(":" + rpc)]

    # -- scripting ------------------------------------------------------------------------------
    def stream(self, *chunks: dict, delay: float = 0.0, hold_after: int | None = None) -> None:
        """Queues a streamed reply; `hold_after=n` sends n chunks, then waits for the client to leave."""
        self._script["streamGenerateContent"].append(
            Reply(events=[json.dumps(c) for c in chunks], delay=delay, hold_after=hold_after)
        )

    def respond(self, containing: str, reply: str | Callable[[str], str], *, hold: bool = False) -> None:
        """A standing streamed text reply to every generateContent request whose system instruction and
        contents contain `containing`; `reply` may make it from that text. `hold`: send nothing and
        keep the stream open until the client leaves (a model that never answers)."""
        def make(sent: str) -> Reply:
            value = reply(sent) if callable(reply) else reply
            return Reply(events=[json.dumps(text(value))], hold_after=0 if hold else None)

        self.rules.add(containing, make)

    def error(self, status: int, message: str, *, retry_delay: str | None = None, reason: str | None = None,
              rpc: str = "streamGenerateContent") -> None:
        """Queues an error reply for `rpc` in Google's shape, with RetryInfo (429) or ErrorInfo details."""
        details: list[dict] = []
        if retry_delay:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
        if reason:
            details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                            "domain": "googleapis.com"})
        body = {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN"),
                          "details": details}}
        self._script[rpc].append(Reply(status=status, json=body))

    # -- serving --------------------------------------------------------------------------------
    def _handle(self, request: Request) -> Reply:
        route = _ROUTE.match(request.path)
        if request.method != "POST" or route is None:
            return Reply(404, {"error": {"code": 404, "message": f"no route {request.path}", "status": "NOT_FOUND"}})
        if route["rpc"] == "streamGenerateContent" and (ruled := self.rules.reply(_text_of(request.body))):
            return ruled
        if self._script[route["rpc"]]:
            return self._script[route["rpc"]].popleft()
        if route["rpc"] == "embedContent":
            return Reply(json={"embedding": {"values": self._embed(request.body)}})
        if route["rpc"] == "batchEmbedContents":
            return Reply(json={"embeddings": [{"values": self._embed(r)} for r in request.body["requests"]]})
        return Reply(500, {"error": {"code": 500, "message": "the test scripted no reply", "status": "INTERNAL"}})

    @staticmethod
    def _embed(body: dict) -> list[float]:
        text = "".join(p.get("text", "") for p in body["content"]["parts"])
        return fake_vector(text, int(body.get("outputDimensionality") or 3072))


def _text_of(body: dict) -> str:
    """The system instruction and contents of a generateContent request, as one text."""
    parts = body.get("systemInstruction", {}).get("parts", []) + [p for c in body["contents"] for p in c["parts"]]
    return "\n".join(p.get("text", "") for p in parts)


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    fake = FakeGemini()
    fake.server.start()
    yield fake
    fake.server.stop()
