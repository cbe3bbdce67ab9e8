"""`make bench`'s access part (issue 33): what access lists cost a hybrid search, on the memory
engine and on the Milvus backend (milvus-lite), in process through the same SearchEngine.

The corpus is the search benchmark's (bench.search_bench: same seeds, four chunks a document),
each document with an access list drawn from 1,000 users and 50 groups: an owner, up to three
more users, up to three groups (most documents one or two), and one in twenty the whole tenant's.
Two callers are then made from the same lists: each a user whose groups are added one by one
until what it may read is nearest 10% (narrow) and 90% (wide) of the chunks. Every query is
searched by each caller with its readers and, on the same corpus, with readers None (no access
condition), one after the other, alternating which goes first, so a busy machine weighs on
both alike; the ratio of the p50s is the figure (target <= 1.2 on the memory engine). Each
answer is checked: every hit readable by the caller, and the admitted count (candidate_count)
exactly the chunks it may read.
"""
from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.backends_bench import LITE, TENANT, documents, milvus
from bench.search_bench import (
    CHUNKS_PER_DOC, COLLECTION, TOP_K, Section, SyntheticCorpus, Target, cpu_model, log, percentiles,
)
from ragmesh.access import ACCESS_KEY, TENANT as TENANT_TOKEN, Access, admits
from ragmesh.types import SearchFilter
from services.retriever.backend import SearchBackend
from services.retriever.index import IndexRegistry
from services.retriever.search import SearchEngine, SearchQuery

SEED = 33
USERS = 1_000
GROUPS = 50
TENANT_WIDE = 0.05  # documents readable by the whole tenant
GROUPS_PER_DOC = (0.05, 0.55, 0.30, 0.10)  # share of documents shared with 0, 1, 2, 3 groups
SHARES = {"narrow": 0.10, "wide": 0.90}  # what each caller may read, about
TARGET = 1.2  # the bound on p50 with access lists / p50 without, memory engine
# milvus-lite loads and scans in Python (100k chunks took 11 minutes to load in the backends part; at 20k a
# filtered count takes seconds): its half runs on the corpus' first LITE_CHUNKS chunks and LITE_QUERIES queries.
LITE_CHUNKS = 10_000
LITE_QUERIES = 16  # even: as many with the access condition first as without
QUICK_LITE_CHUNKS = 2_000


@dataclass
class Population:
    """Every document's encoded access (by document number) and the callers made from them."""

    values: list[str]
    callers: dict[str, frozenset[str]]

    @staticmethod
    def drawn(n_docs: int, seed: int = SEED) -> "Population":
        rng = np.random.default_rng(seed)
        users = [f"u{i}" for i in range(USERS)]
        owners = rng.integers(USERS, size=n_docs)
        named = rng.integers(0, 4, size=n_docs)
        n_groups = rng.choice(len(GROUPS_PER_DOC), size=n_docs, p=GROUPS_PER_DOC)
        tenant = rng.random(n_docs) < TENANT_WIDE
        member = np.zeros((n_docs, GROUPS), dtype=bool)  # document x group it is shared with
        values = []
        for d in range(n_docs):
            groups = rng.choice(GROUPS, size=n_groups[d], replace=False)
            member[d, groups] = True
            values.append(Access.of(users[owners[d]], users=[users[u] for u in rng.integers(USERS, size=named[d])],
                                    groups=[f"g{g}" for g in groups], tenant=bool(tenant[d])).encode())
        callers = {}
        for i, (label, share) in enumerate(SHARES.items()):
            user = f"user:{users[USERS - 1 - i]}"  # users no document names as owner often: few of their own
            base = tenant | np.array([user in v.split() for v in values])
            chosen = _groups_for(member, base, share)
            callers[label] = frozenset({TENANT_TOKEN, user, *(f"group:g{g}" for g in chosen)})
        return Population(values, callers)

    def value(self, doc_id: str) -> str:
        return self.values[int(doc_id[1:])]

    def readable(self, readers: frozenset[str], n_docs: int) -> int:
        """Of the first n_docs documents, those `readers` may read."""
        return sum(admits(v, readers) for v in self.values[:n_docs])


def _groups_for(member: np.ndarray, base: np.ndarray, share: float) -> list[int]:
    """Groups, taken in order, whose documents (with `base`'s) come nearest `share` of all."""
    readable, chosen, best = base.copy(), [], (abs(base.mean() - share), 0)
    for g in range(member.shape[1]):
        readable |= member[:, g]
        chosen.append(g)
        best = min(best, (abs(readable.mean() - share), len(chosen)))
        if readable.mean() >= share:
            break
    return chosen[: best[1]]


def load(backend: SearchBackend, corpus: SyntheticCorpus, population: Population) -> float:
    """Seconds of backend.apply over the corpus, every chunk carrying its document's access."""
    seconds = 0.0
    for b, start in corpus.batch_sizes():
        changes = documents(corpus, b, start)
        for (_, doc_id), chunks in changes.items():
            for s in chunks:
                s.chunk.metadata[ACCESS_KEY] = population.value(doc_id)
        started = time.perf_counter()
        backend.apply(COLLECTION, list(changes.items()))
        seconds += time.perf_counter() - started
    return seconds


async def _no_embedder(texts: list[str], task: str) -> np.ndarray:
    raise AssertionError("every benchmark query carries its vector")


