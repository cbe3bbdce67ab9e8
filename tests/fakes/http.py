"""A small HTTP/1.1 server the provider fakes share.

It runs its own event loop in a daemon thread on a free loopback port, so code under
test can call it from sync code (the embedder) and async code (the generator) alike.
It answers with scripted replies: a JSON body, or server-sent events sent one by one,
optionally slowly or holding the stream open, and it notices when a client hangs up
before a reply is complete, which is what the cancellation tests assert on.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Request:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None


@dataclass
class Reply:
    """What the fake answers. With `events` the reply is an SSE stream (`data: <event>` each)."""

    status: int = 200
    json: Any = None
    events: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds between events: a slow stream
    hold_after: int | None = None  # send this many events, then keep the stream open until the client leaves


class Rules:
    """Standing replies chosen by what a request says, checked before a fake's queue (latest rule
    first), so requests sent side by side each get the reply that fits them."""

    def __init__(self) -> None:
        self._rules: list[tuple[str, Callable[[str], Reply]]] = []
        self._lock = threading.Lock()

    def add(self, containing: str, make: Callable[[str], Reply]) -> None:
        with self._lock:
            self._rules.insert(0, (containing, make))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def reply(self, text: str) -> Reply | None:
        """The reply of the first rule whose text `text` contains, made from `text`."""
        with self._lock:
            make = next((m for containing, m in self._rules if containing in text), None)
        return make(text) if make else None


class FakeHTTPServer:
    def __init__(self, handler: Callable[[Request], Reply]) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.hung_up = threading.Event()  # a client closed its connection mid-reply
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeHTTPServer":
        self._thread.start()

        async def listen() -> asyncio.Server:
            return await asyncio.start_server(self._connection, "127.0.0.1", 0)

        self._server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def recorded(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                with self._lock:
                    self.requests.append(request)
                if not await self._answer(self.handler(request), reader, writer):
                    self.hung_up.set()
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Writes the reply; False when the client hung up before it was complete."""
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
        headers = dict(reply.headers)
        if not reply.events:
            body = json.dumps(reply.json).encode()
            headers |= {"content-type": "application/json", "content-length": str(len(body))}
            writer.write(_head(head, headers) + body)
            await writer.drain()
            return True
        headers |= {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
        writer.write(_head(head, headers))
        sent = reply.events if reply.hold_after is None else reply.events[: reply.hold_after]
        for n, event in enumerate(sent):
            if n and reply.delay:
                await asyncio.sleep(reply.delay)
            if reader.at_eof():
                return False
            data = f"data: {event}\r\n\r\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            try:
                await writer.drain()
            except ConnectionError:
                return False
        if reply.hold_after is not None:
            await _wait_for_hang_up(reader)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _head(lines: list[str], headers: dict[str, str]) -> bytes:
    return ("\r\n".join(lines + [f"{k}: {v}" for k, v in headers.items()]) + "\r\n\r\n").encode()


async def _wait_for_hang_up(reader: asyncio.StreamReader) -> None:
    """Blocks until the client closes the connection (it sends nothing while reading a reply)."""
    while await reader.read(4096):
        pass


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed an idle keep-alive connection
    request_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    raw = await reader.readexactly(int(headers.get("content-length", "0")))
    url = urlsplit(target)
    return Request(method, url.path, dict(parse_qsl(url.query)), headers, json.loads(raw) if raw else None)
