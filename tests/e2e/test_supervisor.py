"""`make run` keeps the stack up: with `python -m deploy.run` as a subprocess, each service in turn
is killed with SIGKILL; the supervisor logs the exit (stdout and DATA_DIR/logs/supervisor.log),
starts it again after 1 s, the others keep their pids, and once it is SERVING again the stack
answers over HTTP with the retriever's data intact. Ctrl-C still stops everything gracefully."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from deploy.run import ORDER, Backoff
from tests.e2e.test_operators import Running, free_port, run_env

pytestmark = pytest.mark.slow

QUESTION = {"question": "When did Meridian close to new investors?"}


def _start(env: dict[str, str], data_dir: Path, ports: dict[str, int]) -> Running:
    """Like test_operators' start, but keeps reading stdout after the banner: restarts are logged there."""
    proc = subprocess.Popen([sys.executable, "-m", "deploy.run"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).parents[2])
    running = Running(proc, data_dir, ports)

    def read() -> None:
        for line in proc.stdout:
            running.lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 400
    while "Press Ctrl-C to stop." not in running.output:
        assert proc.poll() is None, f"make run exited {proc.returncode}:\n{running.output}"
        assert time.monotonic() < deadline, f"make run did not come up:\n{running.output}"
        time.sleep(0.5)
    return running


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data_dir = tmp_path_factory.mktemp("supervised")
    ports = {name: free_port() for name in (*ORDER, "http")}
    # Restarts a tenth as far apart as by default: the same doubling and cap logic, in seconds instead of a minute.
    running = _start(run_env(data_dir, ports) | {"RESTART_BACKOFF_S": "0.1", "RESTART_BACKOFF_MAX_S": "3"},
                     data_dir, ports)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGINT)
            running.proc.wait(60)


def events(running: Running, event: str, service: str) -> list[dict]:
    """The supervisor's JSON records of one kind for one service."""
    path = running.data_dir / "logs" / "supervisor.log"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in records if r.get("event") == event and r.get("service_name") == service]


def pids(running: Running) -> dict[str, int]:
    return {path.stem: int(path.read_text()) for path in (running.data_dir / "run").glob("*.pid")}


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(running: Running, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert running.proc.poll() is None, f"make run exited {running.proc.returncode}:\n{running.output}"
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s:\n{running.output}"
        time.sleep(0.5)


def serving_again(running: Running, service: str) -> tuple[int, int]:
    """How often the restarted service was reported SERVING in supervisor.log and on stdout."""
    return len(events(running, "serving again", service)), running.output.count(f"{service} is SERVING again")


def served_since(running: Running, service: str, seen: tuple[int, int]) -> bool:
    """Reported SERVING again in both places since `seen` (stdout may lag the file a little)."""
    return all(now > then for now, then in zip(serving_again(running, service), seen))


def assert_answers(running: Running) -> None:
    reply = httpx.post(f"http://127.0.0.1:{running.ports['http']}/api/chat/ask", json=QUESTION,
                       headers={"authorization": f"Bearer {running.key}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert "March 2025" in reply.json()["answer"] or "1 March" in reply.json()["answer"], reply.json()


@contextlib.contextmanager
def occupied(port: int) -> Iterator[None]:
    """Listens on `port` as another program would, as soon as the killed service has let it go."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 5
        while True:
            try:
                sock.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} still taken"
                time.sleep(0.01)
        sock.listen()
        yield


def test_backoff_doubles_to_30_s_restarts_from_1_s_after_a_minute_up_and_flags_failed_starts() -> None:
    backoff = Backoff()
    assert [backoff.after_exit(2.0, served=True) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.attempt == 7
    assert backoff.after_exit(61.0, served=True) == 1 and backoff.attempt == 1
    flagged = []
    for _ in range(10):
        backoff.after_exit(0.5, served=False)
        flagged.append(backoff.cannot_start)
    assert flagged == [False] * 4 + [True] + [False] * 4 + [True]
    assert backoff.delay_s == 30
    backoff.after_exit(5.0, served=True)
    assert backoff.failed_starts == 0 and not backoff.cannot_start


@pytest.mark.parametrize("service", ORDER)
def test_a_killed_service_is_restarted_while_the_others_run_on(make_run: Running, service: str) -> None:
    before = pids(make_run)
    assert set(before) == set(ORDER) and all(map(alive, before.values())), before
    seen = serving_again(make_run, service)
    os.kill(before[service], signal.SIGKILL)

    wait_for(make_run, lambda: served_since(make_run, service, seen), 120, f"{service} not SERVING again")
    assert health(make_run.address(service)) == health_pb2.HealthCheckResponse.SERVING

    exited = events(make_run, "exited", service)[-1]
    assert (exited["exit"], exited["returncode"], exited["attempt"], exited["delay_s"]) == ("signal SIGKILL", -9, 1, 0.1)
    assert re.search(rf"{service} exited \(signal SIGKILL\) after \d+ s; restart 1 in 0.1 s", make_run.output)
    after = pids(make_run)
    assert after[service] != before[service] and alive(after[service])
    assert {n: p for n, p in after.items() if n != service} == {n: p for n, p in before.items() if n != service}

    assert_answers(make_run)


def test_a_service_that_cannot_start_is_reported_and_retried_while_the_others_run_on(make_run: Running) -> None:
    """The generator's port taken by another program: its restarts fail to bind until the port is free."""
    service = "generator"
    before, seen = pids(make_run), serving_again(make_run, service)
    reported = len(events(make_run, "cannot start", service))
    os.kill(before[service], signal.SIGKILL)
    with occupied(make_run.ports[service]):
        wait_for(make_run, lambda: len(events(make_run, "cannot start", service)) > reported, 150,
                 f"{service} not reported as unable to start")
        assert f"{service} CANNOT START: 5 starts in a row ended before SERVING" in make_run.output
        assert "Failed to bind" in events(make_run, "cannot start", service)[-1]["msg"]  # its log's tail
        others = {n: p for n, p in pids(make_run).items() if n != service}
        assert others == {n: p for n, p in before.items() if n != service} and all(map(alive, others.values()))
    wait_for(make_run, lambda: served_since(make_run, service, seen), 60, f"{service} not SERVING once free")
    assert_answers(make_run)


def test_ctrl_c_stops_all_gracefully_without_restarting(make_run: Running) -> None:
    """Last in this module: every service's latest run logs its graceful stop, and none is restarted."""
    exits = {name: len(events(make_run, "exited", name)) for name in ORDER}
    make_run.proc.send_signal(signal.SIGINT)
    assert make_run.proc.wait(90) == 0, make_run.output
    for name in ORDER:
        log = (make_run.data_dir / "logs" / f"{name}.log").read_text()
        assert '"msg": "stopped"' in log[log.rindex('"msg": "listening"'):], name
    assert {name: len(events(make_run, "exited", name)) for name in ORDER} == exits
    assert not pids(make_run)
