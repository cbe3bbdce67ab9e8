"""A real Prometheus (Debian's, `make prometheus`) scrapes the four services, each its own process
as `make run` starts them (deploy.run's Supervisor), the three internal ones on their METRICS_PORT
and the gateway on its HTTP port; after one question over SSE and one over gRPC, Prometheus' HTTP
API has each service's request counter, and every metric the Grafana dashboard queries is one the
services' /metrics pages declare."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from deploy.run import ORDER, Supervisor, demo_key
from demo.loader import meeting_documents
from ragmesh import config, convert
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import channel
from tests.conftest import sse
from tests.e2e.test_operators import free_port
from tests.unit.test_deploy import ROOT, _panels, promql_metrics

pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus")
INTERNAL = ("embedder", "retriever", "generator")
QUESTION = "Who is the new head of research at Meridian?"


@dataclasses.dataclass
class Running:
    settings: config.Settings
    key: str
    metrics: dict[str, str]  # service -> host:port of its /metrics


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("scraped")
    ports = {name: free_port() for name in (*ORDER, "http")}
    metrics_ports = {name: free_port() for name in INTERNAL}
    env = {k: v for k, v in os.environ.items() if not k.endswith("_ADDR")}
    env |= {f"{name.upper()}_PORT": str(port) for name, port in ports.items()}
    env |= {"DATA_DIR": str(data_dir), "RAGMESH_HOST": "127.0.0.1", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": "",
            "SERVICE_TOKEN": "", "API_KEY_PEPPER": "", "MONGODB_URI": "", "TLS_CERT": "", "TLS_KEY": "",
            "TLS_CA": "", "ALLOWED_HOSTS": "", "RAGMESH_API_KEY": "", "METRICS_ENABLED": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "", "LOG_LEVEL": "WARNING"}
    settings = config.load().replace(
        host="127.0.0.1", data_dir=data_dir, mongodb_uri="", service_token="", api_key_pepper="",
        tls_cert="", tls_key="", tls_ca="", embedder_addr="", retriever_addr="", generator_addr="",
        **{f"{name}_port": port for name, port in ports.items()})
    supervisor = Supervisor(settings, env, {name: {"METRICS_PORT": str(port)} for name, port in metrics_ports.items()})
    try:
        supervisor.start()
        key = demo_key(settings)
        asyncio.run(_load(settings, key))
        metrics = {name: f"127.0.0.1:{port}" for name, port in metrics_ports.items()}
        yield Running(settings, key, {**metrics, "gateway": f"127.0.0.1:{ports['http']}"})
    finally:
        supervisor.stop()


async def _load(settings: config.Settings, key: str) -> None:
    async def stream():
        for doc in meeting_documents():
            if "meridian" in doc.doc_id:
                yield convert.document_to_proto(doc)

    client = RetrieverClient(settings.address("retriever"), 30, 600, ClientAuth.key(settings, key))
    try:
        async for _ in client.ingest(stream()):
            pass
    finally:
        await client.close()


@pytest.fixture(scope="module")
def prometheus(services: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if PROMETHEUS is None:
        pytest.fail("prometheus is not installed: `make prometheus` (Debian package `prometheus`)")
    work = tmp_path_factory.mktemp("prometheus")
    scrape = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": name, "metrics_path": "/metrics",
                                  "static_configs": [{"targets": [address]}]}
                                 for name, address in services.metrics.items()]}
    (work / "prometheus.yml").write_text(json.dumps(scrape))  # JSON is YAML
    address = f"127.0.0.1:{free_port()}"
    with open(work / "prometheus.log", "wb") as out:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address={address}"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://{address}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(url):
            assert proc.poll() is None, (work / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready in 60 s"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, promql: str) -> list[dict]:
    reply = httpx.get(url + "/api/v1/query", params={"query": promql}, timeout=10).json()
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def until(url: str, promql: str, ok, timeout: float = 60) -> list[dict]:
    """Polls a query until `ok(result)` (scrapes every second; bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        result = query(url, promql)
        if ok(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def test_prometheus_scrapes_each_service_request_counter(services: Running, prometheus: str) -> None:
    s = services.settings
    events = sse(f"http://127.0.0.1:{s.http_port}/api/chat/ask/stream", {"question": QUESTION},
                 {"authorization": f"Bearer {services.key}"})
    assert "done" in events[-1], events
    stub = gateway_pb2_grpc.GatewayStub(channel(s.address("gateway"), (("authorization", f"Bearer {services.key}"),)))
    assert list(stub.Ask(gateway_pb2.AskRequest(question=QUESTION)))[-1].HasField("done")
    with pytest.raises(grpc.RpcError):  # a refusal is counted under its own code
        list(stub.Ask(gateway_pb2.AskRequest(question="")))

    up = until(prometheus, "up", lambda r: len(r) == 4 and all(x["value"][1] == "1" for x in r))
    assert {x["metric"]["job"]: x["value"][1] for x in up} == {name: "1" for name in ORDER}

    counted = "sum by (job, service, method, code) (ragmesh_rpc_requests_total)"
    wanted = {("gateway", "Ask", "OK"), ("gateway", "Ask", "INVALID_ARGUMENT"), ("embedder", "Embed", "OK"),
              ("retriever", "Search", "OK"), ("generator", "Generate", "OK")}

    def seen(result: list[dict]) -> set[tuple[str, str, str]]:
        return {(x["metric"]["service"], x["metric"]["method"], x["metric"]["code"]) for x in result
                if x["metric"]["job"] == x["metric"]["service"] and float(x["value"][1]) >= 1}

    result = until(prometheus, counted, lambda r: wanted <= seen(r))
    assert wanted <= seen(result), result
    http = until(prometheus, 'ragmesh_http_requests_total{route="/api/chat/ask/stream", code="200"}', bool)
    assert http and http[0]["metric"]["job"] == "gateway"
    chunks = until(prometheus, 'ragmesh_index_chunks{collection="meeting_notes"}', bool)
    assert chunks and float(chunks[0]["value"][1]) > 0 and chunks[0]["metric"]["job"] == "retriever"
    tokens = until(prometheus, 'ragmesh_tokens_total{job="generator", direction="out"}', bool)
    assert tokens and float(tokens[0]["value"][1]) > 0


def test_every_metric_the_dashboard_queries_is_on_a_services_metrics_page(services: Running) -> None:
    declared: set[str] = set()
    for address in services.metrics.values():
        page = httpx.get(f"http://{address}/metrics", timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
        declared |= {line.split()[2] for line in page.text.splitlines() if line.startswith("# TYPE ")}
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    queried = {name for panel in _panels(dashboard) for target in panel["targets"]
               for name in promql_metrics(target["expr"])}
    missing = {name for name in queried if name not in declared
               and not (name.rsplit("_", 1)[0] in declared and name.rsplit("_", 1)[1] in ("bucket", "sum", "count"))}
    assert queried and not missing, missing
