"""The stack profile's bookkeeping (bench/profile_stack.py): which stage a py-spy sample belongs to, and how
each thread's measured CPU time is shared among its samples' stages."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.profile_stack import LOOP, NATIVE, attribute, read_samples, stage_of

RUN = "main (ragmesh/serving.py:530);Runner.run (asyncio/runners.py:118)"
GUARDED = RUN + ";BrowserGuard.__call__ (services/gateway/api/auth.py:113);APIRoute.handle (fastapi/routing.py:1)"


def test_the_innermost_frame_of_ours_names_the_stage() -> None:
    sse = GUARDED + ";ask_stream.<locals>.sse (services/gateway/api/chat.py:43);dumps (json/__init__.py:231)"
    saved = sse.replace("dumps (json", "AskPipeline._answer (services/gateway/pipeline.py:291);"
                                       "SqliteStore.add_message (ragmesh/store/sqlite.py:422);x (json")
    assert stage_of("gateway", sse) == "SSE", "under the HTTP guards, the route's own frame decides"
    assert stage_of("gateway", saved) == "history writes"
    assert stage_of("gateway", GUARDED) == "HTTP edge (routing, body parsing, guards)"


def test_work_done_on_behalf_of_another_stage_is_that_stages() -> None:
    memory_store = RUN + ";Memory._remember (services/gateway/memory.py:120);SqliteStore.x (ragmesh/store/sqlite.py:1)"
    key_read = GUARDED + (";Identifier.identify (services/gateway/api/auth.py:56);"
                          "SqliteStore.api_key (ragmesh/store/sqlite.py:535)")
    assert stage_of("gateway", memory_store) == "memory writes (conversation memory)"
    assert stage_of("gateway", key_read) == "authentication"
    torch = "EmbedderServicer.Embed (x);SentenceTransformer.encode (sentence_transformers/model.py:895)"
    assert stage_of("embedder", torch) == "memory writes (conversation memory)", "DOCUMENT embeddings: memory"
    assert stage_of("embedder", "EmbedderServicer.Embed (services/embedder/servicer.py:25)") == "question embedding"


def test_a_sample_with_no_frame_of_ours_is_the_event_loops() -> None:
    assert stage_of("retriever", RUN) == LOOP
    assert stage_of("generator", RUN + ";Handle._run (asyncio/events.py:84)") == LOOP


def test_each_threads_cpu_is_shared_by_its_samples_and_the_rest_is_named(tmp_path: Path) -> None:
    raw = tmp_path / "gateway.txt"
    sse = RUN + ";ask_stream.<locals>.sse (services/gateway/api/chat.py:43)"
    raw.write_text(f"thread (11);{sse} 3\nthread (11);{RUN} 1\nnot a sample\n")
    samples = read_samples(raw)
    assert samples == {11: Counter({sse: 3, RUN: 1})}
    before = {11: ("python", 1.0), 12: ("event_engine", 0.5), 13: ("python", 2.0)}
    after = {11: ("python", 1.4), 12: ("event_engine", 0.6), 13: ("python", 2.0), 14: ("python", 0.05)}
    out = attribute("gateway", before, after, samples, process_ms=600.0)
    assert round(out["SSE"]) == 300 and round(out[LOOP]) == 100, "400 ms shared 3:1 by the samples"
    assert round(out[f"{NATIVE}: gRPC core"]) == 100
    assert round(out[f"{NATIVE}: other"]) == 50, "a new thread without samples counts from zero"
    assert round(out["threads that ended"]) == 50, "the process's figure minus its live threads'"
