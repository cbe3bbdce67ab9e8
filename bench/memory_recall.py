"""Conversation memory recall: past turns written to one user's memory as the gateway writes them after each
answer (`Memory.after_turn`, the question with its search's vector), then later questions searched through the
"Conversation memory" source as the planner searches it (the user's own, the memory boosters, a specific
question's similarity threshold). Two figures at each k, for the later questions that ask a past question again
in other words and for those that match only something in a past answer:
  turn recall   the share whose past turn has a hit among the first k
  answer recall the share for which a hit among the first k holds the fact of the past answer they need (what
                the prompt then gets to answer from)
The set is tests/data/memory_recall.yaml; tests/integration/test_memory_recall.py holds the figures to a floor.

    .venv/bin/python -m bench.memory_recall    (an in-process stack of its own; about a minute)
"""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.search_bench import Section, Target
from ragmesh.identity import MEMBER, Identity
from ragmesh.models import EXTRACTIVE
from ragmesh.request_context import identity_var
from ragmesh.types import MEMORY_COLLECTION, SearchFilter
from services.gateway import boosts
from services.gateway.memory import Memory
from services.gateway.planner import SEARCH_DEPTH

RECALL_SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "memory_recall.yaml"
KS = (1, 3, 5)
KINDS = ("question", "answer")
# Answer recall at 5 hits (a specific question's context) that conversation memory must keep, by the later
# question's kind (one record a turn found by its question's vector: 1.00 and 0.93; each message embedded: 0.86, 1.00)
RECALL_FLOOR = {"question": 0.95, "answer": 0.9}
SPECIFIC_SIMILARITY = 0.7  # the planner's threshold for a specific question (router.route), the usual route
CONVERSATION = "remembered"  # the past turns' conversation; the later questions come from a new one


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


@dataclass(frozen=True)
class Probe:
    turn: int  # 1-based
    kind: str  # question | answer
    ask: str
    fact: str


@dataclass(frozen=True)
class Found:
    """Where a later question found its past turn: 1-based ranks, 0 when not in the hits."""

    probe: Probe
    turn_rank: int
    fact_rank: int


def load_set(path: Path = RECALL_SET) -> tuple[list[Turn], list[Probe]]:
    data = yaml.safe_load(path.read_text())
    return [Turn(**t) for t in data["turns"]], [Probe(**p) for p in data["probes"]]


async def remember(memory: Memory, tenant: str, user: str, turns: list[Turn]) -> dict[str, int]:
    """Writes the turns as the gateway does after each answer; message id -> turn."""
    identity_var.set(Identity(tenant, user, MEMBER, "service_token"))
    await asyncio.to_thread(memory.store.ensure_conversation, tenant, user, CONVERSATION)
    owner: dict[str, int] = {}
    for i, turn in enumerate(turns, start=1):
        question_id, answer_id = f"{CONVERSATION}-{i}-q", f"{CONVERSATION}-{i}-a"
        owner |= {question_id: i, answer_id: i}
        vector = (await memory.embedder.embed([turn.question], "QUERY"))[0]
        memory.after_turn(tenant, user, CONVERSATION, 1, EXTRACTIVE,
                          [(question_id, "user", turn.question), (answer_id, "assistant", turn.answer)], vector)
        await memory.idle()
    return owner


async def probe(memory: Memory, tenant: str, user: str, probes: list[Probe], owner: dict[str, int]) -> list[Found]:
    """Each later question searched in the user's memory as the planner searches the memory source."""
    identity_var.set(Identity(tenant, user, MEMBER, "service_token"))
    ranking = boosts.Ranking(SPECIFIC_SIMILARITY, "", now=dt.date.today().isoformat())
    found = []
    for p in probes:
        vector = (await memory.embedder.embed([p.ask], "QUERY"))[0]
        result = await memory.retriever.search(
            p.ask, [MEMORY_COLLECTION], SearchFilter(tenant=tenant, equals={"user_id": user}), SEARCH_DEPTH, vector,
            **boosts.options(MEMORY_COLLECTION, ranking))
        turns = [owner.get(h.chunk.doc_id, 0) for h in result.hits]
        texts = [h.parent_text or h.chunk.text for h in result.hits]
        found.append(Found(p, next((r for r, t in enumerate(turns, 1) if t == p.turn), 0),
                           next((r for r, t in enumerate(texts, 1) if p.fact in t), 0)))
    return found


def recall(found: list[Found], k: int, kind: str, by_fact: bool) -> float:
    ranks = [f.fact_rank if by_fact else f.turn_rank for f in found if f.probe.kind == kind]
    return sum(0 < r <= k for r in ranks) / len(ranks)


def table(found: list[Found]) -> str:
    rows = ["| later questions | figure | " + " | ".join(f"@{k}" for k in KS) + " |",
            "|---|---|" + "---:|" * len(KS)]
    for kind in KINDS:
        n = sum(f.probe.kind == kind for f in found)
        for by_fact, name in ((False, "turn recall"), (True, "answer recall")):
            rows.append(f"| {kind} ({n}) | {name} | " + " | ".join(f"{recall(found, k, kind, by_fact):.2f}" for k in KS)
                        + " |")
    missed = [f"  turn {f.probe.turn} ({f.probe.kind}) {f.probe.ask!r}: turn at {f.turn_rank or '-'}, "
              f"{f.probe.fact!r} at {f.fact_rank or '-'}" for f in found if not 0 < f.fact_rank <= KS[-1]]
    return "\n".join(rows + (["missed at @%d:" % KS[-1], *missed] if missed else []))


def measure() -> list[Found]:
    """The set written to and searched in a fresh in-process stack."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MODEL_CACHE_DIR", str(Path(sys.prefix) / "ragmesh-model-cache"))  # as the tests share it
    from tests.stack import Stack  # the test stack, in process: the gateway's own Memory and clients

    turns, probes = load_set()
    stack = Stack(Path(tempfile.mkdtemp(prefix="memory-recall-"))).start()
    try:
        memory = stack.app("gateway").memory
        owner = stack.call(remember(memory, "recall", "reader", turns), timeout=600)
        return stack.call(probe(memory, "recall", "reader", probes, owner), timeout=600)
    finally:
        stack.stop()


def run_memory(quick: bool = False) -> Section:
    """The `memory` part of `python -m bench` (`quick` changes nothing: the set is small)."""
    found = measure()
    section = Section(f"conversation memory recall: {len({f.probe.turn for f in found})} past turns found by "
                      f"{len(found)} later questions through the memory source")
    for kind in KINDS:
        n = sum(f.probe.kind == kind for f in found)
        for k in KS:
            section.add(f"answer recall@{k}, later questions matching a past {kind} ({n})",
                        recall(found, k, kind, True), "", Target(">=", RECALL_FLOOR[kind]) if k == KS[-1] else None,
                        f"turn recall@{k} {recall(found, k, kind, False):.2f}")
    section.notes += [f"missed at @{KS[-1]}: turn {f.probe.turn} ({f.probe.kind}) {f.probe.ask!r}: turn at "
                      f"{f.turn_rank or '-'}, {f.probe.fact!r} at {f.fact_rank or '-'}"
                      for f in found if not 0 < f.fact_rank <= KS[-1]]
    return section


def main() -> None:
    print(table(measure()))


if __name__ == "__main__":
    main()
