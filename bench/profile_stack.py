"""`python -m bench.profile_stack`: where an answer's CPU goes, stage by stage, across the whole stack.

The load part's stack (`python -m deploy.run`, bench/load_bench.py) answers concurrent SSE chats while
py-spy samples every service process (`py-spy record --nonblocking --threads --format raw`, so the
services are not paused). Each thread's CPU time comes from /proc (utime + stime before and after), and is
shared among the stages its samples fall in; threads that run no Python (gRPC's event engine, the
model runtimes' worker pools) are named by what runs them in their service. Every figure is CPU-ms per
completed answer, so it holds whatever else shares the machine; the table goes to stdout as markdown (and
to `--out` with the raw samples beside it).

Stages are read from each sample's frames (OWNING, then LEAF rules); a sample with no
frame of ours (the event loop and gRPC's Python layer between two steps of a request) is "event loop and
gRPC (between stages)".
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench import machine
from bench.load_bench import SERVICES, Stack, chat_load, warm_up
from bench.search_bench import REPO, log, machine_load

PY_SPY = Path(sys.executable).with_name("py-spy")
SAMPLE_RATE = 200  # samples a second per thread: py-spy's own CPU, not the services'
LOOP = "event loop and gRPC's Cython layer (between stages)"
NATIVE = "native threads"

GW, EMB, RET, GEN = ("gateway",), ("embedder",), ("retriever",), ("generator",)
# (stage, services, frame substrings). A sample's stage: the first OWNING rule one of whose substrings is
# anywhere in its frames (work done on behalf of something else: a memory write runs through the store and
# the clients, a call's authentication under the HTTP guards or the gRPC interceptor); else, walking its
# frames from the leaf to the root, the first frame that a LEAF rule names (the innermost code of ours:
# a store write under the answer is a history write, the JSON of an event under the SSE route is SSE).
OWNING: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("background summaries", GW, ("Memory._summarize",)),
    ("memory writes (conversation memory)", GW, ("Memory._remember", "Memory._unless_deleted",
                                                 "_StreamRequestMixin", "StreamStreamCall")),
    ("authentication", SERVICES, ("ragmesh/identity/", "Identifier.identify", "ContextInterceptor._let_in")),
    # The embedder: questions come as QUERY, conversation memory (through the retriever's ingest) as DOCUMENT.
    ("memory writes (conversation memory)", EMB, ("_embed_documents", "SentenceTransformer", "torch/")),
    ("question embedding", EMB, ("backends/onnx.py", "batcher.py", "EmbedderServicer")),
    ("memory writes (conversation memory)", RET, ("Ingest", "ingest/", "UnaryUnaryCall")),  # and its Embed calls
    ("search", RET, ("Search", "CheckChunks")),
    ("generation", GEN, ("Generate",)),
)
LEAF: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("question reading and routing", GW, ("query_analysis.py", "router.py", "followup.py", "scope.py",
                                          "strategy.py", "gateway/request.py", "AskPipeline.prepare")),
    ("question embedding", GW, ("embed_early", "EmbedderClient")),
    ("search", GW, ("RetrieverClient", "planner.py", "scope_cache.py")),
    ("context", GW, ("gateway/context.py", "context_sections.py", "AskPipeline._context")),
    ("history writes", GW, ("gateway/history.py", "ragmesh/store/", "gateway/limits.py", "gateway/memory.py")),
    ("generation", GW, ("AskPipeline._generate", "AskPipeline._answer", "GeneratorClient", "answer_guard.py",
                        "UnaryStreamCall", "_StreamResponseMixin")),
    ("SSE", GW, ("api/chat.py", "api/protocol.py", "gateway/events.py", "AskPipeline.run")),
    ("HTTP edge (routing, body parsing, guards)", GW, ("starlette/", "fastapi/", "uvicorn/", "h11/", "httptools",
                                                        "api/limits.py", "api/auth.py", "pydantic")),
    ("question embedding and search calls (gRPC client)", GW, ("UnaryUnaryCall",)),
    ("search", RET, ("search.py", "fusion.py", "bm25.py", "dense.py", "index.py")),
    ("generation", GEN, ("backends/", "citations.py")),
    ("gRPC serving (interceptors, request parsing)", SERVICES, ("ContextInterceptor", "_Parser")),
)
# What a thread without Python frames does, by service (its CPU is not sampled, only measured).
NATIVE_STAGE = {"embedder": "question embedding + memory writes (model runtime pools)",
                "retriever": "search (FAISS / BLAS pools)"}
TABLE_STAGES = ("authentication", "HTTP edge (routing, body parsing, guards)", "question reading and routing",
                "question embedding", "search", "context", "generation", "SSE", "history writes", "memory writes (conversation memory)",
                "background summaries", LOOP)


def stage_of(service: str, frames: str) -> str:
    for stage, services, marks in OWNING:
        if service in services and any(m in frames for m in marks):
            return stage
    leaf = [(stage, marks) for stage, services, marks in LEAF if service in services]
    for frame in reversed(frames.split(";")):
        for stage, marks in leaf:
            if any(m in frame for m in marks):
                return stage
    return LOOP


# ----------------------------------------------------------------------------- CPU time from /proc


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU seconds) of every live thread of `pid`."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                head, _, tail = fh.read().rpartition(")")
            fields = tail.split()
            out[int(tid)] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / ticks)
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return out


def process_cpu(pid: int) -> float:
    """The process's CPU seconds, ended threads included."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- samples


