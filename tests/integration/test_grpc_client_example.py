"""The gRPC client example (examples/grpc_client.py) runs the analyst's whole flow against a real stack
on loopback with a member's key, over Gateway alone: the documents, a streamed answer, its cited chunk,
the conversation renamed and then gone."""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import bearer
from tests.stack import DEMO, Stack

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpc_client.py"
QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The script as a module (examples/ is not a package: a team copies the file)."""
    spec = importlib.util.spec_from_file_location("grpc_client_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Iterator[gateway_pb2_grpc.GatewayStub]:
    with grpc.insecure_channel(stack.address("gateway")) as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def test_the_analysts_flow_over_grpc_alone(example: ModuleType, stack: Stack,
                                            gateway: gateway_pb2_grpc.GatewayStub) -> None:
    key = stack.key(DEMO, "example-analyst")
    lines: list[str] = []
    flow = example.analyst_flow(gateway, key, QUESTION, show=lines.append)

    assert flow.caller == f"example-analyst (member) of {DEMO}"
    assert any(d.startswith("meeting_notes/mn-kestrel-2024-03-14") for d in flow.documents)
    assert "12% to 4%" in flow.answer and flow.route == "SPECIFIC"
    assert flow.citations and flow.chunk is not None
    first = next(c for c in flow.citations if c.chunk_id)
    assert flow.chunk.chunk.chunk_id == first.chunk_id and flow.chunk.document.doc_id == first.doc_id
    assert flow.chunk.chunk.text and flow.title == f"Research: {QUESTION}" and flow.deleted
    assert lines[0].startswith("caller: example-analyst") and lines[-1].startswith("deleted")

    with pytest.raises(grpc.RpcError) as gone:
        gateway.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=flow.conversation_id),
                                metadata=bearer(key), timeout=30)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_script_says_what_is_missing_or_refused(example: ModuleType, stack: Stack,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAGMESH_GATEWAY", stack.address("gateway"))
    monkeypatch.delenv("RAGMESH_API_KEY", raising=False)
    assert example.main([]) == 2 and "RAGMESH_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("RAGMESH_API_KEY", "rk_not_a_key")
    assert example.main([]) == 1 and capsys.readouterr().err.startswith("UNAUTHENTICATED")
