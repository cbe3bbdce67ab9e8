"""A service as its own process (`python -m services.<name>`, what `make run` starts), on a free
loopback port and a DATA_DIR of the test's, for what only a process shows: its memory (RSS from
/proc) and the modes of the files it writes."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.test_operators import free_port, run_env

ROOT = Path(__file__).parents[2]


def env(data_dir: Path, **extra: str) -> dict[str, str]:
    """`make run`'s environment on a temp DATA_DIR and free ports, with nothing to call: a service that
    needs another one warms up without it."""
    ports = {name: free_port() for name in ("gateway", "embedder", "retriever", "generator", "http")}
    return run_env(data_dir, ports) | {"METRICS_PORT": "0", "EMBED_TIMEOUT_S": "1", "LOG_LEVEL": "WARNING"} | extra


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`ragmesh ARGS` as an operator runs it where the services' settings are."""
    return subprocess.run([sys.executable, "-m", "ragmesh.cli", *args], env=env(data_dir), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@dataclass
class Service:
    proc: subprocess.Popen
    address: str

    def memory_kb(self, field: str = "VmRSS") -> int:
        """A line of /proc/<pid>/status in kB: VmRSS (resident now) or VmHWM (its peak)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} for pid {self.proc.pid}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start(name: str, data_dir: Path, timeout: float = 120, **extra: str) -> Service:
    """The service serving (health SERVING) on its port, its output in DATA_DIR/<name>.out."""
    variables = env(data_dir, **extra)
    address = f"127.0.0.1:{variables[f'{name.upper()}_PORT']}"
    with open(data_dir.parent / f"{data_dir.name}-{name}.out", "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", f"services.{name}"], env=variables, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
    service = Service(proc, address)
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}"
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return service
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                service.stop()
                raise AssertionError(f"{name} not SERVING within {timeout} s")
            time.sleep(0.2)
