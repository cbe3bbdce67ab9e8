"""Call transcripts (003 part 1.1 B) through `POST /api/transcripts`, `Gateway.IngestTranscript` and
`ragmesh ingest --transcript`: tagged by the configured model (the real google-genai SDK against the
fake Gemini server, whose recorded request is checked), untagged and said so without a model, stored
as documents of type "transcript" whose tags the retriever's tag boost reads. And the attacks: no
credential, a member key, another tenant, garbage and oversized bodies, a failing model: refused, and
nothing stored."""
from __future__ import annotations

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from services.gateway.transcripts import MAX_TRANSCRIPT_CHARS, NO_MODEL, TAG_SYSTEM, parse_tags
from tests.auth import bearer, channel, headers
from tests.fakes.gemini import FakeGemini, text
from tests.integration.test_gateway_gemini import sent_prompt
from tests.integration.test_ingest_cli import ragmesh
from tests.stack import Stack

CALL = ("Okay so on the hiring side we agreed to open two backend roles in October. Then the vendor contract "
        "with Orbital Freight renews in November and legal wants a review first. Last thing, the warehouse "
        "budget is frozen until the audit closes.")
NOTES = "Decisions: two backend hires in October; Orbital Freight renewal after legal review; warehouse budget frozen."


def stored(url: str, key: str, doc_id: str, collection: str = "documents") -> httpx.Response:
    return httpx.get(f"{url}/api/documents/{collection}/{doc_id}", headers=headers(key), timeout=30)


def search(stack: Stack, query: str, key: str | None = None, **boosters: float) -> list[retriever_pb2.Hit]:
    with channel(stack.address("retriever"), bearer(key or stack.admin_key)) as ch:
        return list(retriever_pb2_grpc.RetrieverStub(ch).Search(retriever_pb2.SearchRequest(
            query=query, collections=["documents"], top_k=5,
            boosters=retriever_pb2.Boosters(**boosters)), timeout=30).hits)


def test_a_model_tags_a_transcript_and_the_tag_boost_reads_the_tags(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("1. Hiring, vendor contracts\n2. warehouse budget; Audit"))
    reply = httpx.post(url + "/api/transcripts", json={"raw_text": CALL, "refined_text": NOTES,
                                                       "transcript_id": "ops-0917", "date": "2024-09-17"},
                       headers=stack.headers, timeout=60)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body == {**body, "doc_id": "transcript_ops-0917", "collection": "documents", "stage": "INDEXED",
                    "tags": ["hiring", "vendor contracts", "warehouse budget", "audit"],
                    "tagged_by": "gemini-2.5-flash", "note": ""}
    system, prompt = sent_prompt(fake)
    assert system == TAG_SYSTEM
    assert "3 to 6 topic tags" in prompt and f"<transcript>\n{CALL}\n</transcript>" in prompt

    document = stored(url, stack.admin_key, "transcript_ops-0917").json()
    assert document["metadata"]["type"] == "transcript" and document["date"] == "2024-09-17"
    assert document["metadata"]["tags"] == "hiring, vendor contracts, warehouse budget, audit"
    assert document["metadata"]["echotag"] == "hiring"
    [hit] = [h for h in search(stack, "vendor contracts renewal", tag_boost=0.25)
             if h.chunk.doc_id == "transcript_ops-0917"][:1]
    assert NOTES in hit.chunk.text or CALL[:40] in hit.chunk.text
    assert any(b.startswith("tags x1.25") for b in hit.boosts), hit.boosts

    # A question reaches it: asked over Documents, the answer cites the transcript.
    asked = httpx.post(stack.http_url + "/api/chat/ask", json={
        "question": "When does the Orbital Freight vendor contract renew?", "data_sources": ["Documents"]},
        headers=stack.headers, timeout=60)
    assert asked.status_code == 200, asked.text
    assert "transcript_ops-0917" in [c["doc_id"] for c in asked.json()["citations"]], asked.json()


def test_tags_sent_with_the_transcript_are_kept_and_no_model_is_asked(gemini_gateway, stack: Stack) -> None:
    _, fake, address = gemini_gateway
    asked = len(fake.requests("streamGenerateContent"))
    with channel(address, stack.metadata) as ch:
        done = gateway_pb2_grpc.GatewayStub(ch).IngestTranscript(gateway_pb2.TranscriptRequest(
            raw_text=CALL, tags=[" Logistics ", "freight", "freight"], echotag="ops", transcript_id="grpc-1"),
            timeout=60)
    assert (list(done.tags), done.tagged_by, done.note, done.doc_id) == (
        ["Logistics", "freight"], "request", "", "transcript_grpc-1")
    assert len(fake.requests("streamGenerateContent")) == asked