async def timed_pairs(backend: SearchBackend, queries: list[tuple[str, np.ndarray]], readers: frozenset[str],
                      population: Population, expected: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query with the readers and with none, in turn (alternating which goes first): their
    wall times. Raises when a hit is not readable or the admitted count is not what the readers read."""
    engine = SearchEngine(backend, _no_embedder)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i, (text, vector) in enumerate(queries):
        for with_access in ((True, False) if i % 2 == 0 else (False, True)):
            f = SearchFilter(tenant=TENANT, readers=readers if with_access else None)
            started = time.perf_counter()
            outcome = await engine.search(SearchQuery(query=text, collections=[COLLECTION], top_k=TOP_K,
                                                      vector=vector, filter=f))
            times[with_access].append((time.perf_counter() - started) * 1000)
            if with_access:
                unreadable = [h.chunk.doc_id for h in outcome.hits if not admits(population.value(h.chunk.doc_id),
                                                                                  readers)]
                if unreadable or outcome.candidate_count != expected:
                    raise NotEnforced(f"hits the readers may not read: {unreadable[:3]}; admitted "
                                      f"{outcome.candidate_count:,}, the readers read {expected:,}")
    return np.array(times[True]), np.array(times[False])


class NotEnforced(AssertionError):
    """A backend answered with what the readers may not read."""


def measure(section: Section, name: str, backend: SearchBackend, corpus: SyntheticCorpus, population: Population,
            queries: list[tuple[str, np.ndarray]], target: Target | None) -> None:
    n_docs = -(-corpus.n_chunks // CHUNKS_PER_DOC)
    for label, readers in population.callers.items():
        readable = population.readable(readers, n_docs)
        share, expected = readable / n_docs, readable * CHUNKS_PER_DOC  # sizes are whole documents
        caller = (f"{label} caller ({share:.1%} of the chunks: {sum(r.startswith('group:') for r in readers)} "
                  f"groups)")
        try:
            with_access, without = asyncio.run(timed_pairs(backend, queries, readers, population, expected))
        except NotEnforced as exc:
            section.add(f"{name}, {caller}", "not enforced", note=f"{exc}")
            continue
        (p50, p99), (p50_none, p99_none) = percentiles(with_access), percentiles(without)
        section.add(f"{name}, {caller}: p50 / p99 with access lists", f"{p50:.1f} / {p99:.1f}", "ms",
                    note=f"{len(queries)} hybrid top-{TOP_K} searches, vector given")
        section.add(f"{name}, {caller}: p50 / p99 without (readers None)", f"{p50_none:.1f} / {p99_none:.1f}", "ms",
                    note="the same queries on the same corpus, each beside its search with access lists")
        section.add(f"{name}, {caller}: p50 with / without", p50 / p50_none, "", target)


def run_access(n_chunks: int, n_queries: int, quick: bool) -> Section:
    section = Section(f"Access lists: hybrid search with and without, {n_chunks:,} chunks, {USERS:,} users, "
                      f"{GROUPS} groups")
    corpus = SyntheticCorpus(n_chunks)
    population = Population.drawn(-(-n_chunks // CHUNKS_PER_DOC))
    queries = corpus.queries(n_queries)
    memory = IndexRegistry(384)
    log(f"access: loading {n_chunks:,} chunks with access lists into memory")
    seconds = load(memory, corpus, population)
    distinct = len(memory.get(COLLECTION, TENANT).columns.vocab[ACCESS_KEY])
    section.add("load rate, memory", n_chunks / seconds, "chunks/s", note=f"{distinct:,} distinct access lists")
    log("access: searching memory")
    measure(section, "memory", memory, corpus, population, queries, None if quick else Target("<=", TARGET))
    del memory
    lite_n = min(n_chunks, QUICK_LITE_CHUNKS if quick else LITE_CHUNKS)
    with tempfile.TemporaryDirectory(prefix="ragmesh-access-") as tmp:
        lite = milvus(Path(tmp), 384, "access_")
        lite.connect()
        log(f"access: loading {lite_n:,} chunks with access lists into {LITE}")
        lite_corpus = SyntheticCorpus(lite_n)
        seconds = load(lite, lite_corpus, population)
        lite.seal(COLLECTION)
        section.add(f"load rate, {LITE}", lite_n / seconds, "chunks/s", note=f"{lite_n:,} chunks")
        log(f"access: searching {LITE}")
        try:
            measure(section, f"{LITE} ({lite_n:,} chunks)", lite, lite_corpus, population,
                    queries[: min(n_queries, LITE_QUERIES)], None)
        finally:
            lite.close(Path(), 0)
    section.notes.append(
        f"CPU: {cpu_model()}. The callers' readers: `tenant`, their user and their groups; a document's list: "
        f"its owner, 0-3 more users, 0-3 groups, the whole tenant for {TENANT_WIDE:.0%} of them. The memory "
        f"engine's figures are at {n_chunks:,} chunks; {LITE}'s at the corpus' first {lite_n:,} chunks "
        f"({min(n_queries, LITE_QUERIES)} queries: it loads and scans in Python), the same access lists and "
        f"callers. {LITE} is a Python re-implementation of the Milvus server: its ratio says what the filter "
        f"costs there, not how fast a Milvus server is.")
    return section
