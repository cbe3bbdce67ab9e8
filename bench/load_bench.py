"""The whole stack under concurrent load (issue 11): `python -m deploy.run` (what `make run` starts) as a
subprocess on free ports and a temp DATA_DIR, then

  chat     N clients, each asking the demo questions in a loop over `POST /api/chat/ask/stream` (SSE) for a
           bounded time: answers completed, refused (429 / RESOURCE_EXHAUSTED), errors, answers that wrongly
           say there are no notes, and the time to the `strategy` event and to the first `content` event;
  search   concurrent `Retriever/Search` calls over grpc.aio, with `query_vector` given (from one Embedder
           call beforehand) and without it (the retriever calls the embedder): searches/s and the share
           that fell back to keyword-only (`dense_skipped`);
  services every service's RSS, open descriptors and CPU time, before (after a warm-up) and after;
  per work all services' CPU time (each phase's, until they are idle again) per completed answer and per
           search with the embedder in the path, and issue 37's two ratios measured in the same run: CPU-ms
           an answer / CPU-ms a search (its question's embedding and the search), answers/s at the first
           chat phase / searches/s with the embedder in the path.

The benchmark client runs on the same machine as the stack, so it competes with it for the CPUs; its own
CPU time is reported beside the services'.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np

from bench.search_bench import REPO, Section, Target, free_port, log
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc, retriever_pb2, retriever_pb2_grpc

SERVICES = ("gateway", "embedder", "retriever", "generator")
# Demo questions whose answers are in the demo corpus (demo/corpus/FACTS.md): a "no notes" reply is wrong.
QUESTIONS = (
    "When did Meridian close to new investors?",
    "What did Kestrel do with its Brazil exposure?",
    "How much did Northwind lose in August 2024, and what caused it?",
    "Who left Northwind in early 2025?",
    "How did Harborview change net exposure in June 2024?",
    "Who joined Harborview as head of short research, and when?",
    "Which Altair executive left in June 2024?",
    "What did Altair recover on Vantor Telecom?",
    "What did the Corveth Therapeutics trial failure cost Solstice?",
    "What premium was paid for Brightwater Bio?",
)
# The gateway's reply when nothing matched, and the extractive generator's two (no blocks / none relevant).
NO_NOTES = ("I don't have any notes that match", "There is no data in the selected sources",
            "The retrieved sources do not contain information that answers")
COLLECTIONS = ["meeting_notes", "factsheets"]
SEARCH_TOP_K = 8  # the gateway's CONTEXT_TOP_K
ASK_TIMEOUT_S = 120.0
REFUSED_PAUSE_S = 1.0  # after a refusal without a Retry-After, before asking again
DRAIN_TIMEOUT_S = 180.0
DRAIN_NOTE = "until the services used < 0.1 CPU s in a second: work still running for callers that gave up"
CPU_PER_ANSWER_BOUND = 6.0  # issue 37: CPU-ms an answer / CPU-ms of its question's embedding and search
RATE_BOUND = 0.19  # issue 37: answers/s at 50 concurrent chats / searches/s at 200 with the embedder in the path
FD_SLACK = 10  # "flat": at most this many more open descriptors after the run than before
MB = 2**20


@dataclass(frozen=True)
class LoadPlan:
    chats: tuple[int, ...]  # concurrent SSE clients, one phase each
    chat_s: float
    searchers: int
    search_s: float
    judged: bool  # the targets apply (full run only)


FULL = LoadPlan(chats=(50, 200), chat_s=60.0, searchers=200, search_s=20.0, judged=True)
QUICK = LoadPlan(chats=(10,), chat_s=10.0, searchers=20, search_s=5.0, judged=False)


# ----------------------------------------------------------------------------- the stack


class Stack:
    """`python -m deploy.run` with its own ports and DATA_DIR (removed on exit); stopped with Ctrl-C (SIGINT)."""

    def __init__(self, **env: str) -> None:
        """`env`: variables set last (over the defaults below)."""
        self.env = env
        self._tmp = tempfile.TemporaryDirectory(prefix="ragmesh-bench-load-")
        self.data_dir = Path(self._tmp.name)
        self.ports = {name: free_port() for name in (*SERVICES, "http")}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.key = ""

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    def address(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"

    def __enter__(self) -> "Stack":
        env = {k: v for k, v in os.environ.items() if not k.endswith("_ADDR")}
        env |= {f"{name.upper()}_PORT": str(port) for name, port in self.ports.items()}
        env |= {"DATA_DIR": str(self.data_dir), "RAGMESH_HOST": "127.0.0.1", "LOG_LEVEL": "WARNING",
                "GEMINI_API_KEY": "", "GOOGLE_API_KEY": "", "OPENAI_API_KEY": "", "SERVICE_TOKEN": "",
                "API_KEY_PEPPER": "", "MONGODB_URI": "", "TLS_CERT": "", "TLS_KEY": "", "TLS_CA": "",
                "ALLOWED_HOSTS": "", "RAGMESH_API_KEY": "", "HF_HUB_OFFLINE": "1",
                "RATE_LIMIT_PER_MINUTE": "0",  # one key asks for every simulated user: no per-user
                "TENANT_CALL_SHARE": "1", "USER_CALL_SHARE": "1", "TENANT_STREAM_SHARE": "1"}  # rate or share
        env.pop("EXTRACTIVE_DELAY_MS", None)  # the default answer pace
        env |= self.env
        self.proc = subprocess.Popen([sys.executable, "-m", "deploy.run"], env=env, cwd=REPO, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            self._wait_banner(timeout=400)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_banner(self, timeout: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        # Read for the whole run: the supervisor reports restarts on stdout.
        threading.Thread(target=lambda: [self.lines.append(line) for line in out], daemon=True).start()
        deadline = time.monotonic() + timeout
        while "Press Ctrl-C to stop." not in "".join(self.lines):
            if self.proc.poll() is not None:
                time.sleep(0.5)  # the last lines
                raise RuntimeError(f"deploy.run exited {self.proc.returncode}:\n{''.join(self.lines)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"deploy.run did not come up in {timeout:.0f} s:\n{''.join(self.lines)}")
            time.sleep(0.5)
        found = re.search(r"#key=(\S+)", "".join(self.lines))
        if not found:
            raise RuntimeError(f"no key in the banner:\n{''.join(self.lines)}")
        self.key = found.group(1)

    def restarts(self) -> list[str]:
        """Supervisor lines about a service that exited (it is restarted while the others run on)."""
        return [line.strip() for line in list(self.lines) if " exited (" in line]

    def pids(self) -> dict[str, int]:
        """Each service's pid: DATA_DIR/run/<service>.pid (the supervisor writes them), else the process
        whose command line is `-m services.<name>` and whose environment has this DATA_DIR."""
        pids: dict[str, int] = {}
        for name in SERVICES:
            try:
                pids[name] = int((self.data_dir / "run" / f"{name}.pid").read_text())
            except (OSError, ValueError):
                pass
        if len(pids) < len(SERVICES):
            marker = f"DATA_DIR={self.data_dir}".encode()
            for entry in Path("/proc").iterdir():
                try:
                    args = (entry / "cmdline").read_bytes().split(b"\0")
                    if b"-m" in args and marker in (entry / "environ").read_bytes().split(b"\0"):
                        module = args[args.index(b"-m") + 1].decode()
                        if module.startswith("services.") and module[9:] in SERVICES:
                            pids.setdefault(module[9:], int(entry.name))
                except (OSError, ValueError, IndexError):
                    continue
        return pids

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._tmp.cleanup()


@dataclass(frozen=True)
class Usage:
    pid: int
    rss_mb: float
    fds: int
    cpu_s: float


def usage(pid: int) -> Usage:
    with open(f"/proc/{pid}/status") as fh:
        rss_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    return Usage(pid, rss_kb * 1024 / MB, len(os.listdir(f"/proc/{pid}/fd")),
                 (int(fields[11]) + int(fields[12])) / ticks)  # utime + stime


def snapshot(stack: Stack) -> dict[str, Usage]:
    return {name: usage(pid) for name, pid in stack.pids().items()}


def drain(stack: Stack, timeout: float = DRAIN_TIMEOUT_S) -> float:
    """Waits until the services are idle (together under 10% of a CPU over a second): work the clients
    gave up on can still be running. Returns the seconds it took (`timeout` if they never were)."""
    start = time.perf_counter()
    last = snapshot(stack)
    while time.perf_counter() - start < timeout:
        time.sleep(1.0)
        now = snapshot(stack)
        if sum(now[n].cpu_s - last[n].cpu_s for n in now if n in last) < 0.1:
            return time.perf_counter() - start
        last = now
    return timeout


# ----------------------------------------------------------------------------- SSE chats


@dataclass
class Errors:
    """Failures by kind, with the first message of each kind (for the report's note)."""

    counts: Counter[str] = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, message: str = "") -> None:
        self.counts[kind] += 1
        self.first.setdefault(kind, " ".join(message.split()).replace("|", "/")[:120])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        return ", ".join(f"{k}: {v}" + (f" (first: {self.first[k]})" if self.first[k] else "")
                         for k, v in self.counts.most_common())


