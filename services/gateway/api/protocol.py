"""The HTTP protocol the bridge's uvicorn runs: httptools' parser with a deadline for a request's
headers. Uvicorn itself bounds only the idle time between requests (timeout_keep_alive); a client
that connects, or starts a request, and then sends its headers a byte at a time would hold its
socket for ever. Such a connection never reaches the app (it holds no slot), but sockets are finite."""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def with_header_deadline(seconds: float) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn.Config(http=...): a connection whose request headers are not
    complete `seconds` after it connected (or after the request's first byte) is closed."""

    class HeaderDeadline(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

    return HeaderDeadline