def read_samples(path: Path) -> dict[int, Counter[str]]:
    """tid -> collapsed stacks (frames joined by ';', without the thread frame) -> samples."""
    by_thread: dict[int, Counter[str]] = defaultdict(Counter)
    if not path.exists():
        return by_thread
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        first, _, frames = stack.partition(";")
        if not first.startswith("thread (") or not count.isdigit():
            continue
        tid = int(first[len("thread ("):].split(")")[0], 0)
        by_thread[tid][frames] += int(count)
    return by_thread


@dataclass
class Profile:
    answers: int
    refused: int
    errors: str  # by kind, with the first message of each
    wall_s: float
    cpu_ms: dict[str, dict[str, float]]  # service -> stage -> CPU-ms in all
    process_ms: dict[str, float]  # service -> CPU-ms of the whole process
    samples: int

    def per_answer(self, service: str, stage: str) -> float:
        return self.cpu_ms.get(service, {}).get(stage, 0.0) / max(self.answers, 1)


def attribute(service: str, before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
              samples: dict[int, Counter[str]], process_ms: float) -> dict[str, float]:
    """The service's CPU-ms by stage: each thread's CPU shared among its samples' stages, threads without
    samples by what runs them, and what ended threads used (the process's figure minus its live threads')."""
    out: Counter[str] = Counter()
    for tid, (name, cpu) in after.items():
        used_ms = 1000 * (cpu - before.get(tid, (name, 0.0))[1])
        if used_ms <= 0:
            continue
        stacks = samples.get(tid)
        if not stacks:
            grpc_thread = name.startswith(("event_engine", "grpc_", "lifeguard"))
            out[f"{NATIVE}: gRPC core" if grpc_thread else NATIVE_STAGE.get(service, f"{NATIVE}: other")] += used_ms
            continue
        total = sum(stacks.values())
        for frames, n in stacks.items():
            out[stage_of(service, frames)] += used_ms * n / total
    out["threads that ended"] += max(0.0, process_ms - sum(out.values()))
    return dict(out)


