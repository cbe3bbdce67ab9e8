"""A restart never looks broken: the four services as processes under deploy.run's Supervisor (what
`make run` runs), each killed with SIGKILL in turn while asks and ingests keep coming through the
gateway. Every call either succeeds or ends with a status worth retrying (UNAVAILABLE,
RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED), never INTERNAL or UNKNOWN; a document either is stored
whole or failed with a retryable reason and left nothing behind; and the stack answers again after
each restart. The embedder's restart is the case that used to fail: while its model loaded it
answered INTERNAL and documents ingested then ended FAILED."""
from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from deploy.run import DEMO_TENANT, ORDER, Supervisor, demo_key, serving
from ragmesh import config
from ragmesh.identity.authenticator import service_token
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.e2e.test_operators import free_port, run_env
from tests.e2e.test_retriever_restart import store_and_index_agree

pytestmark = pytest.mark.slow

RETRYABLE = {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}
FACT = "Meridian Capital closed its flagship fund to new investors on 1 March 2025 after strong inflows."


@dataclass
class Load:
    """Asks and ingests sent one after another by two threads until stopped, and how each ended."""

    gateway: gateway_pb2_grpc.GatewayStub
    stop: threading.Event = field(default_factory=threading.Event)
    asks: list[str] = field(default_factory=list)  # OK, or the status / error event's code
    ingests: list[str] = field(default_factory=list)  # OK, or the call's status
    killed: str = "none"  # the service killed last, for the outcomes' tally
    tally: Counter = field(default_factory=Counter)  # (killed, ask | ingest, outcome) -> calls
    documents: dict[str, tuple[str, str]] = field(default_factory=dict)  # doc_id -> (its call's outcome,
    # its last stage reported: "FAILED: why" for a failure)

    def ask(self) -> str:
        try:
            events = list(self.gateway.Ask(gateway_pb2.AskRequest(question="When did Meridian close to new investors?"),
                                           timeout=30))
        except grpc.RpcError as exc:
            return exc.code().name
        errors = [e.error.code for e in events if e.WhichOneof("event") == "error"]
        return errors[-1] if errors else "OK"

    def ingest(self, number: int) -> str:
        doc = retriever_pb2.Document(doc_id=f"doc-{number}", collection="restarts", filename=f"doc-{number}.md",
                                     text=f"# Note {number}\n\nRestart note {number}: the desk moved sleeve {number}.")
        stage, outcome = "", "OK"
        try:
            for progress in self.gateway.Ingest(iter([doc]), timeout=60):
                stage = f"FAILED: {progress.error}" if progress.error else retriever_pb2.IngestStage.Name(progress.stage)
        except grpc.RpcError as exc:
            outcome = exc.code().name
        self.documents[doc.doc_id] = outcome, stage
        return outcome

    def run(self, what: str) -> threading.Thread:
        def loop() -> None:
            number = 0
            while not self.stop.is_set():
                number += 1
                outcome = self.ask() if what == "ask" else self.ingest(number)
                (self.asks if what == "ask" else self.ingests).append(outcome)
                self.tally[self.killed, what, outcome] += 1
                if outcome != "OK":
                    time.sleep(0.1)  # a caller's own backoff: the gateway itself may be down

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Supervisor, str]]:
    """The four services under the supervisor, lean: no metrics ports, no summaries, one model runtime."""
    data_dir = tmp_path_factory.mktemp("restarts")
    ports = {name: free_port() for name in (*ORDER, "http")}
    env = run_env(data_dir, ports) | {"METRICS_PORT": "0", "LOG_LEVEL": "WARNING", "EMBED_DOCUMENTS_BF16": "off",
                                      "INGEST_SUMMARIES": "false", "RATE_LIMIT_PER_MINUTE": "0",
                                      "RESTART_BACKOFF_S": "0.1", "RESTART_BACKOFF_MAX_S": "3"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        settings = config.load()
    supervisor = Supervisor(settings, env)
    try:
        supervisor.start()
        supervisor.supervise()
        yield supervisor, demo_key(settings)
    finally:  # killed first: a graceful stop is test_supervisor's, and the embedder's takes seconds
        for proc in list(supervisor.procs.values()):
            proc.kill()
        supervisor.stop()


def stored(data_dir: Path) -> set[str]:
    with sqlite3.connect(data_dir / "ragmesh.sqlite3") as db:
        return {row[0] for row in db.execute("SELECT doc_id FROM documents WHERE collection = 'restarts'")}


def test_kill_9_of_each_service_under_load_never_looks_broken(supervised: tuple[Supervisor, str]) -> None:
    supervisor, key = supervised
    settings = supervisor.settings
    gateway = gateway_pb2_grpc.GatewayStub(channel(settings.address("gateway"), bearer(key)))
    seed = retriever_pb2.Document(doc_id="meridian", collection="meeting_notes", text=FACT, date="2025-03-02")
    assert [p.stage for p in gateway.Ingest(iter([seed]), timeout=60)][-1] == retriever_pb2.INDEXED

    load = Load(gateway)
    threads = [load.run("ask"), load.run("ingest")]
    recovered = {}
    for name in ORDER:
        pid = supervisor.procs[name].pid
        os.kill(pid, signal.SIGKILL)
        load.killed = name
        deadline = time.monotonic() + 60
        while supervisor.procs[name].pid == pid:
            assert time.monotonic() < deadline, f"{name} was not started again"
            time.sleep(0.1)
        assert serving(settings.address(name), supervisor.procs[name], timeout=60), f"{name} not SERVING again"
        # The stack answers again: an ask and an ingest sent after the restart succeed, before the next kill.
        since = len(load.asks), len(load.ingests)
        while time.monotonic() < deadline and not recovered.get(name):
            recovered[name] = "OK" in load.asks[since[0]:] and "OK" in load.ingests[since[1]:]
            time.sleep(0.1)
    load.stop.set()
    for thread in threads:
        thread.join(90)

    assert all(recovered.values()), f"no successful ask and ingest after restarting {recovered}"
    asks, ingests = Counter(load.asks), Counter(load.ingests)
    assert set(asks) | set(ingests) <= {"OK"} | RETRYABLE, (asks, ingests)
    # A call that ended OK reported each document's end; one cut short may have stored it whole, or not at all.
    ends = {d: stage for d, (outcome, stage) in load.documents.items() if outcome == "OK"}
    stages = Counter(stage.partition(":")[0] for stage in ends.values())
    assert set(stages) <= {"INDEXED", "UNCHANGED", "FAILED"}, ends
    failed = {d: why for d, why in ends.items() if why.startswith("FAILED")}
    assert all("retryable" in why for why in failed.values()), failed
    retriever = retriever_pb2_grpc.RetrieverStub(channel(settings.address("retriever"),
                                                         bearer(service_token(settings), DEMO_TENANT, "tester")))
    store_and_index_agree(retriever, settings.data_dir)  # no document with chunks missing, none unindexed
    kept = stored(settings.data_dir)
    assert {d for d, stage in ends.items() if stage in ("INDEXED", "UNCHANGED")} <= kept and not set(failed) & kept
    print(f"documents {dict(stages)}; calls by the service killed last: "
          + "; ".join(f"{k} {w} {o}: {n}" for (k, w, o), n in sorted(load.tally.items())))
