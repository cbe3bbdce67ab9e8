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


def main() -> int:
    settings = config.load()
    logs = settings.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs: dict[str, subprocess.Popen] = {}
    stopping = False

    def shutdown(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    try:
        for name in ORDER:
            log_file = open(logs / f"{name}.log", "ab")
            procs[name] = subprocess.Popen([sys.executable, "-m", f"services.{name}"], env=env,
                                           stdout=log_file, stderr=subprocess.STDOUT)
            print(f"starting {name:9} on {settings.address(name)} ...", flush=True)
            wait_serving(settings.address(name), name, procs[name])
        print("loading the demo corpus ...", flush=True)
        from demo.loader import load

        async def load_demo():
            client = RetrieverClient(settings.address("retriever"), settings.search_timeout, settings.ingest_timeout)
            try:
                return await load(client)
            finally:
                await client.close()

        outcome = asyncio.run(load_demo())
        print(f"demo corpus: {outcome['INDEXED']} documents indexed, {outcome['UNCHANGED']} unchanged\n")
        host = settings.host
        print(f"""ragmesh is running.
  Browser:  http://{host}:{settings.http_port}/
  SSE:      curl -N -X POST http://{host}:{settings.http_port}/api/chat/ask/stream \\
              -H 'content-type: application/json' \\
              -d '{{"question": "What did Kestrel do with its Brazil exposure?"}}'
  grpcurl:  {Path(sys.executable).parent}/grpcurl -plaintext {settings.address('gateway')} list
            {Path(sys.executable).parent}/grpcurl -plaintext -d '{{"query": "net exposure", "collections": ["meeting_notes"], "top_k": 3}}' \\
              {settings.address('retriever')} ragmesh.v1.Retriever/Search
  Logs:     {logs}/<service>.log
Press Ctrl-C to stop.""", flush=True)
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {proc.returncode}")
            time.sleep(0.5)
        return 0
    except RuntimeError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        for name in procs:
            print(f"--- last lines of {logs / (name + '.log')}:\n{tail(logs / (name + '.log'))}", file=sys.stderr)
        return 1
    finally:
        for proc in reversed(list(procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
