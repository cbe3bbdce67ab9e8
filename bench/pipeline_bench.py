"""`make bench`'s pipeline part (issue 15): what a user waits for before the answer starts, on the whole
stack as `make run` starts it (`python -m deploy.run`: four service processes, the offline extractive
generator at its default pace), with 100k chunks in the two collections a question searches by default.

The corpus: the demo corpus (real text, embedded by the local model when the stack starts) plus half
the synthetic chunks in each of `meeting_notes` and `factsheets` of the demo tenant, streamed through
Retriever/Upsert with their vectors (bench.search_bench's SyntheticCorpus: no model involved). Their
words are the search benchmark's Zipfian terms with the most frequent ranks renamed to the demo
corpus' own words, most frequent first, so a question's words have long posting lists as in a real
corpus; each chunk carries one of the demo's fund names and a date in 2023-2025, so the fund and date
filters the gateway reads from a question admit part of them.

One client (the standard library's http.client on a kept-alive connection; httpx, the figure printed beside
for comparison, adds its own milliseconds) asks over the SSE bridge, one question at a time, four per demo
question:
  NEW_QUERY  the question in a new conversation: its embedding, then one search per collection
  REUSE      the question reworded in that conversation: same filters and topic, the cached hits
  NO_RAG     "Summarize that" after two turns: answered from the conversation, no search
  DIRECT     "Thanks!": answered by the gateway, no generator
For each: the client's time to the `strategy` event and to the first `content` event; the waits the
strategy event reports (embed_ms, search_ms); the gateway's own share = time to the strategy event
- embed_ms - search_ms (HTTP, credential, history, routing, filters, scope cache, context, corrections,
and the event's way back); and, from the stored answer's timings, how long after the generator's first
token reached the gateway the first content went out (first_content_ms - first_token_ms).
"""
from __future__ import annotations

import http.client
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

from bench.load_bench import NO_NOTES, QUESTIONS, Stack
from bench.search_bench import Section, SyntheticCorpus, Target, log, percentiles
from ragmesh.clients import blocking_channel
from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc

COLLECTIONS = ("meeting_notes", "factsheets")  # the default data sources' collections
DEMO_CORPUS = Path(__file__).resolve().parents[1] / "demo" / "corpus"
ROUNDS = {False: 5, True: 1}  # rounds over the demo questions (after one warm-up round)
QUICK_QUESTIONS = 3
HTTPX_QUESTIONS = {False: 30, True: 5}
SIZE = {False: 100_000, True: 5_000}
DATES = np.arange(np.datetime64("2023-01-01"), np.datetime64("2026-01-01"))
KINDS = ("NEW_QUERY", "REUSE", "NO_RAG", "DIRECT")
# Issue 15's targets, as ratios within one run.
OWN_SHARE_TARGET = 0.20  # NEW_QUERY: the gateway's own share <= 20% of embed + search
REUSE_SLACK_MS = 2.0  # REUSE: strategy event <= its question embedding + 2 ms
FIRST_CONTENT_SLACK_MS = 20.0  # first content event <= 20 ms after the generator's first token


# ----------------------------------------------------------------------------- the corpus


def demo_words() -> list[str]:
    """The demo corpus' words, most frequent first."""
    counts: Counter[str] = Counter()
    for path in DEMO_CORPUS.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            for value in json.loads(line).values():
                counts.update(re.findall(r"[A-Za-z][A-Za-z'-]+", json.dumps(value)))
    return [w for w, _ in counts.most_common()]


def demo_funds() -> list[str]:
    return sorted({json.loads(line)["fund_name"] for path in DEMO_CORPUS.glob("*.jsonl")
                   for line in path.read_text().splitlines()})


def upserts(corpus: SyntheticCorpus, words: list[str], funds: list[str]) -> Iterator[retriever_pb2.UpsertRequest]:
    """The synthetic chunks, alternating between the two collections, with demo words for the commonest terms."""
    rename = {f"t{rank}": word for rank, word in enumerate(words)}
    for b, start in corpus.batch_sizes():
        for i, (text, vector) in enumerate(zip(corpus.texts(b, start), corpus.vectors(b, start).tolist()), start):
            doc = i // 4
            collection = COLLECTIONS[doc % len(COLLECTIONS)]
            chunk = common_pb2.Chunk(
                chunk_id=f"{collection}/syn{doc}#{i % 4}", doc_id=f"syn{doc}", collection=collection,
                text=" ".join(rename.get(t, t) for t in text.split(" ")), chunk_index=i % 4,
                metadata={"fund_name": funds[doc % len(funds)]}, date=str(DATES[doc % len(DATES)]))
            yield retriever_pb2.UpsertRequest(chunk=chunk, vector=vector)


