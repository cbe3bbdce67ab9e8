"""`make bench` (= `python -m bench`): the retriever's figures, measured in one run and
printed together at the end as markdown tables with their targets (issue 3, Benchmarks).

  search   hybrid search p50/p99 through a real retriever process over gRPC, load
           throughput and the retriever's memory, at each of --sizes chunks
  bm25     the inverted index against rank-bm25 (bench/bm25_bench.py), top-10 agreement
  hnsw     HNSW recall@10 against exact search, with and without a 10% filter
  approx   the approximate dense option (a collection configured `ivf`) at 1M chunks through gRPC: hybrid
           p50/p99 without and with the 10% filter, dense recall@10 against exact (target 10 ms, 0.95)
  scifact  nDCG@10 / recall@100 on SciFact (train) and ingest throughput with the local model
  embed    the local model through torch vs ONNX Runtime: texts/s at ingest and per query, cosine
  auth     what authenticating a call costs, per kind of credential (bench/auth_bench.py)
  backends the memory engine vs the Milvus backend (milvus-lite) on the same corpus: load rate, hybrid
           p50/p99 without and with a 10% filter, SciFact nDCG@10 on each (bench/backends_bench.py)
  load     the whole stack (`python -m deploy.run`) under concurrent SSE chats and searches: refusals,
           errors, time to first event, searches/s, each service's memory and descriptors (bench/load_bench.py)
  metrics  search latency with metrics on against metrics off, side by side (bench/metrics_bench.py)
  peers    ragmesh beside LanceDB and Milvus Lite on the same corpus, in one run: load rate, hybrid p50/p99
           without and with the 10% filter, ragmesh's ratio to each (bench/peers_bench.py; the `peers`
           extra: a peer that is not installed or cannot do a step is reported with its error)
  fairness another tenant's small upload and ask, p50/p99, while a rival's decompression bombs parse, 300
           anonymous half-open connections are held, the largest allowed Embed runs, the rival holds idle
           Ingest streams and stalled uploads at its share, sends eight concurrent 40 MB uploads (with each
           service's peak RSS beside its manifest limit) or fills its Redis share with metadata-heavy asks,
           each as a ratio to the same on an idle stack (bench/fairness_bench.py)
  conversations  the labelled conversations (tests/data/conversations.yaml) on the whole stack: stale answers,
           fact recall on fresh turns, wasted searches on transforms (bench/conversations_bench.py, issue 24)
  memory   conversation memory: past turns written as the gateway writes them, later questions asking them again
           in other words or matching only their answers, recall at 1/3/5 through the memory source
           (bench/memory_recall.py)
  pipeline the whole stack over 100k chunks, one question at a time per route (NEW_QUERY, REUSE, NO_RAG,
           DIRECT): time to the strategy and first content events, the gateway's own share (bench/pipeline_bench.py)
  replicas two gateway replicas on one Redis: stop across replicas p50/p99, time to the strategy event with
           Redis against in process (target <= 1.15), answers/s on one and two replicas (bench/replicas_bench.py)
  access   hybrid search with access lists (1,000 users, 50 groups; callers reading about 10% and 90% of
           100k chunks) against the same searches without, memory engine (target <= 1.2) and milvus-lite
           (bench/access_bench.py)
  classes  this CPU's class beside the AVX2 class forced on it, turn about in one run: hybrid search on two
           retrievers, CPU a text of each encoder on two embedder workers (bench/classes_bench.py)

`make bench` runs the parts that fit 30 minutes on 2 cores; the others (the 1M-chunk search and
`approx`, `peers`, the backends part with the local model, and the whole-stack comparisons of closed
issues) run when named with `--only` or all together with `--all` (`make bench ALL=1`). Each part's
time on 2 quiet cores is in bench/README.md, and the run prints its plan with those times first.
`--quick` is a smoke run of every part at small sizes (for tests); its figures are not
comparable to the targets, which are only applied at the sizes the issue names.
Progress goes to stderr; the report goes to stdout a part at a time, each part's table as soon
as the part ends, and to a results file (`--results`) as it goes, so a run cut short keeps what
it measured. The exit status is 1 when a part failed to run, 0 otherwise (a missed target is a
figure, not an error).
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path


from bench import machine, scifact_eval
from bench.access_bench import run_access
from bench.auth_bench import run_auth
from bench.backends_bench import run_backends
from bench.classes_bench import run_classes
from bench.conversations_bench import run_conversations
from bench.embed_bench import run_embed
from bench.fairness_bench import run_fairness
from bench.load_bench import run_load
from bench.memory_recall import run_memory
from bench.metrics_bench import run_metrics
from bench.peers_bench import run_peers
from bench.pipeline_bench import run_pipeline
from bench.replicas_bench import run_replicas
from bench.search_bench import (
    Section, failed_targets, log, machine_load, render, run_bm25, run_hnsw, run_search,
)
from ragmesh.cpu_features import avx2_environment, configured_class
from services.retriever.dense import IVF

DESCRIPTION = ("The benchmarks: search latency, BM25, HNSW recall, SciFact quality (issue 3), "
               "the cost of authentication (issue 10), the whole stack under load (issue 11), what metrics "
               "cost a search (issue 12), the search backends side by side (issue 17), the approximate dense "
               "option at 1M chunks, the whole path from question to first token (issue 15), fairness between "
               "tenants (issue 23) and what access lists cost a search (issue 33).")
PARTS = ("search", "bm25", "hnsw", "approx", "scifact", "embed", "auth", "backends", "load", "metrics", "peers",
         "pipeline", "fairness", "conversations", "memory", "replicas", "access", "classes")
# Opt-in (named with --only, or --all): what does not fit the default run's 30 minutes on 2 cores (MINUTES),
# the 1M-chunk and peer parts first, then the whole-stack comparisons of closed issues.
OPT_IN_PARTS = ("approx", "peers", "backends", "metrics", "pipeline", "conversations", "replicas", "access",
                "classes")
DEFAULT_PARTS = tuple(p for p in PARTS if p not in OPT_IN_PARTS)
METRICS_SIZE = {False: 100_000, True: 5_000}
DEFAULT_SIZES = [100_000]
ALL_SIZES = [100_000, 1_000_000]
APPROX_SIZE = 1_000_000  # the size issue 15's approximate target is for
QUICK_SIZE = 5_000
FULL_SIZE = 100_000  # the corpus the BM25 and HNSW figures are for
BM25_REF_QUERIES = {False: 20, True: 5}  # rank-bm25 queries (about 0.2-0.5 s each at 100k)
HNSW_QUERIES = {False: 1000, True: 100}
# Minutes each part takes in full on 2 quiet cores (bench/README.md), printed with the plan so a run
# that will not fit its time says so before it starts. Keys: the part, or the part and its size.
MINUTES = {"search 100,000": 2, "search 1,000,000": 12, "bm25": 1, "hnsw": 2, "approx 1,000,000": 15,
           "scifact": 14, "embed": 2, "auth": 1, "backends": 15, "backends, no model": 6, "load": 5,
           "metrics": 3, "peers": 10, "pipeline": 6, "fairness": 3, "conversations": 2, "memory": 1, "replicas": 2, "access": 3,
           "classes": 8}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                        help="corpus sizes for the search benchmark (default: 100000 1000000)")
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_SIZE:,} chunks, SciFact slice")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=None,
                        help="parts to run, in full (default: those that fit 30 minutes; see --all)")
    parser.add_argument("--all", action="store_true",
                        help="every part in full: search at 1M too, approx, peers, backends' SciFact with the model")
    parser.add_argument("--queries", type=int, default=None, help="timed queries per search mode (default 300)")
    parser.add_argument("--scifact", type=Path, default=scifact_eval.DEFAULT_PATH, help="BEIR SciFact folder")
    parser.add_argument("--no-model", action="store_true",
                        help="backends: SciFact embedded with stand-in vectors, not the local model (minutes less)")
    parser.add_argument("--cpu-class", choices=("native", "avx2"), default=configured_class(),
                        help="avx2: every process as on an AVX2-only CPU, each library on its AVX2 kernels and the "
                             "embedder's choices as without AVX-512, VNNI or bf16 (default: CPU_CLASS, else native)")
    parser.add_argument("--results", type=Path, default=Path(time.strftime("bench-results-%Y%m%d-%H%M%S.md")),
                        help="where each part's figures are written as it ends (default: bench-results-<time>.md)")
    args = parser.parse_args(argv)
    args.model = not args.no_model  # backends' SciFact with the local model (an opt-in part: it runs in full)
    if args.only is None:
        args.only = list(PARTS if args.all or args.quick else DEFAULT_PARTS)
    if args.sizes is None:
        args.sizes = [QUICK_SIZE] if args.quick else ALL_SIZES if args.all else DEFAULT_SIZES
    if args.queries is None:
        args.queries = 50 if args.quick else 300
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, Callable[[], Section]]]:
    """(name, runner) of every part asked for, in the order they run."""
    quick = args.quick
    size = QUICK_SIZE if quick else FULL_SIZE
    steps: list[tuple[str, Callable[[], Section]]] = []
    if "search" in args.only:
        steps += [(f"search {n:,}", partial(run_search, n, args.queries)) for n in args.sizes]
    if "bm25" in args.only:
        steps.append(("bm25", partial(run_bm25, size, args.queries, BM25_REF_QUERIES[quick])))
    if "hnsw" in args.only:
        steps.append(("hnsw", partial(run_hnsw, size, HNSW_QUERIES[quick])))
    if "approx" in args.only:
        n = QUICK_SIZE if quick else APPROX_SIZE
        steps.append((f"approx {n:,}", partial(run_search, n, args.queries, IVF)))
    if "scifact" in args.only:
        steps.append(("scifact", partial(scifact_eval.run, args.scifact, quick=quick)))
    if "embed" in args.only:
        steps.append(("embed", partial(run_embed, args.scifact, quick)))
    if "auth" in args.only:
        steps.append(("auth", partial(run_auth, 500 if quick else 5000, 100 if quick else 10_000)))
    if "backends" in args.only:
        steps.append(("backends" if args.model else "backends, no model",
                      partial(run_backends, size, args.queries, args.scifact, quick, args.model)))
    if "load" in args.only:
        steps.append(("load", partial(run_load, quick)))
    if "metrics" in args.only:
        steps.append(("metrics", partial(run_metrics, METRICS_SIZE[quick], args.queries)))
    if "peers" in args.only:
        steps.append(("peers", partial(run_peers, size, args.queries)))
    if "pipeline" in args.only:
        steps.append(("pipeline", partial(run_pipeline, quick)))
    if "fairness" in args.only:
        steps.append(("fairness", partial(run_fairness, quick)))
    if "conversations" in args.only:
        steps.append(("conversations", partial(run_conversations, quick)))
    if "memory" in args.only:
        steps.append(("memory", partial(run_memory, quick)))
    if "replicas" in args.only:
        steps.append(("replicas", partial(run_replicas, quick)))
    if "access" in args.only:
        steps.append(("access", partial(run_access, size, args.queries, quick)))
    if "classes" in args.only:
        steps.append(("classes", partial(run_classes, size, args.queries, args.scifact, quick)))
    return steps


def announce(steps: list[tuple[str, Callable[[], Section]]], quick: bool) -> str:
    """The plan, with each part's minutes on 2 quiet cores (a quick run takes a minute or two in all)."""
    if quick:
        return f"Plan (quick): {', '.join(name for name, _ in steps)}."
    minutes = [MINUTES.get(name, 0) for name, _ in steps]
    parts = ", ".join(f"{name} ({m} min)" for (name, _), m in zip(steps, minutes))
    return f"Plan: {parts}; about {sum(minutes)} minutes on 2 quiet cores."


