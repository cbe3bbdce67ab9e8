"""Client-held history on the native edges: an Ask carrying the seed's `conversation_history` ({question,
answer} pairs, oldest first) is routed, reuses its scope and builds its prompt as the stored conversation
would, over HTTP and gRPC alike, and nothing of it is stored. Asked as callers of their own (keys made
per test) on the demo corpus; the seed's front end sends no history with its first question (that turn
is stored, as an Ask without history is), then every earlier turn with each next one."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import httpx
import pytest

from ragmesh.errors import InvalidArgument
from ragmesh.identity import Identity
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION, Turn
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.pipeline import HELD_NOTE
from services.gateway.request import MAX_ANSWER_CHARS, MAX_HISTORY_TURNS, MAX_QUESTION_CHARS, AskInput
from services.gateway.whole_answer import WholeAnswer, whole_answer
from tests.auth import bearer, channel, headers
from tests.conftest import one, sse
from tests.conftest import wait_for
from tests.integration.test_memory_and_recency import prompts  # noqa: F401 (the fixture)
from tests.integration.test_replicas import Replica, redis, replicas  # noqa: F401 (the fixtures)
from tests.stack import DEMO, Stack

FIRST = "What did Kestrel do with its Brazil exposure?"
WHY = "Why did Kestrel cut the Brazil exposure?"
SUMMARIZE = "summarize that"
SAID = "In March 2024 Kestrel cut its Brazil exposure from 12% to 4% [1]."  # an answer a client holds
History = Sequence[tuple[str, str]]


@dataclass
class Turned:
    """One answer as either edge gave it."""

    route: str
    retrieval: str
    cache_hit: bool
    signal: str  # the follow-up signal that decided
    reason: str
    conversation_id: str
    message_id: str
    answer: str
    held: bool  # the done event says the client holds the conversation
    cited: list[str] = field(default_factory=list)  # chunk ids

    @property
    def decision(self) -> tuple[str, str, bool, str]:
        return self.route, self.retrieval, self.cache_hit, self.signal


def _turns(history: History) -> list[dict[str, str]]:
    return [{"question": q, "answer": a} for q, a in history]


def over_http(stack: Stack, key: str, question: str, history: History = (), url: str = "", **extra) -> Turned:
    body = {"question": question, **extra} | ({"conversation_history": _turns(history)} if history else {})
    events = sse((url or stack.http_url) + "/api/chat/ask/stream", body, headers(key))
    s, done = one(events, "strategy"), events[-1]
    return Turned(s["route"], s["retrieval"], s["cache_hit"], s["followup"]["signal"], s["reason"],
                  done["conversation_id"], done["message_id"], "".join(e["content"] for e in events if "content" in e),
                  done["held"], [c["chunk_id"] for c in one(events, "citations")])


def over_grpc(stack: Stack, key: str, question: str, history: History = (), **extra) -> Turned:
    turns = [gateway_pb2.HistoryTurn(question=q, answer=a) for q, a in history]
    with channel(stack.address("gateway"), bearer(key)) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(
            gateway_pb2.AskRequest(question=question, conversation_history=turns, **extra), timeout=60))
    [s] = [e.strategy for e in events if e.WhichOneof("event") == "strategy"]
    [done] = [e.done for e in events if e.WhichOneof("event") == "done"]
    [cited] = [e.citations for e in events if e.WhichOneof("event") == "citations"]
    return Turned(s.route, s.retrieval, s.cache_hit, s.followup.signal, s.reason, done.conversation_id,
                  done.message_id, "".join(e.content for e in events if e.WhichOneof("event") == "content"),
                  done.held, [c.chunk_id for c in cited.items])


Asker = Callable[..., Turned]


@pytest.fixture(params=["http", "grpc"])
def asker(request: pytest.FixtureRequest) -> Asker:
    return {"http": over_http, "grpc": over_grpc}[request.param]


def _user(stack: Stack, name: str, tenant: str = DEMO) -> str:
    return stack.key(tenant, name)


def _listed(stack: Stack, key: str) -> list[dict]:
    reply = httpx.get(stack.http_url + "/api/conversations", headers=headers(key))
    assert reply.status_code == 200, reply.text
    return reply.json()["conversations"]


def test_a_held_follow_up_is_routed_reused_and_prompted_as_a_stored_one(stack: Stack, asker: Asker,
                                                                        prompts: list[str]) -> None:
    reference, client = _user(stack, f"stored-{asker.__name__}"), _user(stack, f"held-{asker.__name__}")
    conv = over_http(stack, reference, FIRST).conversation_id
    stored = [over_http(stack, reference, q, conversation_id=conv) for q in (WHY, SUMMARIZE)]
    assert [t.decision for t in stored] == [("DEEP", "RAG_REUSE", True, "no_referent"),
                                           ("NO_RAG", "NO_RAG", False, "rework")]

    opening = asker(stack, client, FIRST)  # the seed's first question: no history yet
    history = [(FIRST, opening.answer)]
    why = asker(stack, client, WHY, history)
    summary = asker(stack, client, SUMMARIZE, [*history, (WHY, why.answer)])
    assert [t.decision for t in (why, summary)] == [t.decision for t in stored]
    assert "same filters and topic" in why.reason and sorted(why.cited) == sorted(stored[0].cited)
    assert f"User: {FIRST}" in prompts[-1] and f"User: {WHY}" in prompts[-1], "the client's turns reach the prompt"
    assert "12% to 4%" in summary.answer, "answered from the turns the client sent"
    assert why.conversation_id == summary.conversation_id != opening.conversation_id
    assert summary.conversation_id.startswith("held-") and summary.message_id == "" and summary.held
    assert not opening.held, "a first question with no history is stored, as before"
    assert summary.reason.endswith(HELD_NOTE)


def test_a_conversation_held_from_its_first_question_reuses_as_a_stored_one(stack: Stack) -> None:
    """As the OpenAI-compatible edge asks (held even with no earlier turn; no native edge can say so)."""
    pipeline, user = stack.app("gateway").pipeline, "held-from-the-start"
    who = Identity(DEMO, user, "member", "key")

    async def turn(question: str, history: list[Turn], conversation_id: str = "") -> WholeAnswer:
        ask = AskInput(question=question, conversation_history=history, held=True, conversation_id=conversation_id)
        return await whole_answer(pipeline, await pipeline.prepare(ask, who))

    first = stack.call(turn(FIRST, []))
    why = stack.call(turn(WHY, [Turn(FIRST, first.answer)]))
    assert first.conversation_id == why.conversation_id and why.conversation_id.startswith("held-")
    assert why.strategy is not None and (why.strategy.retrieval, why.strategy.cache_hit) == ("RAG_REUSE", True)
    assert _listed(stack, _user(stack, user)) == []
    with pytest.raises(InvalidArgument) as err:  # an edge that would neither read nor write the named one
        stack.call(turn(WHY, [], conversation_id=first.conversation_id))
    assert err.value.field == "conversation_id"


def test_a_held_follow_up_on_another_replica_reuses_the_scope_searched_on_the_first(
        stack: Stack, replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    key = _user(stack, "held-replicas")
    history = [(FIRST, over_http(stack, key, FIRST, url=a.url).answer)]
    why = over_http(stack, key, WHY, history, url=b.url)
    assert (why.retrieval, why.cache_hit) == ("RAG_REUSE", True), why.reason
    summary = over_http(stack, key, SUMMARIZE, [*history, (WHY, why.answer)], url=a.url)
    assert summary.decision == ("NO_RAG", "NO_RAG", False, "rework"), summary.reason


def _remembered(stack: Stack, user: str) -> list[str]:
    """The user's messages in the conversation memory."""
    store = SqliteStore(stack.settings.sqlite_path)
    try:
        return [e.document.doc_id for e in store.documents(DEMO, MEMORY_COLLECTION, limit=10_000)
                if e.document.metadata.get(MEMORY_AUTHOR) == user]
    finally:
        store.close()


