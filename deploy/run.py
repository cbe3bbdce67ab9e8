"""`make run`: starts the four services on the embedded defaults, waits until each
reports SERVING, loads the demo corpus, prints where to point a browser and
grpcurl, and stops everything on Ctrl-C. Service logs go to DATA_DIR/logs/."""
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
from ragmesh.clients import RetrieverClient

ORDER = ("embedder", "generator", "retriever", "gateway")


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

    def load_demo(self) -> Counter:
        from demo.loader import load

        async def go() -> Counter:
            s = self.settings
            client = RetrieverClient(s.address("retriever"), s.search_timeout, s.ingest_timeout)
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


def banner(settings: config.Settings) -> str:
    host, http, grpcurl = settings.host, settings.http_port, Path(sys.executable).parent / "grpcurl"
    return f"""ragmesh is running.
  Browser:  http://{host}:{http}/
  SSE:      curl -N -X POST http://{host}:{http}/api/chat/ask/stream \\
              -H 'content-type: application/json' \\
              -d '{{"question": "What did Kestrel do with its Brazil exposure?"}}'
  grpcurl:  {grpcurl} -plaintext {settings.address('gateway')} list
            {grpcurl} -plaintext -d '{{"query": "net exposure", "collections": ["meeting_notes"], "top_k": 3}}' \\
              {settings.address('retriever')} ragmesh.v1.Retriever/Search
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
        print("loading the demo corpus ...", flush=True)
        outcome = supervisor.load_demo()
        print(f"demo corpus: {outcome['INDEXED']} documents indexed, {outcome['UNCHANGED']} unchanged\n")
        print(banner(settings), flush=True)
        while not stopping:
            supervisor.check_alive()
            time.sleep(0.5)
        return 0
    except RuntimeError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        print(supervisor.log_tails(), file=sys.stderr)
        return 1
    finally:
        supervisor.stop()
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