@dataclass
class ChatTally:
    completed: int = 0
    refused: Errors = field(default_factory=Errors)
    errors: Errors = field(default_factory=Errors)
    no_notes: Counter[str] = field(default_factory=Counter)
    dense_skipped: int = 0
    unavailable: int = 0
    to_strategy_ms: list[float] = field(default_factory=list)
    to_content_ms: list[float] = field(default_factory=list)


async def ask_once(client: httpx.AsyncClient, url: str, headers: dict[str, str], question: str,
                   tally: ChatTally) -> None:
    """One streamed answer, counted: completed (a `done` event), refused, or an error."""
    start = time.perf_counter()
    content: list[str] = []
    done = False
    try:
        async with client.stream("POST", url, json={"question": question}, headers=headers) as reply:
            if reply.status_code == 429:
                tally.refused.add("HTTP 429", (await reply.aread()).decode(errors="replace"))
                await asyncio.sleep(float(reply.headers.get("retry-after", "1")))  # as a polite client does
                return
            if reply.status_code != 200:
                tally.errors.add(f"HTTP {reply.status_code}", (await reply.aread()).decode(errors="replace"))
                return
            async for line in reply.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event: dict[str, Any] = json.loads(line[6:])
                if "strategy" in event:
                    tally.to_strategy_ms.append((time.perf_counter() - start) * 1000)
                    tally.dense_skipped += bool(event["strategy"].get("dense_skipped"))
                    tally.unavailable += bool(event["strategy"].get("unavailable"))
                elif "content" in event:
                    if not content:
                        tally.to_content_ms.append((time.perf_counter() - start) * 1000)
                    content.append(event["content"])
                elif "error" in event:
                    code = event["error"].get("code", "?")
                    if code == "RESOURCE_EXHAUSTED":
                        tally.refused.add("SSE error RESOURCE_EXHAUSTED", event["error"].get("message", ""))
                        await asyncio.sleep(REFUSED_PAUSE_S)
                    else:
                        tally.errors.add(f"SSE error {code}", event["error"].get("message", ""))
                    return
                elif "done" in event:
                    done = True
    except (httpx.HTTPError, ValueError) as exc:
        tally.errors.add(type(exc).__name__, str(exc))
        return
    if not done:
        tally.errors.add("stream ended without done", "")
        return
    tally.completed += 1
    text = "".join(content)
    for phrase in NO_NOTES:
        if phrase in text:
            tally.no_notes[phrase] += 1


