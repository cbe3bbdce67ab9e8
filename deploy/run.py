"""`make run`: starts the four services on the embedded defaults, waits until each
reports SERVING, makes (once) an admin key for tenant `demo`, loads the demo corpus
into that tenant, prints where to point a browser (with the key) and grpcurl, and
stops everything on Ctrl-C. Service logs go to DATA_DIR/logs/; the services share the
secrets under DATA_DIR/secrets (service token, key pepper, the demo key).

Once all four are up, a service that exits (a crash, `kill -9`, anything the supervisor did
not ask for) is started again with backoff while the others keep running; each restart is
logged to stdout and DATA_DIR/logs/supervisor.log, and DATA_DIR/run/<service>.pid holds the
pid of each running service. Before that, a service that exits stops the start with its
log's tail: what fails on the first start (a port in use, refused settings) needs the operator."""
from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh import config
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.identity import ADMIN, keys
from ragmesh.identity.authenticator import pepper
from ragmesh.identity.secrets import secrets_dir
from ragmesh.logging import JsonFormatter
from ragmesh.private_files import keep_private
from ragmesh.store import open_store

ORDER = ("embedder", "generator", "retriever", "gateway")
DEMO_TENANT = "demo"
DEMO_USER = "demo-admin"

log = logging.getLogger("ragmesh.supervisor")


def demo_key(settings: config.Settings) -> str:
    """The admin key of tenant `demo`: made once and kept in DATA_DIR/secrets/demo_admin_key (0600),
    made again only when the store no longer knows it (a wiped store, a revoked key)."""
    path = secrets_dir(settings.data_dir) / "demo_admin_key"
    store = open_store(settings)
    try:
        if path.exists():
            key = path.read_text().strip()
            parsed = keys.parse(key)
            record = store.api_key(parsed[0]) if parsed else None
            if record is not None and not record.revoked_at and not record.expired():
                return key
        key, record = keys.new_key(pepper(settings), DEMO_TENANT, DEMO_USER, ADMIN, label="make run")
        store.add_api_key(record)
    finally:
        store.close()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key


