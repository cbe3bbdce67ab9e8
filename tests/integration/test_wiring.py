"""Wiring that had no test, through `POST /api/chat/ask` and `Gateway.Ask` on a gateway whose model
is the fake Gemini server (the real google-genai SDK), asserting on what the model received: the last
3 turns of history in the prompt, a sentence two blocks share given once, a parent's text cut at
1,600 characters, the global-summary prompt of 004's Path B; and the gateway's gRPC Stop,
DeleteConversation and Ingest. The documents go into a tenant of their own (WIRING), through
Gateway.Ingest, so the demo corpus the other tests read is untouched."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2
from services.gateway.context import PARENT_MAX_CHARS
from tests.auth import bearer, channel, headers
from tests.fakes.gemini import text
from tests.integration.test_gateway_gemini import sent_prompt
from tests.stack import Stack
from tests.unit.test_ingest_chunking import paragraphs

WIRING = "wiring"
SHARED = "The Zephyr turbine project was approved by the board on 12 May."
BOOK = "\n\n".join(f"Chapter {c}\n\n" + paragraphs(8, 5, c) for c in range(1, 4))
HANDBOOK = "\n\n".join(f"Section {n}\n\nThe onboarding handbook section {n} explains how new engineers get "
                       f"laptops, accounts and a mentor in week {n}. " * 6 for n in range(1, 6))


@pytest.fixture(scope="module")
def wiring(gemini_gateway, stack: Stack) -> Iterator[tuple]:
    """(HTTP URL, fake Gemini, gRPC address, the WIRING admin key, its Gateway.Ingest progress by doc)."""
    url, fake, address = gemini_gateway
    key = stack.key(WIRING, "lead", "admin")
    docs = [
        retriever_pb2.Document(doc_id="zephyr-a", collection="documents",
                               text=f"{SHARED} Blades: Oslo."),
        retriever_pb2.Document(doc_id="zephyr-b", collection="documents",
                               text=f"{SHARED} Gearbox: Porto."),
        retriever_pb2.Document(doc_id="saga", collection="documents", filename="saga.txt", content=BOOK.encode()),
        retriever_pb2.Document(doc_id="handbook", collection="documents", text=HANDBOOK, summarize=True),
    ]
    with channel(address, bearer(key)) as ch:
        progress = list(gateway_pb2_grpc.GatewayStub(ch).Ingest(iter(docs), timeout=300))
    yield url, fake, address, key, {p.doc_id: p for p in progress}


def ask(url: str, key: str, **body) -> dict:
    reply = httpx.post(url + "/api/chat/ask", json=body, headers=headers(key), timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_gateway_ingest_streams_progress_into_the_callers_tenant(wiring, stack: Stack) -> None:
    url, _, address, key, final = wiring
    assert {d: retriever_pb2.IngestStage.Name(p.stage) for d, p in final.items()} == {
        "zephyr-a": "INDEXED", "zephyr-b": "INDEXED", "saga": "INDEXED", "handbook": "INDEXED"}
    assert final["handbook"].summarized and final["saga"].doc_type == "BOOK"
    assert httpx.get(url + "/api/documents/documents/zephyr-a", headers=headers(key)).json()["tenant"] == WIRING
    assert httpx.get(url + "/api/documents/documents/zephyr-a", headers=stack.headers).status_code == 404
    with channel(address, bearer(stack.key(WIRING, "intern")), ) as ch, pytest.raises(grpc.RpcError) as err:
        list(gateway_pb2_grpc.GatewayStub(ch).Ingest(iter([retriever_pb2.Document(  # members: into `documents` only
            doc_id="x", collection="meeting_notes", text="x")]), timeout=30))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_whole_conversation_goes_into_the_prompt_while_it_fits(wiring) -> None:
    url, fake, _, key, _ = wiring
    conversation = ""
    for n in range(1, 5):
        fake.stream(text(f"Answer number {n} about Zephyr [1]."))
        body = ask(url, key, question=f"Question {n}: what about the Zephyr turbine project?",
                   data_sources=["Documents"], conversation_id=conversation or None)
        conversation = body["conversation_id"]
    fake.stream(text("The fifth answer [1]."))
    ask(url, key, question="And where are the Zephyr blades made?", data_sources=["Documents"],
        conversation_id=conversation)
    _, prompt = sent_prompt(fake)
    history = prompt.partition("Previous conversation:\n")[2].partition("---\n")[0]
    assert all(f"Question {n}:" in history and f"Answer number {n} about Zephyr" in history for n in range(1, 5))
    assert [history.index(f"Question {n}:") for n in range(1, 5)] == sorted(history.index(f"Question {n}:")
                                                                          for n in range(1, 5))


def test_a_sentence_two_blocks_share_is_given_once(wiring) -> None:
    url, fake, _, key, _ = wiring
    fake.stream(text("Approved on 12 May [1]; Oslo builds blades [1], Porto tests gearboxes [2]."))
    ask(url, key, question="Was the Zephyr turbine project approved by the board?", data_sources=["Documents"])
    _, prompt = sent_prompt(fake)
    assert "Oslo" in prompt and "Porto" in prompt, "both blocks are in the context"
    assert prompt.count("approved by the board on 12 May") == 1


def test_a_parents_text_is_cut_at_1600_characters(wiring) -> None:
    url, fake, _, key, _ = wiring
    fake.stream(text("The river and the mountain village [1]."))
    ask(url, key, question="What happens with the river, the mountain village and the harvest?",
        data_sources=["Documents"])
    _, prompt = sent_prompt(fake)
    parents = [line[len("Context: "):] for line in prompt.splitlines() if line.startswith("Context: ")]
    assert parents, "a BOOK child brings its parent's text"
    assert all(len(p) <= PARENT_MAX_CHARS for p in parents)
    assert max(len(p) for p in parents) > PARENT_MAX_CHARS - 400  # cut at a sentence near the limit ...
    assert all(p.rstrip().endswith((".", "!", "?")) for p in parents)  # ... never inside one


def test_path_b_answers_from_the_summary_with_the_global_summary_prompt(wiring) -> None:
    url, fake, _, key, _ = wiring
    fake.stream(text("The handbook covers onboarding [1]."))
    body = ask(url, key, question="Give me an overview of this document", document_ids=["documents/handbook"])
    assert body["meta"]["strategy"]["route"] == "SUMMARY"
    system, prompt = sent_prompt(fake)
    assert "The user asked for a high-level summary" in system
    assert "Present this summary in a clear, structured format" in prompt
    assert "onboarding handbook" in prompt


def test_grpc_stop_ends_a_running_answer_and_delete_removes_the_conversation(wiring) -> None:
    _, fake, address, key, _ = wiring
    fake.stream(text("Zephyr was approved [1] and "), hold_after=1)  # then waits until the client leaves
    events: list[gateway_pb2.ChatEvent] = []
    first_words = threading.Event()
    with channel(address, bearer(key)) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)

        def listen() -> None:
            for event in stub.Ask(gateway_pb2.AskRequest(question="What was decided about Zephyr?",
                                                         data_sources=["Documents"]), timeout=120):
                events.append(event)
                if event.HasField("content"):
                    first_words.set()

        listener = threading.Thread(target=listen)
        listener.start()
        assert first_words.wait(60), events
        [strategy] = [e.strategy for e in events if e.HasField("strategy")]
        assert stub.Stop(gateway_pb2.StopRequest(conversation_id=strategy.conversation_id), timeout=30).stopped
        listener.join(60)
        assert events[-1].done.stopped and fake.hung_up.wait(10), "the provider's stream was closed"
        assert not stub.Stop(gateway_pb2.StopRequest(conversation_id=strategy.conversation_id), timeout=30).stopped
        kept = stub.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=strategy.conversation_id),
                                    timeout=30)
        assert [m.role for m in kept.messages] == ["user", "assistant"]
        assert kept.messages[1].content.startswith("Zephyr was approved") and "stopped" in kept.messages[1].content

        assert stub.DeleteConversation(gateway_pb2.DeleteConversationRequest(
            conversation_id=strategy.conversation_id), timeout=30).deleted
        for call, request in ((stub.GetConversation, gateway_pb2.GetConversationRequest),
                              (stub.DeleteConversation, gateway_pb2.DeleteConversationRequest),
                              (stub.Stop, gateway_pb2.StopRequest)):
            with pytest.raises(grpc.RpcError) as err:
                call(request(conversation_id=strategy.conversation_id), timeout=30)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