def test_without_a_model_the_transcript_is_stored_untagged_and_the_reply_says_so(stack: Stack) -> None:
    reply = httpx.post(stack.http_url + "/api/transcripts", json={"raw_text": CALL, "polished_text": NOTES},
                       headers=stack.headers, timeout=60)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["tags"], body["tagged_by"], body["note"]) == ([], "", NO_MODEL)
    assert body["doc_id"].startswith("transcript_") and body["chunks"] >= 1
    document = stored(stack.http_url, stack.admin_key, body["doc_id"]).json()
    assert document["metadata"]["type"] == "transcript" and "tags" not in document["metadata"]


def test_a_failing_model_stores_nothing(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    fake.error(503, "The model is overloaded.")
    reply = httpx.post(url + "/api/transcripts", json={"raw_text": CALL, "transcript_id": "lost-1"},
                       headers=stack.headers, timeout=60)
    assert reply.status_code == 503, reply.text
    assert stored(url, stack.admin_key, "transcript_lost-1").status_code == 404


def test_the_cli_sends_transcripts_through_the_gateway(stack: Stack, tmp_path) -> None:
    call = tmp_path / "standup-0918.txt"
    call.write_text(CALL, encoding="utf-8")
    done = ragmesh(stack, "ingest", "--transcript", str(call), "--tag", "standup", "--tag", "hiring",
                   "--gateway", stack.address("gateway"))
    assert done.returncode == 0, done.stderr
    assert "documents/transcript_standup-0918" in done.stdout and "tags standup, hiring (request)" in done.stdout
    untagged = ragmesh(stack, "ingest", "--transcript", str(call), "--gateway", stack.address("gateway"))
    assert untagged.returncode == 0 and NO_MODEL in untagged.stdout, untagged.stderr
    member = ragmesh(stack, "ingest", "--transcript", str(call), "--gateway", stack.address("gateway"),
                     key=stack.key("demo", "intern"))
    assert member.returncode == 2 and "PERMISSION_DENIED" in member.stderr
    plain = ragmesh(stack, "ingest", str(call))
    assert plain.returncode == 2 and "--collection is required" in plain.stderr


# -- attacks -----------------------------------------------------------------------------------
def test_no_credential_and_a_member_key_are_refused(stack: Stack) -> None:
    url = stack.http_url + "/api/transcripts"
    assert httpx.post(url, json={"raw_text": CALL}, timeout=30).status_code == 401
    member = httpx.post(url, json={"raw_text": CALL, "transcript_id": "by-member"},
                        headers=headers(stack.key("demo", "analyst")), timeout=30)
    assert member.status_code == 403
    assert stored(stack.http_url, stack.admin_key, "transcript_by-member").status_code == 404
    with channel(stack.address("gateway"), ()) as ch, pytest.raises(grpc.RpcError) as err:
        gateway_pb2_grpc.GatewayStub(ch).IngestTranscript(gateway_pb2.TranscriptRequest(raw_text=CALL), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_another_tenant_neither_writes_into_nor_reads_this_one(stack: Stack) -> None:
    url = stack.http_url + "/api/transcripts"
    other = stack.key("rival", "boss", "admin")
    into_demo = httpx.post(url, json={"raw_text": CALL, "tenant": "demo", "transcript_id": "x-1"},
                           headers=headers(other), timeout=30)
    assert into_demo.status_code == 403 and "tenant" in into_demo.json()["error"]["message"]
    own = httpx.post(url, json={"raw_text": "Rival call about pricing.", "transcript_id": "ops-0917"},
                     headers=headers(other), timeout=60)
    assert own.status_code == 200, own.text
    assert stored(stack.http_url, other, "transcript_ops-0917").json()["tenant"] == "rival"
    demo = stored(stack.http_url, stack.admin_key, "transcript_ops-0917")
    assert demo.status_code != 200 or demo.json()["tenant"] == "demo"  # the same id stays each tenant's own
    assert not [h for h in search(stack, "Rival call about pricing") if "Rival" in h.chunk.text]


@pytest.mark.parametrize("body, field", [
    ({}, "raw_text"),
    ({"raw_text": "   "}, "raw_text"),
    ({"raw_text": 42}, "raw_text"),
    ({"raw_text": CALL, "tags": ["a", "b", "c", "d", "e", "f", "g"]}, "tags"),
    ({"raw_text": CALL, "tags": ["budget, hiring"]}, "tags[0]"),
    ({"raw_text": CALL, "tags": ["x" * 65]}, "tags[0]"),
    ({"raw_text": CALL, "date": "2024-13-40"}, "date"),
    ({"raw_text": CALL, "collection": "../etc"}, "collection"),
    ({"raw_text": CALL, "transcript_id": "x" * 240}, "transcript_id"),
    (b'{"raw_text": "a lone surrogate \\ud800"}', "raw_text"),
])
def test_garbage_is_400_naming_the_field_and_stores_nothing(stack: Stack, body: dict | bytes, field: str) -> None:
    before = httpx.get(stack.http_url + "/api/documents?collection=documents&limit=200", headers=stack.headers,
                       timeout=30).json()["documents"]
    sent = {"content": body, "headers": {**stack.headers, "content-type": "application/json"}} \
        if isinstance(body, bytes) else {"json": body, "headers": stack.headers}
    reply = httpx.post(stack.http_url + "/api/transcripts", timeout=30, **sent)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith(field), reply.json()
    after = httpx.get(stack.http_url + "/api/documents?collection=documents&limit=200", headers=stack.headers,
                      timeout=30).json()["documents"]
    assert after == before


def test_an_unreadable_or_oversized_body_is_refused(stack: Stack) -> None:
    url = stack.http_url + "/api/transcripts"
    garbled = httpx.post(url, content=b'{"raw_text": "unterminated', headers={**stack.headers,
                                                                            "content-type": "application/json"})
    assert garbled.status_code == 400
    huge = httpx.post(url, json={"raw_text": "word " * (stack.settings.http_max_body_bytes // 5 + 1)},
                      headers=stack.headers, timeout=60)
    assert huge.status_code == 413
    with channel(stack.address("gateway"), stack.metadata) as ch, pytest.raises(grpc.RpcError) as err:
        gateway_pb2_grpc.GatewayStub(ch).IngestTranscript(gateway_pb2.TranscriptRequest(
            raw_text="a" * (MAX_TRANSCRIPT_CHARS + 1)), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("raw_text")


def test_a_models_answer_becomes_at_most_six_clean_tags() -> None:
    assert parse_tags("") == [] and parse_tags("x" * 65) == []
    assert parse_tags('- "Budget"\n- hiring plan.\n* Hiring Plan\n3) audit, a, b, c, d') == [
        "budget", "hiring plan", "audit", "a", "b", "c"]


@pytest.mark.parametrize("request_, code, field", [
    (gateway_pb2.TranscriptRequest(raw_text=CALL, tenant="demo", transcript_id="grpc-x"), "PERMISSION_DENIED",
     "tenant"),
    (gateway_pb2.TranscriptRequest(raw_text="   "), "INVALID_ARGUMENT", "raw_text"),
    (gateway_pb2.TranscriptRequest(raw_text=CALL, tags=["budget, hiring"]), "INVALID_ARGUMENT", "tags[0]"),
    (gateway_pb2.TranscriptRequest(raw_text=CALL, date="2024-13-40"), "INVALID_ARGUMENT", "date"),
    (gateway_pb2.TranscriptRequest(raw_text=CALL, collection="../etc"), "INVALID_ARGUMENT", "collection"),
])
def test_grpc_refuses_another_tenant_and_garbage_and_stores_nothing(stack: Stack, request_, code: str,
                                                                     field: str) -> None:
    """Gateway.IngestTranscript with a rival tenant's admin key: nothing lands in demo, nothing is stored."""
    rival = stack.key("rival", "boss", "admin")
    with channel(stack.address("gateway"), bearer(rival)) as ch, pytest.raises(grpc.RpcError) as err:
        gateway_pb2_grpc.GatewayStub(ch).IngestTranscript(request_, timeout=60)
    assert err.value.code().name == code and field in err.value.details(), err.value
    assert stored(stack.http_url, stack.admin_key, "transcript_grpc-x").status_code == 404