def serving(address: str, proc: subprocess.Popen, timeout: float = math.inf) -> bool:
    """Polls grpc health: True once SERVING, False if the process exits (or `timeout` passes) first."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    return False


def wait_serving(address: str, name: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Raises RuntimeError unless the service reports SERVING in time (a first start fails fast)."""
    if serving(address, proc, timeout):
        return
    if proc.poll() is not None:
        raise RuntimeError(f"{name} exited with code {proc.returncode}")
    raise RuntimeError(f"{name} did not report SERVING within {timeout:.0f}s")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def describe_exit(returncode: int) -> str:
    """`exit code 1` or `signal SIGKILL`: Popen reports a death by signal N as -N."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


@dataclass
class Backoff:
    """When to start a service that exited: 1 s, 2 s, 4 s ... capped at 30 s (RESTART_BACKOFF_S,
    RESTART_BACKOFF_MAX_S), and from the first again once a run lasted 60 s (a crash an hour later is not part of the same loop). Also counts the
    starts in a row that ended before SERVING, so a service that cannot start is reported loudly."""

    first_s: float = 1.0
    cap_s: float = 30.0
    stable_after_s: float = 60.0
    loud_after: int = 5
    attempt: int = 0
    delay_s: float = 0.0
    failed_starts: int = 0

    def after_exit(self, uptime_s: float, served: bool) -> float:
        """Records a run that lasted `uptime_s` (and reached SERVING or not); returns the next delay."""
        if uptime_s >= self.stable_after_s:
            self.attempt, self.delay_s = 0, 0.0
        self.attempt += 1
        self.delay_s = min(self.delay_s * 2, self.cap_s) if self.delay_s else self.first_s
        self.failed_starts = 0 if served else self.failed_starts + 1
        return self.delay_s

    @property
    def cannot_start(self) -> bool:
        """At the 5th, 10th ... failed start in a row: loud, without repeating it on every retry."""
        return self.failed_starts > 0 and self.failed_starts % self.loud_after == 0


def log_to(path: Path) -> None:
    """Supervisor events go to stdout (the operator's terminal) and as JSON lines to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(JsonFormatter("supervisor"))
    to_stdout = logging.StreamHandler(sys.stdout)
    to_stdout.setFormatter(logging.Formatter("%(asctime)s supervisor %(levelname)s: %(message)s", "%H:%M:%S"))
    log.handlers[:] = [to_file, to_stdout]
    log.setLevel(logging.INFO)
    log.propagate = False


class Supervisor:
    """The four services as child processes, started in dependency order, then kept running."""

    def __init__(self, settings: config.Settings, env: dict[str, str] | None = None,
                 service_env: dict[str, dict[str, str]] | None = None) -> None:
        """`service_env`: variables for one service only (e.g. its METRICS_PORT), by service name."""
        self.settings = settings
        self.logs = settings.data_dir / "logs"
        self.run_dir = settings.data_dir / "run"
        self.env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.service_env = service_env or {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}
        # Set by the signal handler (a plain flag: no lock may be taken there) and by stop().
        self.stopping = False
        # Held while a service is spawned and while stop() signals them: none is started after stop().
        self._lock = threading.Lock()
        self._keepers: list[threading.Thread] = []

    def _pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def _spawn(self, name: str) -> subprocess.Popen:
        """Starts one service, its output appended to its log, its pid in DATA_DIR/run/<name>.pid
        (the directories made again if an operator removed them while running)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log_file:
            proc = subprocess.Popen([sys.executable, "-m", f"services.{name}"],
                                    env={**self.env, **self.service_env.get(name, {})},
                                    stdout=log_file, stderr=subprocess.STDOUT)
        self.procs[name], self.started[name] = proc, time.monotonic()
        self._pid_file(name).write_text(f"{proc.pid}\n")
        return proc

    def start(self, announce: bool = False) -> None:
        for name in ORDER:
            proc = self._spawn(name)
            if announce:
                print(f"starting {name:9} on {self.settings.address(name)} ...", flush=True)
            wait_serving(self.settings.address(name), name, proc)

    def supervise(self) -> None:
        """From now on each service that exits is started again by its own thread; the others run on."""
        for name in ORDER:
            keeper = threading.Thread(target=self._keep, args=(name,), name=f"keep-{name}", daemon=True)
            keeper.start()
            self._keepers.append(keeper)

    def _pause(self, seconds: float) -> bool:
        """Sleeps up to `seconds`; True if a stop was asked meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.stopping

    def _keep(self, name: str) -> None:
        """Waits for the service to exit, then starts it again after the backoff and waits for SERVING,
        until stop(). A service that cannot start is still retried: the others must not go down with it."""
        backoff = Backoff(self.settings.restart_backoff_s, self.settings.restart_backoff_max_s)
        served = True  # start() saw the first run SERVING
        address, log_path = self.settings.address(name), self.logs / f"{name}.log"
        while True:
            proc = self.procs[name]
            returncode = proc.wait()
            if self.stopping:
                return
            self._pid_file(name).unlink(missing_ok=True)
            uptime = time.monotonic() - self.started[name]
            delay = backoff.after_exit(uptime, served)
            how = describe_exit(returncode)
            fields = {"event": "exited", "service_name": name, "exit": how, "returncode": returncode,
                      "uptime_s": round(uptime, 1), "attempt": backoff.attempt, "delay_s": delay}
            log.warning(f"{name} exited ({how}) after {uptime:.0f} s; restart {backoff.attempt} in {delay:g} s",
                        extra=fields)
            if backoff.cannot_start:
                log.error(f"{name} CANNOT START: {backoff.failed_starts} starts in a row ended before SERVING "
                          f"(last: {how}); still retrying, at most every {backoff.cap_s:g} s. "
                          f"Last lines of {log_path}:\n{tail(log_path)}",
                          extra={**fields, "event": "cannot start", "failed_starts": backoff.failed_starts})
            if self._pause(delay):
                return
            with self._lock:
                if self.stopping:
                    return
                proc = self._spawn(name)
            served = serving(address, proc)
            if served:
                log.info(f"{name} is SERVING again (pid {proc.pid}, restart {backoff.attempt}, "
                         f"{time.monotonic() - self.started[name]:.1f} s after starting)",
                         extra={"event": "serving again", "service_name": name, "pid": proc.pid,
                                "attempt": backoff.attempt})

    def load_demo(self, key: str) -> Counter:
        """Loads the demo corpus into the key's tenant."""
        from demo.loader import load

        async def go() -> Counter:
            s = self.settings
            client = RetrieverClient(s.address("retriever"), s.search_timeout, s.ingest_timeout,
                                     ClientAuth.key(s, key))
            try:
                return await load(client)
            finally:
                await client.close()

        return asyncio.run(go())

    def log_tails(self) -> str:
        return "".join(f"--- last lines of {self.logs / (n + '.log')}:\n{tail(self.logs / (n + '.log'))}"
                       for n in self.procs)

    def stop(self) -> None:
        """SIGTERM in reverse order, each service once those calling it have stopped (the gateway's last
        background work still reaches the embedder), SIGKILL after 15 s; no restarts."""
        with self._lock:
            self.stopping = True
            procs = dict(self.procs)
        for proc in reversed(list(procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for keeper in self._keepers:
            keeper.join(5)
        for name in procs:
            self._pid_file(name).unlink(missing_ok=True)


def banner(settings: config.Settings, key: str) -> str:
    host, http, grpcurl = settings.host, settings.http_port, Path(sys.executable).parent / "grpcurl"
    scheme, plain = ("https", "") if settings.tls_cert else ("http", "-plaintext ")
    return f"""ragmesh is running (tenant {DEMO_TENANT}, admin key in {secrets_dir(settings.data_dir) / 'demo_admin_key'}).
  Browser:  {scheme}://{host}:{http}/#key={key}
  SSE:      curl -N -X POST {scheme}://{host}:{http}/api/chat/ask/stream \\
              -H 'authorization: Bearer {key}' -H 'content-type: application/json' \\
              -d '{{"question": "What did Kestrel do with its Brazil exposure?"}}'
  grpcurl:  {grpcurl} {plain}{settings.address('gateway')} list
            {grpcurl} {plain}-H 'authorization: Bearer {key}' \\
              -d '{{"query": "net exposure", "collections": ["meeting_notes"], "top_k": 3}}' \\
              {settings.address('retriever')} ragmesh.v1.Retriever/Search
  Keys:     {Path(sys.executable).parent / 'ragmesh'} keys create --tenant {DEMO_TENANT} --user alice
  Logs:     {settings.data_dir / 'logs'}/<service>.log
Press Ctrl-C to stop."""


def main() -> int:
    try:
        settings = config.load()
    except config.ConfigError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        return 2
    keep_private(settings.data_dir)  # the logs, pid files and secrets it writes, and the services it starts
    supervisor = Supervisor(settings)
    log_to(settings.data_dir / "logs" / "supervisor.log")

    def shutdown(*_: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    try:
        supervisor.start(announce=True)
        supervisor.supervise()
        key = demo_key(settings)
        print(f"loading the demo corpus into tenant {DEMO_TENANT} ...", flush=True)
        outcome = supervisor.load_demo(key)
        print(f"demo corpus: {outcome['INDEXED']} documents indexed, {outcome['UNCHANGED']} unchanged\n")
        print(banner(settings, key), flush=True)
        while not supervisor.stopping:
            time.sleep(0.5)
        return 0
    except (RuntimeError, ValueError) as exc:  # a first start failed, or settings a service refused (ConfigError)
        print(f"\nerror: {exc}", file=sys.stderr)
        print(supervisor.log_tails(), file=sys.stderr)
        return 1
    finally:
        supervisor.stop()
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