def load_corpus(stack: Stack, n_chunks: int) -> float:
    """Streams the synthetic chunks into the stack's retriever; returns chunks/s."""
    stub = retriever_pb2_grpc.RetrieverStub(blocking_channel(stack.address("retriever"),
                                                             (("authorization", f"Bearer {stack.key}"),)))
    started = time.perf_counter()
    reply = stub.Upsert(upserts(SyntheticCorpus(n_chunks), demo_words(), demo_funds()), timeout=3600)
    if reply.chunks != n_chunks or reply.rejected:
        raise AssertionError(f"Upsert stored {reply.chunks} of {n_chunks} chunks: {list(reply.errors)[:3]}")
    return n_chunks / (time.perf_counter() - started)


# ----------------------------------------------------------------------------- asking


@dataclass
class Asked:
    """One question's timings (ms): the client's, and those the gateway reported."""

    kind: str
    strategy_ms: float
    content_ms: float
    embed_ms: float
    search_ms: float
    first_token_ms: float | None  # after generation started, in the gateway: the generator's first token
    first_content_ms: float | None  # and the first content it sent
    no_notes: bool

    @property
    def own_ms(self) -> float:
        return self.strategy_ms - self.embed_ms - self.search_ms


def kind_of(strategy: dict) -> str:
    if strategy["route"] in ("DIRECT", "NO_RAG"):
        return strategy["route"]
    return strategy["retrieval"].removeprefix("RAG_")


class SseClient:
    """A lean HTTP/1.1 client on one kept-alive connection (the standard library's http.client), so the
    times are the stack's: httpx spends 1.5-3.5 ms of its own Python on each streamed request here,
    more than REUSE's 2 ms target (run_pipeline prints that figure beside the others)."""

    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def stream(self, path: str, body: dict) -> Iterator[dict]:
        """The `data:` events of a Server-Sent Events reply, as they arrive."""
        self.conn.request("POST", path, json.dumps(body), self.headers)
        reply = self._reply()
        while line := reply.readline():
            if line.startswith(b"data:"):
                yield json.loads(line[5:])

    def get(self, path: str) -> dict:
        self.conn.request("GET", path, headers=self.headers)
        return json.loads(self._reply().read())

    def _reply(self) -> http.client.HTTPResponse:
        reply = self.conn.getresponse()
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {reply.read()[:300]!r}")
        return reply

    def close(self) -> None:
        self.conn.close()


def ask(client: SseClient, question: str, conversation_id: str = "") -> tuple[Asked, str]:
    """One question over the SSE bridge, read to its end; (its timings, the conversation id)."""
    started = time.perf_counter()
    strategy: dict = {}
    strategy_ms = content_ms = float("nan")
    answer: list[str] = []
    for event in client.stream("/api/chat/ask/stream", {"question": question, "conversation_id": conversation_id}):
        if "strategy" in event:
            strategy_ms, strategy = (time.perf_counter() - started) * 1000, event["strategy"]
        elif "content" in event:
            if not answer:
                content_ms = (time.perf_counter() - started) * 1000
            answer.append(event["content"])
        elif "error" in event:
            raise RuntimeError(f"{question!r}: {event['error']}")
    conversation_id = strategy["conversation_id"]
    timings = client.get(f"/api/conversations/{conversation_id}")["messages"][-1]["timings"]
    text = "".join(answer)
    return Asked(kind_of(strategy), strategy_ms, content_ms, strategy["embed_ms"], strategy["search_ms"],
                 timings.get("first_token_ms"), timings.get("first_content_ms"),
                 any(text.startswith(n) for n in NO_NOTES)), conversation_id


def reuse_with_httpx(stack: Stack, question: str, n: int) -> list[float]:
    """REUSE's strategy event - its embedding (ms), asked with httpx: the client's own cost, for comparison."""
    with httpx.Client(base_url=stack.http_url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=120) as client:
        conversation = client.post("/api/chat/ask", json={"question": question}).json()["conversation_id"]
        waits = []
        for _ in range(n):
            started = time.perf_counter()
            with client.stream("POST", "/api/chat/ask/stream",
                               json={"question": f"Remind me: {question}", "conversation_id": conversation}) as reply:
                for line in reply.iter_lines():
                    if line.startswith("data:") and "strategy" in (event := json.loads(line[5:])):
                        strategy_ms, strategy = (time.perf_counter() - started) * 1000, event["strategy"]
            if strategy["retrieval"] == "RAG_REUSE":
                waits.append(strategy_ms - strategy["embed_ms"])
        return waits


