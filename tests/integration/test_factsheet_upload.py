"""A customer's factsheets get what the demo's get: factsheets.jsonl uploaded through
`POST /api/documents` into a tenant of its own gives, question for question, the same context
(sections, per-section chunks, "Complete Factsheet Data" with the whole JSON) as the demo corpus the
demo loader sent; the demo's meeting notes show 000's chunk types. The context is read from the prompt
a Gemini-backed gateway sends to the fake Gemini server."""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from demo.loader import CORPUS_DIR, FILES, load
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import channel, headers
from tests.fakes.gemini import text
from tests.stack import Stack

TENANT = "factsheet-customer"
QUESTIONS = ["What was Kestrel's 2025 full-year return?",
             "Harborview factsheet top holdings and exposure in March 2024"]


@pytest.fixture(scope="module")
def customer(stack: Stack, gemini_gateway) -> Iterator[dict[str, str]]:
    """The customer's headers, once its factsheets.jsonl is uploaded through the gateway's HTTP API."""
    url, _, _ = gemini_gateway
    who = headers(stack.key(TENANT, "analyst", "admin"))
    name = FILES["factsheets"]
    reply = httpx.post(url + "/api/documents", headers=who, timeout=300,
                       files=[("files", (name, (CORPUS_DIR / name).read_bytes(), "application/x-ndjson"))],
                       data={"collection": "factsheets", "summarize": "false"})
    assert reply.status_code == 200, reply.text
    events = [json.loads(line[len("data: "):]) for line in reply.text.split("\n") if line]
    assert events[-1].get("done") and not events[-1]["errors"], events[-1]
    yield who


def _context(url: str, fake, who: dict[str, str], question: str, source: str = "Factsheet") -> str:
    """The Internal Data part of the prompt the model is sent for the question, over one data source."""
    fake.stream(text("From the sources [1]."))
    reply = httpx.post(url + "/api/chat/ask", json={"question": question, "data_sources": [source]},
                       headers=who, timeout=60)
    assert reply.status_code == 200, reply.text
    body = fake.requests("streamGenerateContent")[-1].body
    prompt = "".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
    return prompt[prompt.index("Internal Data:"):]


@pytest.mark.parametrize("question", QUESTIONS)
def test_uploaded_factsheets_give_the_demos_context(stack: Stack, gemini_gateway, customer: dict[str, str],
                                                     question: str) -> None:
    url, fake, _ = gemini_gateway
    demo, uploaded = _context(url, fake, stack.headers, question), _context(url, fake, customer, question)
    assert uploaded == demo
    records = {json.loads(line)["factsheet_id"]: json.loads(line)
               for line in (CORPUS_DIR / FILES["factsheets"]).read_text().splitlines()}
    complete = [json.loads(line.removeprefix("Complete Factsheet Data: "))
                for line in uploaded.splitlines() if line.startswith("Complete Factsheet Data: ")]
    assert complete and all(c == records[c["factsheet_id"]] for c in complete), "each factsheet's JSON whole"
    assert "Context: {" not in uploaded, "no factsheet JSON cut short"
    sections = {line.strip().split(" ")[1] for line in uploaded.splitlines() if line.startswith("  - ")}
    assert sections and sections <= {"performance", "holdings", "commentary"}


def test_loading_again_removes_the_hand_made_sections_of_an_older_demo_load(stack: Stack) -> None:
    old = retriever_pb2.Document(doc_id="fs-kestrel-2024-03-31:performance", collection="factsheets",
                                 text="Kestrel Emerging Markets performance as of 2024-03-31. Month return 2.4%.")
    with channel(stack.address("retriever"), stack.metadata) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        assert [p.stage for p in stub.Ingest(iter([old]), timeout=60)][-1] == retriever_pb2.INDEXED

        async def reload():
            client = RetrieverClient(stack.address("retriever"), 30, 600, ClientAuth.key(stack.settings, stack.admin_key))
            try:
                return await load(client)
            finally:
                await client.close()

        assert stack.call(reload(), timeout=600) == {"UNCHANGED": 61}
        hits = stub.Search(retriever_pb2.SearchRequest(query="Kestrel performance 2024-03-31 month return",
                                                       collections=["factsheets"], top_k=20), timeout=30).hits
        assert hits and all(":" not in h.chunk.doc_id for h in hits)


def test_meeting_notes_show_their_chunk_types(stack: Stack, gemini_gateway) -> None:
    url, fake, _ = gemini_gateway
    context = _context(url, fake, stack.headers, "What did Harborview conclude about analyst retention?",
                       "Meeting Notes")
    kinds = [line.removeprefix("Chunk Type: ") for line in context.splitlines() if line.startswith("Chunk Type: ")]
    assert kinds and set(kinds) <= {"notes_part", "conclusion", "full_notes"}, kinds
