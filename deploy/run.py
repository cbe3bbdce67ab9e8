"""`make run`: starts the four services on the embedded defaults, waits until each
reports SERVING, makes (once) an admin key for tenant `demo`, loads the demo corpus
into that tenant, prints where to point a browser (with the key) and grpcurl, and
stops everything on Ctrl-C. Service logs go to DATA_DIR/logs/; the services share the
secrets under DATA_DIR/secrets (service token, key pepper, the demo key)."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragmesh import config
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.identity import ADMIN, keys
from ragmesh.identity.authenticator import pepper
from ragmesh.identity.secrets import secrets_dir
from ragmesh.store import open_store

ORDER = ("embedder", "generator", "retriever", "gateway")
DEMO_TENANT = "demo"
DEMO_USER = "demo-admin"


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


def wait_serving(address: str, name: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    raise RuntimeError(f"{name} did not report SERVING within {timeout:.0f}s")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


class Supervisor:
    """The four services as child processes, started in dependency order."""

    def __init__(self, settings: config.Settings, env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.logs = settings.data_dir / "logs"
        self.env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, announce: bool = False) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for name in ORDER:
            with open(self.logs / f"{name}.log", "ab") as log_file:
                self.procs[name] = subprocess.Popen([sys.executable, "-m", f"services.{name}"], env=self.env,
                                                    stdout=log_file, stderr=subprocess.STDOUT)
            if announce:
                print(f"starting {name:9} on {self.settings.address(name)} ...", flush=True)
            wait_serving(self.settings.address(name), name, self.procs[name])

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

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}")

    def log_tails(self) -> str:
        return "".join(f"--- last lines of {self.logs / (n + '.log')}:\n{tail(self.logs / (n + '.log'))}"
                       for n in self.procs)

    def stop(self) -> None:
        """SIGTERM in reverse order (each service stops gracefully), SIGKILL after 15 s."""
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


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
    settings = config.load()
    supervisor = Supervisor(settings)
    stopping = False

    def shutdown(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    try:
        supervisor.start(announce=True)
        key = demo_key(settings)
        print(f"loading the demo corpus into tenant {DEMO_TENANT} ...", flush=True)
        outcome = supervisor.load_demo(key)
        print(f"demo corpus: {outcome['INDEXED']} documents indexed, {outcome['UNCHANGED']} unchanged\n")
        print(banner(settings, key), flush=True)
        while not stopping:
            supervisor.check_alive()
            time.sleep(0.5)
        return 0
    except (RuntimeError, ValueError) as exc:  # a service died, or settings it refused (ConfigError)
        print(f"\nerror: {exc}", file=sys.stderr)
        print(supervisor.log_tails(), file=sys.stderr)
        return 1
    finally:
        supervisor.stop()
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