def profile(chats: int, seconds: float, rate: int, out_dir: Path, env: dict[str, str] | None = None) -> Profile:
    """Starts the stack (with `env` over its settings), warms it up, then samples every service while
    `chats` clients ask for `seconds`."""
    if not PY_SPY.exists():
        raise SystemExit(f"{PY_SPY} not found: install the dev extra (pip install -e '.[dev]')")
    out_dir.mkdir(parents=True, exist_ok=True)
    log("profile: starting the stack (python -m deploy.run)")
    with Stack(**(env or {})) as stack:
        if bad := warm_up(stack):
            log(f"profile: not answered from the notes in the warm-up: {bad}")
        pids = stack.pids()
        spies = {name: subprocess.Popen([str(PY_SPY), "record", "--pid", str(pid), "--rate", str(rate),
                                         "--format", "raw", "--nonblocking", "--threads", "--gil",
                                         "--output", str(out_dir / f"{name}.txt")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for name, pid in pids.items()}
        time.sleep(2.0)  # py-spy attached
        threads0 = {n: thread_cpu(p) for n, p in pids.items()}
        process0 = {n: process_cpu(p) for n, p in pids.items()}
        log(f"profile: {chats} concurrent SSE chats for {seconds:.0f} s, py-spy at {rate}/s on each service")
        tally, wall = asyncio.run(chat_load(stack, chats, seconds))
        threads1 = {n: thread_cpu(p) for n, p in pids.items()}
        process1 = {n: process_cpu(p) for n, p in pids.items()}
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for name, spy in spies.items():
            try:
                _, err = spy.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                err = "timed out"
            if spy.returncode not in (0, -signal.SIGINT) and not (out_dir / f"{name}.txt").exists():
                log(f"profile: py-spy on {name} failed: {err.strip()[-300:]}")
        log("profile: stopping the stack")
    cpu_ms, process_ms, n_samples = {}, {}, 0
    for name in pids:
        samples = read_samples(out_dir / f"{name}.txt")
        n_samples += sum(sum(c.values()) for c in samples.values())
        process_ms[name] = 1000 * (process1[name] - process0[name])
        cpu_ms[name] = attribute(name, threads0[name], threads1[name], samples, process_ms[name])
    return Profile(tally.completed, tally.refused.total, f"{tally.errors.total} errors"
                   + (f" ({tally.errors})" if tally.errors.total else ""), wall, cpu_ms, process_ms, n_samples)


# ----------------------------------------------------------------------------- the table


def render(p: Profile, chats: int) -> str:
    """Markdown: one row a stage, one column a service, CPU-ms per answer, and the whole stack's figure."""
    stages = list(TABLE_STAGES)
    for service_stages in p.cpu_ms.values():
        stages += sorted(s for s in service_stages if s not in stages)
    services = [s for s in SERVICES if s in p.cpu_ms]
    total = sum(p.process_ms.values()) / max(p.answers, 1)
    lines = [f"{chats} concurrent SSE chats for {p.wall_s:.0f} s: {p.answers:,} answers ({p.answers / p.wall_s:.1f}/s), "
             f"{p.refused:,} refused, {p.errors}; {p.samples:,} samples. "
             f"**{total:.1f} CPU-ms an answer** (all services).", "",
             "| stage (CPU-ms an answer) | " + " | ".join(services) + " | all | share |",
             "|---|" + "---:|" * (len(services) + 2)]
    for stage in stages:
        row = [p.per_answer(s, stage) for s in services]
        if sum(row) < 0.05:
            continue
        lines.append(f"| {stage} | " + " | ".join(f"{v:.1f}" if v >= 0.05 else "" for v in row)
                     + f" | **{sum(row):.1f}** | {100 * sum(row) / max(total, 1e-9):.0f}% |")
    lines.append("| all stages | " + " | ".join(f"{p.process_ms[s] / max(p.answers, 1):.1f}" for s in services)
                 + f" | **{total:.1f}** | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=50, help="concurrent SSE chats (the load part's 50)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long they ask")
    parser.add_argument("--rate", type=int, default=SAMPLE_RATE, help="py-spy samples a second")
    parser.add_argument("--out", type=Path, default=Path("profile-stack"),
                        help="folder for each service's raw samples and the table (profile.md)")
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="settings for the stack's services (to profile an alternative)")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    if args.out.exists():
        shutil.rmtree(args.out)
    p = profile(args.chats, args.seconds, args.rate, args.out, env)
    settings = f"Settings: {' '.join(args.env)}.\n\n" if args.env else ""
    text = (f"## Where an answer's CPU goes ({time.strftime('%Y-%m-%d %H:%M')})\n\n{machine.describe()}\n\n"
            f"{settings}At the end: {machine_load()}.\n\n{render(p, args.chats)}\n")
    (args.out / "profile.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