def test_nothing_of_a_held_conversation_is_stored(stack: Stack, asker: Asker) -> None:
    user = f"held-nothing-{asker.__name__}"
    key = _user(stack, user)
    turned = [asker(stack, key, WHY, [(FIRST, SAID)]), asker(stack, key, SUMMARIZE, [(FIRST, SAID), (WHY, SAID)]),
              asker(stack, key, "bye", [(FIRST, SAID)])]
    assert "saved" not in turned[-1].answer, "a goodbye does not say the conversation is saved"
    whole = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(key), timeout=60,
                       json={"question": WHY, "conversation_history": _turns([(FIRST, SAID)])}).json()
    assert whole["conversation_id"] == turned[0].conversation_id
    assert whole["meta"]["strategy"]["reason"].endswith(HELD_NOTE)
    stack.call(stack.app("gateway").memory.idle())
    assert _listed(stack, key) == [], "no conversation (nor title) is made"
    assert _remembered(stack, user) == [], "no message goes into the conversation memory"
    store = stack.app("gateway").store
    for t in turned:
        assert t.conversation_id.startswith("held-") and t.message_id == "" and t.reason.endswith(HELD_NOTE)
        assert t.held
        assert store.conversation_owner(t.conversation_id) is None and store.messages(t.conversation_id) == []
        assert store.conversation_summary(t.conversation_id) == ""

    # The id a held answer names is no stored conversation, for its own caller too: 404, never its scope.
    held = turned[0].conversation_id
    for method, path, body in [("GET", f"/api/conversations/{held}", None),
                               ("POST", "/api/chat/ask", {"question": WHY, "conversation_id": held}),
                               ("POST", "/api/chat/stop", {"conversation_id": held})]:
        reply = httpx.request(method, stack.http_url + path, json=body, headers=headers(key), timeout=30)
        assert reply.status_code == 404, (path, reply.text)