def one_round(client: SseClient, questions: tuple[str, ...]) -> Iterator[tuple[str, Asked]]:
    """(the kind asked for, what happened) for the four questions of each demo question."""
    for question in questions:
        first, conversation = ask(client, question)
        yield "NEW_QUERY", first
        for expected, follow_up in (("REUSE", f"Remind me: {question}"), ("NO_RAG", "Summarize that"),
                                    ("DIRECT", "Thanks!")):
            yield expected, ask(client, follow_up, conversation)[0]


# ----------------------------------------------------------------------------- report


def p50_p99(values: list[float]) -> str:
    return "{:.1f} / {:.1f}".format(*percentiles(values)) if values else "n/a"


def report(section: Section, asked: list[tuple[str, Asked]]) -> None:
    by_kind = {k: [a for _, a in asked if a.kind == k] for k in KINDS}
    for kind in KINDS:
        rows = by_kind[kind]
        if not rows:
            section.add(f"{kind}: questions", 0, note="none took this route")
            continue
        waited = [a.embed_ms + a.search_ms for a in rows]
        section.add(f"{kind}: to the strategy event p50 / p99", p50_p99([a.strategy_ms for a in rows]), "ms",
                    note=f"{len(rows)} questions; embed + search the gateway waited on: p50 / p99 {p50_p99(waited)} ms")
        section.add(f"{kind}: to the first content event p50 / p99", p50_p99([a.content_ms for a in rows]), "ms")
        section.add(f"{kind}: gateway's own share p50 / p99", p50_p99([a.own_ms for a in rows]), "ms",
                    note="strategy event - embed_ms - search_ms")
    new, reuse = by_kind["NEW_QUERY"], by_kind["REUSE"]
    if new:
        own, waited = percentiles([a.own_ms for a in new])[0], percentiles([a.embed_ms + a.search_ms for a in new])[0]
        section.add("NEW_QUERY: own share / (embed + search), p50s", own / waited, "", Target("<=", OWN_SHARE_TARGET),
                    f"{own:.1f} ms of {waited:.1f} ms")
    if reuse:
        section.add("REUSE: strategy event - its question embedding, p50", percentiles(
            [a.strategy_ms - a.embed_ms for a in reuse])[0], "ms", Target("<=", REUSE_SLACK_MS))
    held = [a.first_content_ms - a.first_token_ms for a in new + reuse
            if a.first_token_ms is not None and a.first_content_ms is not None]
    if held:
        p50, p99 = percentiles(held)
        section.add("first content event after the generator's first token, p50", p50, "ms",
                    Target("<=", FIRST_CONTENT_SLACK_MS), f"p99 {p99:.1f} ms; NEW_QUERY and REUSE, timed in the gateway")
    mismatched = Counter(f"{want} -> {a.kind}" for want, a in asked if want != a.kind)
    no_notes = sum(a.no_notes for _, a in asked if a.kind in ("NEW_QUERY", "REUSE"))
    section.notes.append(f"Routes asked for -> taken, where they differ: {dict(mismatched) or 'none'}; "
                         f"answers saying there are no notes: {no_notes}.")


def run_pipeline(quick: bool) -> Section:
    size = SIZE[quick]
    questions = QUESTIONS[:QUICK_QUESTIONS] if quick else QUESTIONS
    section = Section(f"Question to first token: the whole stack (deploy.run), {size:,} synthetic chunks + the demo "
                      f"corpus in {' and '.join(COLLECTIONS)}, one client")
    log("pipeline: starting the stack (deploy.run)")
    with Stack() as stack:
        log(f"pipeline: loading {size:,} synthetic chunks through Upsert")
        section.add("load through Upsert", load_corpus(stack, size), "chunks/s")
        client = SseClient(stack.http_url, stack.key)
        try:
            log("pipeline: warm-up round")
            list(one_round(client, questions))
            log(f"pipeline: {ROUNDS[quick]} round(s) of {len(questions) * len(KINDS)} questions")
            asked = [row for _ in range(ROUNDS[quick]) for row in one_round(client, questions)]
        finally:
            client.close()
        with_httpx = reuse_with_httpx(stack, questions[0], HTTPX_QUESTIONS[quick])
    report(section, asked)
    section.add("REUSE: strategy event - its question embedding, p50, asked with httpx", percentiles(with_httpx)[0],
                "ms", note=f"{len(with_httpx)} questions; the same measure with httpx as the client: its own cost")
    section.notes.append("Times are the client's from sending the question; the gateway's own share counts "
                         "everything but the embedding and the searches it waited on (the bridge, the "
                         "credential, history, routing, filters, scope cache, context, corrections).")
    return section
