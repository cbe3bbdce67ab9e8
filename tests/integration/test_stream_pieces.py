"""An answer's text reaches the SSE client in fewer, larger pieces (STREAM_PIECE_MS), through real
generator and gateway servers: the same answer, the same first piece, under half as many content events
as the extractive backend's pieces of 3 words every 15 ms."""
from __future__ import annotations

from ragmesh.serving import ServiceHost
from tests.conftest import answer_of, sse
from tests.stack import Stack

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"


def _content(stack: Stack, piece_ms: float) -> list[str]:
    generator: ServiceHost = stack.start_variant("generator", extractive_delay_ms=15.0, stream_piece_ms=piece_ms)
    gateway: ServiceHost = stack.start_variant("gateway", generator_addr=generator.address)
    events = sse(f"http://127.0.0.1:{gateway.app.http_port}/api/chat/ask/stream", {"question": QUESTION},
                 stack.headers)
    assert events[-1].get("done") is True, events[-1]
    assert "12% to 4%" in answer_of(events)
    return [e["content"] for e in events if "content" in e]


def test_the_answer_streams_in_fewer_pieces_with_the_same_text_and_first_piece(stack: Stack) -> None:
    each, joined = _content(stack, 0.0), _content(stack, 50.0)
    assert "".join(joined) == "".join(each)
    assert joined[0] == each[0], "the first piece goes out as it comes"
    assert len(each) >= 10 and len(joined) <= len(each) / 2, (len(each), len(joined))