def test_a_held_scope_is_never_reused_by_another_tenant_or_a_colleague(stack: Stack) -> None:
    """The attacker sends the very turns (the same first question, so the same conversation, were its id
    derived from the turns alone): it searches its own data, and reuses none of the owner's hits."""
    owner = _user(stack, "alice")
    history = [(FIRST, over_http(stack, owner, FIRST).answer)]
    mine = over_http(stack, owner, WHY, history)
    assert mine.cache_hit and mine.retrieval == "RAG_REUSE" and mine.cited

    for tenant, user in [("held-attacker", "alice"), (DEMO, "bob")]:
        theirs = over_http(stack, _user(stack, user, tenant), WHY, history)
        assert theirs.retrieval == "RAG_NEW_QUERY" and not theirs.cache_hit, (tenant, user, theirs.reason)
        assert "no cached scope for this conversation" in theirs.reason, (tenant, user, theirs.reason)
        assert theirs.conversation_id != mine.conversation_id
        assert tenant == DEMO or theirs.cited == [], "no data of DEMO"
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(_user(stack, "bob")), timeout=30,
                       json={"question": WHY, "conversation_id": mine.conversation_id})
    assert reply.status_code == 404


def test_two_held_conversations_opening_alike_never_answer_from_each_others_search(stack: Stack) -> None:
    """They share their id, so the scope entry: one asks about another topic (its search replaces the
    entry), then the other's follow-up finds hits that lack its words and searches again."""
    key = _user(stack, "held-twins")
    history = [(FIRST, over_http(stack, key, FIRST).answer)]
    elsewhere = over_http(stack, key, "What were the top holdings in the healthcare portfolio?", history)
    assert elsewhere.retrieval == "RAG_NEW_QUERY", elsewhere.reason
    why = over_http(stack, key, WHY, history)
    assert why.retrieval == "RAG_NEW_QUERY" and not why.cache_hit, why.reason
    assert not set(why.cited) & set(elsewhere.cited), "none of the other conversation's hits"


@pytest.mark.parametrize(("turns", "extra", "named"), [
    ([{"question": FIRST, "answer": SAID}], {"conversation_id": "0" * 32}, "conversation_history"),
    ([{"question": FIRST, "answer": SAID}] * (MAX_HISTORY_TURNS + 1), {}, "conversation_history"),
    ([{"question": FIRST, "answer": "x" * (MAX_ANSWER_CHARS + 1)}], {}, "conversation_history[0].answer"),
    ([{"question": "q" * 4001, "answer": SAID}], {}, "conversation_history[0].question"),
    ([{"question": FIRST, "answer": SAID, "speaker": "user"}], {}, "conversation_history[0].speaker"),
    ([{"answer": SAID}], {}, "conversation_history[0].question"),
    (["What did Kestrel do?"], {}, "conversation_history[0]"),
])
def test_bad_history_is_400_naming_the_field(stack: Stack, turns: list, extra: dict, named: str) -> None:
    reply = httpx.post(stack.http_url + "/api/chat/ask/stream", headers=stack.headers, timeout=30,
                       json={"question": WHY, "conversation_history": turns, **extra})
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(named), reply.text
    if "conversation_id" in extra:
        assert "conversation_id" in reply.json()["error"]["message"]