async def chat_load(stack: Stack, clients: int, seconds: float) -> tuple[ChatTally, float]:
    """`clients` concurrent askers, each asking the questions in turn until `seconds` pass (answers under
    way are finished). Returns the tally and the wall time."""
    tally = ChatTally()
    url, headers = stack.http_url + "/api/chat/ask/stream", {"authorization": f"Bearer {stack.key}"}
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(ASK_TIMEOUT_S)) as client:
        start = time.perf_counter()
        deadline = start + seconds

        async def asker(i: int) -> None:
            n = i
            while time.perf_counter() < deadline:
                await ask_once(client, url, headers, QUESTIONS[n % len(QUESTIONS)], tally)
                n += 1

        await asyncio.gather(*(asker(i) for i in range(clients)))
        return tally, time.perf_counter() - start


def pcts(ms: list[float]) -> str:
    if not ms:
        return "n/a"
    return " / ".join(f"{np.percentile(ms, p):,.0f}" for p in (50, 95, 99))


def add_chat_figures(section: Section, n: int, tally: ChatTally, wall_s: float, judged: bool, drain_s: float) -> None:
    target = judged and n == max(FULL.chats)  # the bounds are for 200 concurrent
    asked = tally.completed + tally.refused.total + tally.errors.total
    section.add(f"chat x{n}: answers completed", tally.completed, "",
                note=f"{tally.completed / wall_s:.1f} answers/s over {wall_s:.0f} s; {asked:,} asked")
    section.add(f"chat x{n}: refused (429 / RESOURCE_EXHAUSTED)", tally.refused.total, "", note=str(tally.refused))
    section.add(f"chat x{n}: errors", tally.errors.total, "", Target("<=", 0) if target else None,
                str(tally.errors))
    section.add(f"chat x{n}: wrong \"no notes\" answers", sum(tally.no_notes.values()), "",
                Target("<=", 0) if target else None,
                ", ".join(f"'{k}...': {v}" for k, v in tally.no_notes.most_common()))
    section.add(f"chat x{n}: to strategy p50 / p95 / p99", pcts(tally.to_strategy_ms), "ms",
                note=f"dense skipped in {tally.dense_skipped:,}, a service unavailable in {tally.unavailable:,}")
    section.add(f"chat x{n}: to first content p50 / p95 / p99", pcts(tally.to_content_ms), "ms")
    section.add(f"chat x{n}: services busy after the last answer", drain_s, "s", note=DRAIN_NOTE)