def header() -> str:
    """Where the figures were measured: they mean little without the machine and its load."""
    return (f"## ragmesh benchmarks ({time.strftime('%Y-%m-%d %H:%M')})\n\n{machine.describe()}\n\n"
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs usable; at the start: {machine_load()}.\n")


def report(text: str, results: Path) -> None:
    """To stdout and the results file at once: what is measured stays, however the run ends."""
    print(text, flush=True)
    with open(results, "a") as fh:
        fh.write(text + "\n")


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the retrievers and stacks a part starts):
    what a part costs whatever else shares the machine, where its wall time stretches with the load."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_all(steps: list[tuple[str, Callable[[], Section]]], results: Path) -> tuple[list[Section], list[str]]:
    """Runs every part, reporting each as it ends; one that fails is reported as such and the rest still run."""
    sections, errors = [], []
    for name, step in steps:
        log(f"{name}: start ({machine_load()})")
        started, cpu = time.perf_counter(), cpu_seconds()
        try:
            section = step()
        except Exception as exc:  # a failed part must not hide the figures the others measured
            traceback.print_exc(file=sys.stderr)
            errors.append(f"{name}: {exc!r}")
            section = Section(f"{name}: FAILED", notes=[f"{exc!r}"])
        section.notes.append(f"Ran in {time.perf_counter() - started:.0f} s ({cpu_seconds() - cpu:.0f} CPU s); "
                             f"at the end: {machine_load()}.")
        sections.append(section)
        report(render([section]), results)
    return sections, errors


