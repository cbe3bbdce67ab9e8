"""Gateway replicas sharing conversation state in Redis (issue 25): the whole stack (`python -m deploy.run`,
bench/load_bench.py's Stack) with its gateway on a real redis-server, a second gateway process on the same
store and Redis, and a third on the same store keeping its state in process, then

  stop      an answer streams from one replica, the stop goes to the other once content has come: the
            stop's reply time (it comes once what the answer left is stored) and the time until the
            stream ends, p50/p99;
  strategy  time to the strategy event, one question at a time, for NEW_QUERY (a new conversation) and
            REUSE (the same question again in it, asked of the other replica with Redis), with Redis against in process:
            the cost of sharing as a ratio of the medians (target <= 1.15);
  answers/s load_bench's SSE clients on one gateway replica, then the same clients split over two.

One machine runs it all, so two replicas share the CPUs the one had: the answers/s ratio says what a
second replica costs or brings here, not what a second machine would.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from bench.load_bench import QUESTIONS, ChatTally, Stack, chat_load
from bench.search_bench import REPO, Section, Target, free_port, log
from tests.redis_server import RedisServer

SHARING_TARGET = 1.15


@dataclass(frozen=True)
class ReplicasPlan:
    stops: int
    asks: int  # per route and state
    clients: int
    load_s: float


FULL = ReplicasPlan(stops=40, asks=40, clients=20, load_s=30.0)
QUICK = ReplicasPlan(stops=5, asks=5, clients=4, load_s=5.0)


class Gateway:
    """`python -m services.gateway` on the stack's store and services, on ports of its own."""

    def __init__(self, stack: Stack, redis_url: str) -> None:
        self.stack = stack
        self.key = stack.key
        self.grpc_port, self.http_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.endswith("_ADDR")}
        env |= {f"{n.upper()}_ADDR": stack.address(n) for n in ("embedder", "retriever", "generator")}
        env |= {"DATA_DIR": str(stack.data_dir), "RAGMESH_HOST": "127.0.0.1", "LOG_LEVEL": "WARNING",
                "GATEWAY_PORT": str(self.grpc_port), "HTTP_PORT": str(self.http_port), "REDIS_URL": redis_url,
                "GEMINI_API_KEY": "", "SERVICE_TOKEN": "", "API_KEY_PEPPER": "", "MONGODB_URI": "",
                "TLS_CERT": "", "TLS_KEY": "", "TLS_CA": "", "ALLOWED_HOSTS": "", "RATE_LIMIT_PER_MINUTE": "0",
                "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "services.gateway"], env=env, cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def wait_ready(self, timeout: float = 120) -> "Gateway":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}")
            try:
                if httpx.get(self.http_url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gateway on {self.http_url} not ready in {timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def _to_strategy(client: httpx.AsyncClient, url: str, key: str, body: dict) -> tuple[float, dict]:
    """ms to the strategy event, and the event; the answer is read to its end (one at a time)."""
    start = time.perf_counter()
    took, strategy = 0.0, {}
    async with client.stream("POST", url + "/api/chat/ask/stream", json=body, headers=_headers(key)) as reply:
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and '"strategy"' in line and not strategy:
                took, strategy = (time.perf_counter() - start) * 1000, json.loads(line[6:])["strategy"]
    return took, strategy


async def strategy_times(asks: int, shared: tuple[Gateway | Stack, Gateway], local: Gateway,
                         key: str) -> dict[str, list[float]]:
    """{"<route> <state>": ms}: each question asked new and followed up, alternately with Redis (the
    follow-up on the other replica) and in process (on the same gateway), so both see the same load."""
    times: dict[str, list[float]] = {f"{r} {s}": [] for r in ("NEW_QUERY", "REUSE") for s in ("redis", "local")}
    async with httpx.AsyncClient(timeout=120) as client:
        for i in range(asks):
            question = QUESTIONS[i % len(QUESTIONS)]
            for state, first, second in (("redis", *shared), ("local", local, local)):
                took, strategy = await _to_strategy(client, first.http_url, key, {"question": question})
                times[f"NEW_QUERY {state}"].append(took)
                follow_up = {"question": question, "conversation_id": strategy["conversation_id"]}
                took, strategy = await _to_strategy(client, second.http_url, key, follow_up)
                if strategy.get("retrieval") == "RAG_REUSE":
                    times[f"REUSE {state}"].append(took)
    return times


async def stop_times(stops: int, runner: Stack, stopper: Gateway, key: str) -> tuple[list[float], list[float], int]:
    """(ms from sending the stop to its reply, ms from sending it to the stream's end, answers that ended
    before the stop came) over `stops` answers streaming from `runner`, stopped through `stopper`."""
    replies, ends, missed = [], [], 0
    async with httpx.AsyncClient(timeout=120) as client:
        for i in range(stops):
            content = asyncio.Event()
            conversation: dict[str, str] = {}
            ended_at: list[float] = []

            async def stream(question: str) -> None:
                async with client.stream("POST", runner.http_url + "/api/chat/ask/stream",
                                         json={"question": question}, headers=_headers(key)) as reply:
                    async for line in reply.aiter_lines():
                        if '"strategy"' in line:
                            conversation["id"] = json.loads(line[6:])["strategy"]["conversation_id"]
                        elif '"content"' in line:
                            content.set()
                ended_at.append(time.perf_counter())

            task = asyncio.create_task(stream(QUESTIONS[i % len(QUESTIONS)]))
            await content.wait()
            sent = time.perf_counter()
            reply = await client.post(stopper.http_url + "/api/chat/stop", json={"conversation_id": conversation["id"]},
                                      headers=_headers(key))
            replied = time.perf_counter()
            await task
            if reply.json().get("stopped"):
                replies.append((replied - sent) * 1000)
                ends.append((ended_at[0] - sent) * 1000)
            else:
                missed += 1
    return replies, ends, missed


@dataclass
class _Front:
    """What load_bench's chat_load needs of a stack: a URL and a key."""

    http_url: str
    key: str


async def answers_per_s(fronts: list[Any], clients: int, seconds: float) -> tuple[float, ChatTally]:
    """load_bench's chat clients split evenly over the fronts; answers completed a second, and the tallies."""
    share = [clients // len(fronts) + (i < clients % len(fronts)) for i in range(len(fronts))]
    results = await asyncio.gather(*(chat_load(f, n, seconds) for f, n in zip(fronts, share)))
    tally = ChatTally()
    for part, _ in results:
        tally.completed += part.completed
        for mine, theirs in ((tally.errors, part.errors), (tally.refused, part.refused)):
            mine.counts.update(theirs.counts)
            mine.first = theirs.first | mine.first
    return tally.completed / max(wall for _, wall in results), tally


def scope_sizes(url: str) -> list[float]:
    """Bytes of each scope entry in Redis: what sizing it takes (docs/operations.md "Gateway replicas and Redis")."""
    client = redis.Redis.from_url(url)
    try:
        return [float(client.strlen(key)) for key in client.scan_iter("ragmesh:scope:*")]
    finally:
        client.close()


def _p(ms: list[float], q: int) -> float:
    return float(np.percentile(ms, q)) if ms else float("nan")


def run_replicas(quick: bool = False) -> Section:
    plan = QUICK if quick else FULL
    section = Section("Gateway replicas: shared conversation state in Redis (issue 25)")
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-redis-") as folder:
        server = RedisServer(Path(folder)).start()
        gateways: list[Gateway] = []
        try:
            log("replicas: starting the stack (its gateway on Redis)")
            with Stack(REDIS_URL=server.url) as stack:
                a = _Front(stack.http_url, stack.key)
                gateways = [Gateway(stack, server.url), Gateway(stack, "")]
                b, local = (g.wait_ready() for g in gateways)
                log("replicas: stop across replicas")
                replies, ends, missed = asyncio.run(stop_times(plan.stops, stack, b, stack.key))
                section.add("stop on the other replica: reply p50 / p99", f"{_p(replies, 50):.1f} / {_p(replies, 99):.1f}",
                            "ms", note=f"{len(replies)} stops; the reply comes once the partial answer is stored"
                                       + (f"; {missed} answers ended before their stop" if missed else ""))
                section.add("stop on the other replica: stream ended p99", _p(ends, 99), "ms",
                            Target("<=", 1000), note=f"p50 {_p(ends, 50):.1f} ms; from sending the stop")
                log("replicas: time to the strategy event, Redis vs in process")
                times = asyncio.run(strategy_times(plan.asks, (a, b), local, stack.key))
                for route in ("NEW_QUERY", "REUSE"):
                    shared, alone = times[f"{route} redis"], times[f"{route} local"]
                    ratio = _p(shared, 50) / _p(alone, 50)
                    section.add(f"{route}: to strategy, Redis / in process (p50)", ratio, "x",
                                Target("<=", SHARING_TARGET),
                                note=f"Redis p50 {_p(shared, 50):.1f} ms, p99 {_p(shared, 99):.1f} ms "
                                     f"({len(shared)}); in process p50 {_p(alone, 50):.1f} ms, p99 "
                                     f"{_p(alone, 99):.1f} ms ({len(alone)})"
                                     + ("; REUSE asked of the other replica" if route == "REUSE" else ""))
                sizes = scope_sizes(server.url)
                section.add("scope entry in Redis, median size", _p(sizes, 50) / 1024, "KB",
                            note=f"{len(sizes)} entries, largest {max(sizes, default=0) / 1024:.1f} KB "
                                 "(hits, the context built from them, the question's vector)")
                log("replicas: answers/s with one and two gateway replicas")
                one_rate, one = asyncio.run(answers_per_s([a], plan.clients, plan.load_s))
                two_rate, two = asyncio.run(answers_per_s([a, b], plan.clients, plan.load_s))
                section.add(f"answers/s, {plan.clients} SSE clients: one replica", one_rate, "/s",
                            note=f"errors {one.errors.total} ({one.errors}), refused {one.refused.total}")
                section.add(f"answers/s, {plan.clients} SSE clients: two replicas", two_rate, "/s",
                            note=f"ratio {two_rate / one_rate:.2f}; errors {two.errors.total} ({two.errors}), "
                                 f"refused {two.refused.total}; both replicas on this machine's CPUs")
        finally:
            for gateway in gateways:
                gateway.stop()
            server.kill()
    return section