# ----------------------------------------------------------------------------- Retriever/Search


@dataclass
class SearchTally:
    calls: int = 0
    refused: Errors = field(default_factory=Errors)
    errors: Errors = field(default_factory=Errors)
    dense_skipped: int = 0
    ms: list[float] = field(default_factory=list)


async def query_vectors(stack: Stack) -> list[list[float]]:
    """The questions' vectors from one Embedder call (an admin key is accepted by internal services)."""
    async with grpc.aio.insecure_channel(stack.address("embedder")) as channel:
        reply = await embedder_pb2_grpc.EmbedderStub(channel).Embed(
            embedder_pb2.EmbedRequest(texts=list(QUESTIONS), task=embedder_pb2.QUERY),
            metadata=(("authorization", f"Bearer {stack.key}"),), timeout=60)
    return [list(v.values) for v in reply.vectors]


async def search_load(stack: Stack, callers: int, seconds: float,
                      vectors: list[list[float]] | None) -> tuple[SearchTally, float]:
    """`callers` concurrent searchers over one channel (as the gateway calls), each searching in a loop."""
    tally = SearchTally()
    metadata = (("authorization", f"Bearer {stack.key}"),)
    requests = [retriever_pb2.SearchRequest(query=q, collections=COLLECTIONS, top_k=SEARCH_TOP_K,
                                            query_vector=vectors[i] if vectors else [])
                for i, q in enumerate(QUESTIONS)]
    async with grpc.aio.insecure_channel(stack.address("retriever")) as channel:
        stub = retriever_pb2_grpc.RetrieverStub(channel)
        start = time.perf_counter()
        deadline = start + seconds

        async def searcher(i: int) -> None:
            n = i
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    reply = await stub.Search(requests[n % len(requests)], metadata=metadata, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        tally.refused.add("RESOURCE_EXHAUSTED", exc.details() or "")
                        retry = dict(exc.trailing_metadata() or ()).get("retry-after", REFUSED_PAUSE_S)
                        await asyncio.sleep(float(retry))  # as a polite client does
                    else:
                        tally.errors.add(exc.code().name, exc.details() or "")
                else:
                    tally.calls += 1
                    tally.dense_skipped += reply.dense_skipped
                    tally.ms.append((time.perf_counter() - t0) * 1000)
                n += 1

        await asyncio.gather(*(searcher(i) for i in range(callers)))
        return tally, time.perf_counter() - start


def add_search_figures(section: Section, label: str, n: int, tally: SearchTally, wall_s: float,
                       drain_s: float) -> float:
    rate = tally.calls / wall_s
    section.add(f"search x{n}, {label}: searches/s", rate, "/s",
                note=f"{tally.calls:,} in {wall_s:.0f} s; p50 / p95 / p99 {pcts(tally.ms)} ms")
    section.add(f"search x{n}, {label}: fell back to keyword-only", 100 * tally.dense_skipped / max(tally.calls, 1),
                "%", note=f"{tally.dense_skipped:,} replies with dense_skipped")
    section.add(f"search x{n}, {label}: refused", tally.refused.total, "", note=str(tally.refused))
    section.add(f"search x{n}, {label}: errors", tally.errors.total, "", note=str(tally.errors))
    section.add(f"search x{n}, {label}: services busy after the last reply", drain_s, "s", note=DRAIN_NOTE)
    return rate


# ----------------------------------------------------------------------------- the part


def cpu_ms(before: dict[str, Usage], after: dict[str, Usage], services: tuple[str, ...] = SERVICES) -> float:
    """CPU-ms the services used from one snapshot to the next (a restarted one's from its new start)."""
    return 1000 * sum(after[n].cpu_s - (before[n].cpu_s if before[n].pid == after[n].pid else 0.0)
                      for n in services if n in before and n in after)


def add_cost_figures(section: Section, n_chats: int, answer: tuple[int, float, float],
                     search: tuple[int, float, float], judged: bool, keyword_only: int = 0) -> None:
    """CPU per answer and per search (embedder in the path) and the issue's two ratios. `answer` and
    `search`: (completed, wall s, CPU-ms of all services over the phase and its drain); `keyword_only`:
    searches that fell back without their embedding (whose CPU the figure then lacks)."""
    (answers, chat_wall, chat_ms), (searches, search_wall, search_ms) = answer, search
    per_answer, per_search = chat_ms / max(answers, 1), search_ms / max(searches, 1)
    section.add(f"chat x{n_chats}: CPU-ms an answer (all services)", per_answer, "ms",
                note=f"{chat_ms / 1000:.1f} CPU s for {answers:,} answers, background work included")
    fell_back = f"; {keyword_only:,} fell back to keyword-only, without their embedding" if keyword_only else ""
    section.add("search, embedder in the path: CPU-ms a search (embedder + retriever)", per_search, "ms",
                note=f"{search_ms / 1000:.1f} CPU s for {searches:,} searches{fell_back}")
    section.add("CPU-ms an answer / CPU-ms a search with its embedding", per_answer / max(per_search, 1e-9), "x",
                Target("<=", CPU_PER_ANSWER_BOUND) if judged else None)
    section.add(f"answers/s at {n_chats} chats / searches/s with the embedder in the path",
                (answers / chat_wall) / max(searches / search_wall, 1e-9), "x",
                Target(">=", RATE_BOUND) if judged else None)


def add_service_figures(section: Section, snapshots: list[tuple[str, dict[str, Usage]]], judged: bool) -> None:
    """RSS growth and descriptors from the first snapshot to the last; RSS at each one, to tell a plateau
    (allocator pools, caches filling) from a leak."""
    (_, before), (_, after) = snapshots[0], snapshots[-1]
    for name in SERVICES:
        if name not in before or name not in after:
            section.add(f"{name}: RSS / descriptors", "not found", note="no pid file and no matching process")
            continue
        b, a = before[name], after[name]
        restarted = f"RESTARTED (pid {b.pid} -> {a.pid}); " if a.pid != b.pid else ""
        steps = " -> ".join(f"{snap[name].rss_mb:.0f}" if name in snap else "?" for _, snap in snapshots)
        section.add(f"{name}: RSS growth", a.rss_mb - b.rss_mb, "MB", note=f"{restarted}{steps} MB")
        section.add(f"{name}: open descriptors after", a.fds, "", Target("<=", b.fds + FD_SLACK) if judged else None,
                    f"{b.fds} before")
    section.add("CPU s during the load: " + " / ".join(SERVICES),
                " / ".join(f"{after[n].cpu_s - before[n].cpu_s:.0f}" if n in after and n in before else "?"
                           for n in SERVICES), "s")
    section.notes.append("RSS is shown at each snapshot: " + ", ".join(label for label, _ in snapshots) + ".")


def warm_up(stack: Stack) -> list[str]:
    """Every question once, one at a time (models loaded, caches filled), before the "before" snapshot.
    Returns the questions that were not answered from the notes when nothing else was running."""
    tally = ChatTally()

    async def go() -> list[str]:
        bad = []
        async with httpx.AsyncClient(timeout=httpx.Timeout(ASK_TIMEOUT_S)) as client:
            for q in QUESTIONS:
                before = (tally.completed, sum(tally.no_notes.values()))
                await ask_once(client, stack.http_url + "/api/chat/ask/stream",
                               {"authorization": f"Bearer {stack.key}"}, q, tally)
                if (tally.completed, sum(tally.no_notes.values())) != (before[0] + 1, before[1]):
                    bad.append(q)
        return bad

    return asyncio.run(go())


def run_load(quick: bool) -> Section:
    plan = QUICK if quick else FULL
    section = Section(f"The whole stack under load (deploy.run; chats {', '.join(map(str, plan.chats))} concurrent "
                      f"for {plan.chat_s:.0f} s, {plan.searchers} concurrent searches for {plan.search_s:.0f} s)")
    log("load: starting the stack (python -m deploy.run)")
    with Stack() as stack:
        bad = warm_up(stack)
        if bad:
            section.notes.append(f"Not answered from the notes even alone (warm-up): {'; '.join(bad)}.")
        snapshots, cpu0 = [("before", snapshot(stack))], time.process_time()
        costs: dict[str, tuple[int, float, float]] = {}  # the first chat phase's and the embedded searches'
        for n in plan.chats:
            log(f"load: {n} concurrent SSE chats for {plan.chat_s:.0f} s")
            tally, wall = asyncio.run(chat_load(stack, n, plan.chat_s))
            add_chat_figures(section, n, tally, wall, plan.judged, drain(stack))
            snapshots.append((f"after chat x{n}", snapshot(stack)))
            costs.setdefault("chat", (tally.completed, wall, cpu_ms(snapshots[-2][1], snapshots[-1][1])))
        vectors = asyncio.run(query_vectors(stack))
        rates = {}
        for label, given in (("query_vector given", vectors), ("embedder in the path", None)):
            log(f"load: {plan.searchers} concurrent searches, {label}, for {plan.search_s:.0f} s")
            start = snapshot(stack)
            tally_s, wall = asyncio.run(search_load(stack, plan.searchers, plan.search_s, given))
            rates[label] = add_search_figures(section, label, plan.searchers, tally_s, wall, drain(stack))
            costs["search"] = (tally_s.calls, wall, cpu_ms(start, snapshot(stack), ("embedder", "retriever")))
            keyword_only = tally_s.dense_skipped if given is None else 0
        section.add("search throughput, embedder in the path / query_vector given",
                    rates["embedder in the path"] / max(rates["query_vector given"], 1e-9), "x",
                    Target(">=", 0.5) if plan.judged else None)
        add_cost_figures(section, plan.chats[0], costs["chat"], costs["search"], plan.judged, keyword_only)
        snapshots.append(("after the searches", snapshot(stack)))
        client_cpu = time.process_time() - cpu0
        add_service_figures(section, snapshots, plan.judged)
        section.notes.append(f"The benchmark client used {client_cpu:.0f} CPU s itself, on the same "
                             f"{os.cpu_count()} CPUs. Before = after a warm-up of {len(QUESTIONS)} sequential "
                             f"asks; each later snapshot once the services were idle again.")
        if restarts := stack.restarts():
            section.notes.append("Supervisor restarts: " + " | ".join(restarts))
        log("load: stopping the stack")
    if not plan.judged:
        section.notes.append("Quick run: the targets apply at 200 concurrent chats and searches only.")
    return section