@pytest.mark.parametrize(("turns", "extra", "named"), [
    ([gateway_pb2.HistoryTurn(question=FIRST, answer=SAID)], {"conversation_id": "0" * 32}, "conversation_history"),
    ([gateway_pb2.HistoryTurn(question=FIRST, answer=SAID)] * (MAX_HISTORY_TURNS + 1), {}, "conversation_history"),
    ([gateway_pb2.HistoryTurn(question=FIRST, answer="x" * (MAX_ANSWER_CHARS + 1))], {}, "conversation_history[0].answer"),
])
def test_bad_history_over_grpc_is_invalid_argument_naming_the_field(stack: Stack, turns: list, extra: dict,
                                                                    named: str) -> None:
    with channel(stack.address("gateway"), stack.metadata) as ch:
        with pytest.raises(grpc.RpcError) as err:
            list(gateway_pb2_grpc.GatewayStub(ch).Ask(
                gateway_pb2.AskRequest(question=WHY, conversation_history=turns, **extra), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(named), \
        err.value.details()


def test_a_long_held_conversation_carries_its_newest_turns_that_fit_and_no_summary(
        stack: Stack, prompts: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    planner = stack.app("gateway").pipeline.planner
    monkeypatch.setattr(planner, "settings", planner.settings.replace(history_char_budget=1500))
    history = [(f"What did the fund report in week {i}?", f"Turn {i} said: " + "flat returns. " * 25)
               for i in range(MAX_HISTORY_TURNS)]  # the most a client may send, each turn about 400 characters
    over_http(stack, _user(stack, "held-long"), "What premium was paid for Brightwater Bio?", history)
    prompt = prompts[-1]
    carried = [i for i in range(MAX_HISTORY_TURNS) if f"Turn {i} said:" in prompt]
    newest = MAX_HISTORY_TURNS - 1
    assert carried == [newest - 2, newest - 1, newest], "the newest turns that fit 1500 characters (400 each), whole"
    assert "Conversation summary" not in prompt


@pytest.mark.parametrize("edge", ["http", "grpc"])
def test_a_client_closing_a_held_answer_stops_the_generation(stack: Stack, slow_generation, edge: str) -> None:
    generator = stack.app("generator").service
    cancelled = generator.cancelled
    key = _user(stack, f"held-leaver-{edge}")
    question, history = "How did Harborview change its net exposure?", [(FIRST, SAID)]
    if edge == "http":
        with httpx.stream("POST", stack.http_url + "/api/chat/ask/stream", timeout=30, headers=headers(key),
                          json={"question": question, "conversation_history": _turns(history)}) as resp:
            for line in resp.iter_lines():
                if "content" in json.loads(line[len("data: "):] or "{}"):
                    break  # leave mid-answer: the context manager closes the connection
    else:
        with channel(stack.address("gateway"), bearer(key)) as ch:
            call = gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(
                question=question, conversation_history=[gateway_pb2.HistoryTurn(question=q, answer=a)
                                                         for q, a in history]), timeout=30)
            for event in call:
                if event.WhichOneof("event") == "content":
                    call.cancel()
                    break
    assert wait_for(lambda: generator.cancelled == cancelled + 1), "generator never saw the cancellation"
    assert _listed(stack, key) == [], "nothing of the stopped answer is stored"


def test_the_largest_history_the_declaration_takes_fits_the_body_limit(stack: Stack) -> None:
    """Every bound at its largest (ASCII) is still a body the bridge reads: refused as too large, a client
    within the documented bounds would get a 413 it cannot understand."""
    key = _user(stack, "largest-history")
    turns = [{"question": "q" * MAX_QUESTION_CHARS, "answer": "a" * MAX_ANSWER_CHARS}] * MAX_HISTORY_TURNS
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(key), timeout=60,
                       json={"question": WHY, "conversation_history": turns})
    assert reply.status_code == 200, reply.text