def start_as_class(cpu_class: str, argv: list[str]) -> None:
    """Starts the bench again unless its variables already say `cpu_class`: each library picks its kernels
    when it loads, as this process has done, and the processes the bench starts inherit the variables. As
    avx2 it runs with avx2_environment(); as native with none of those variables (each library's own pick)."""
    forced = avx2_environment()
    wanted = os.environ | forced if cpu_class == "avx2" else {k: v for k, v in os.environ.items() if k not in forced}
    if wanted != dict(os.environ):
        log(f"starting again as the {cpu_class} class" + (f": {' '.join(f'{k}={v}' for k, v in forced.items())}"
                                                          if cpu_class == "avx2" else ""))
        os.execve(sys.executable, [sys.executable, "-m", "bench", *argv], wanted)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start_as_class(args.cpu_class, sys.argv[1:] if argv is None else argv)
    args.results.write_text("")
    log(f"figures go to {args.results} as each part ends")
    steps = plan(args)
    report(header(), args.results)
    report(announce(steps, args.quick), args.results)
    sections, errors = run_all(steps, args.results)
    missed = failed_targets(sections)
    report(f"Targets missed: {', '.join(missed) if missed else 'none'}.", args.results)
    if errors:
        report(f"Parts that failed to run: {'; '.join(errors)}.", args.results)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
