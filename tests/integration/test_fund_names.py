"""The fund names the gateway keeps between questions are kept per reader: a fund named only in a
document shared with one user reaches neither a colleague's fund picker nor the funds read from a
colleague's question, whoever asked first."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ragmesh import convert
from ragmesh.access import Access
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.types import Document
from ragmesh.v1 import retriever_pb2
from tests.auth import headers
from tests.conftest import one, sse
from tests.stack import DEMO, Stack

FUND = "Quillfeather Private Fund"


@pytest.fixture(scope="module")
def gateway_url(stack: Stack) -> Iterator[str]:
    """A gateway of its own, so no fund names are kept from the other tests' questions."""
    host = stack.start_variant("gateway")
    yield f"http://{stack.settings.host}:{host.app.http_port}"
    stack.extra.remove(host)
    stack.call(host.stop())


def _share_with(stack: Stack, user: str) -> None:
    """The admin stores a document naming FUND, readable by `user` alone (and the admin, its owner)."""
    async def one_document():
        message = convert.document_to_proto(Document(
            doc_id="fund-names-quillfeather", collection="documents", metadata={"fund_name": FUND},
            text=f"{FUND} memo: the fund doubled its position in Ostrander Mills."))
        message.access.CopyFrom(convert.access_to_proto(Access(users=(user,))))
        yield message

    async def go() -> list[str]:
        client = RetrieverClient(stack.address("retriever"), 30, 120, ClientAuth.key(stack.settings, stack.admin_key))
        try:
            return [retriever_pb2.IngestStage.Name(p.stage) async for p in client.ingest(one_document())]
        finally:
            await client.close()

    assert stack.call(go())[-1:] == ["INDEXED"]


def test_a_fund_shared_with_one_user_never_reaches_a_colleague(stack: Stack, gateway_url: str) -> None:
    _share_with(stack, "fund-names-reader")
    reader, colleague = headers(stack.key(DEMO, "fund-names-reader")), headers(stack.key(DEMO, "fund-names-other"))
    assert FUND in httpx.get(gateway_url + "/api/meta", headers=reader, timeout=30).json()["funds"]
    assert FUND not in httpx.get(gateway_url + "/api/meta", headers=colleague, timeout=30).json()["funds"]
    events = sse(gateway_url + "/api/chat/ask/stream", {"question": f"What does {FUND} hold?"}, colleague)
    assert FUND not in one(events, "strategy")["detected_funds"]
