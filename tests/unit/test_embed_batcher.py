"""MicroBatcher against a fake backend that records its calls: concurrent requests share calls,
every caller gets its own rows (the fake's vector encodes the text, so a mix-up shows), tasks never
mix, a request larger than a batch runs alone, abandoned callers are not embedded, a failure stays in
its batch, and a full queue refuses fast."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from ragmesh.errors import ResourceExhausted
from services.embedder import batcher as batcher_module
from services.embedder.batcher import ALONE_SLICE, DeadlineExceeded, MicroBatcher

TASK_CODE = {"QUERY": 1.0, "DOCUMENT": 2.0}


def vector(text: str, task: str) -> list[float]:
    """What the fake returns for a text "<anything>-<number>": the number and the task."""
    return [float(text.rsplit("-", 1)[1]), TASK_CODE[task]]


class FakeBackend:
    model_name = "fake"
    dimensions = 2
    max_batch = 10_000

    def __init__(self, delay_s: float = 0.0, gated: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.delay_s = delay_s
        self.started = threading.Event()  # set when a call begins
        self.gate = threading.Event()  # a gated backend holds every call until the test opens it
        if not gated:
            self.gate.set()

    def warm_up(self) -> None:
        pass

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        self.calls.append((task, list(texts)))
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        time.sleep(self.delay_s)
        if any(t.startswith("boom") for t in texts):
            raise RuntimeError("model exploded")
        return np.array([vector(t, task) for t in texts], dtype=np.float32)


def run(batcher: MicroBatcher, scenario: Callable[[], Awaitable[None]]) -> None:
    async def go() -> None:
        try:
            await scenario()
        finally:
            await batcher.close()

    asyncio.run(go())


async def running(backend: FakeBackend) -> None:
    """Returns once the backend is inside a call (it is blocked there while gated)."""
    assert await asyncio.to_thread(backend.started.wait, 5)


def test_concurrent_single_texts_share_few_backend_calls_and_each_caller_gets_its_own_row() -> None:
    backend = FakeBackend(delay_s=0.02)
    batcher = MicroBatcher(backend, window_ms=5, max_batch=64)

    async def scenario() -> None:
        texts = [f"q-{i}" for i in range(50)]
        results = await asyncio.gather(*(batcher.embed([t], "QUERY") for t in texts))
        for text, rows in zip(texts, results):
            assert rows.tolist() == [vector(text, "QUERY")]
        assert batcher.batches == len(backend.calls) <= 3, backend.calls
        assert sorted(t for _, call in backend.calls for t in call) == sorted(texts), "each text embedded once"

    run(batcher, scenario)


def test_tasks_are_never_mixed_in_one_call() -> None:
    backend = FakeBackend(delay_s=0.01)
    batcher = MicroBatcher(backend, window_ms=5, max_batch=64)

    async def scenario() -> None:
        jobs = [(f"{task}-{i}", task) for i in range(20) for task in ("QUERY", "DOCUMENT")]
        results = await asyncio.gather(*(batcher.embed([text], task) for text, task in jobs))
        for (text, task), rows in zip(jobs, results):
            assert rows.tolist() == [vector(text, task)]
        for task, call in backend.calls:
            assert all(text.startswith(task) for text in call), (task, call)
        assert len(backend.calls) <= 4

    run(batcher, scenario)


def test_a_request_larger_than_a_batch_runs_alone_with_its_rows_in_order() -> None:
    backend = FakeBackend(delay_s=0.01)
    batcher = MicroBatcher(backend, window_ms=5, max_batch=8)

    async def scenario() -> None:
        big = [f"doc-{i}" for i in range(30)]
        small = [[f"small-{100 + i}"] for i in range(5)]
        results = await asyncio.gather(batcher.embed(small[0], "DOCUMENT"), batcher.embed(big, "DOCUMENT"),
                                       *(batcher.embed(s, "DOCUMENT") for s in small[1:]))
        assert results[1].tolist() == [vector(t, "DOCUMENT") for t in big]
        for texts, rows in zip(small, results[:1] + results[2:]):
            assert rows.tolist() == [vector(texts[0], "DOCUMENT")]
        # Oldest first: the big one neither joins a batch that has begun nor lets later ones jump it.
        assert [len(call) for _, call in backend.calls] == [1, 30, 4]

    run(batcher, scenario)


def test_a_cancelled_waiter_is_not_embedded() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0)

    async def scenario() -> None:
        first = asyncio.create_task(batcher.embed(["a-1"], "QUERY"))
        await running(backend)
        gone = asyncio.create_task(batcher.embed(["gone-2"], "QUERY"))
        kept = asyncio.create_task(batcher.embed(["kept-3"], "QUERY"))
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0)
        backend.gate.set()
        assert (await first).tolist() == [vector("a-1", "QUERY")]
        assert (await kept).tolist() == [vector("kept-3", "QUERY")]
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert backend.calls == [("QUERY", ["a-1"]), ("QUERY", ["kept-3"])]
        assert batcher.dropped == 1

    run(batcher, scenario)


def test_a_waiter_past_its_deadline_is_not_embedded() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0)

    async def scenario() -> None:
        first = asyncio.create_task(batcher.embed(["a-1"], "QUERY"))
        await running(backend)
        late = asyncio.create_task(batcher.embed(["late-2"], "QUERY", deadline=time.monotonic() + 0.02))
        await asyncio.sleep(0.05)
        backend.gate.set()
        await first
        with pytest.raises(DeadlineExceeded):
            await late
        assert backend.calls == [("QUERY", ["a-1"])]
        assert batcher.dropped == 1

    run(batcher, scenario)


def test_a_failing_batch_fails_its_callers_only_and_the_next_batch_works() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0)

    async def scenario() -> None:
        first = asyncio.create_task(batcher.embed(["a-1"], "DOCUMENT"))
        await running(backend)
        doomed = [asyncio.create_task(batcher.embed([t], "QUERY")) for t in ("boom-2", "fine-3")]
        other = asyncio.create_task(batcher.embed(["other-4"], "DOCUMENT"))
        await asyncio.sleep(0.01)
        backend.gate.set()
        assert (await first).tolist() == [vector("a-1", "DOCUMENT")]
        errors = await asyncio.gather(*doomed, return_exceptions=True)
        assert all(isinstance(e, RuntimeError) and str(e) == "model exploded" for e in errors)
        assert errors[0] is errors[1], "the batch's callers get the backend's exception"
        assert (await other).tolist() == [vector("other-4", "DOCUMENT")]
        assert (await batcher.embed(["after-5"], "QUERY")).tolist() == [vector("after-5", "QUERY")]
        assert ("QUERY", ["boom-2", "fine-3"]) in backend.calls

    run(batcher, scenario)


def test_beyond_its_share_of_the_queue_a_tenants_new_requests_fail_fast() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, max_queue=8)

    async def scenario() -> None:
        first = asyncio.create_task(batcher.embed(["a-1"], "QUERY", tenant="rival"))  # running: not waiting
        await running(backend)
        waiting = [asyncio.create_task(batcher.embed([f"w-{i}", f"w-{i + 10}"], "QUERY", tenant="rival"))
                   for i in (2, 3)]
        await asyncio.sleep(0.01)
        with pytest.raises(ResourceExhausted, match="embedder: queue full for this tenant") as refused:
            await batcher.embed(["over-9"], "DOCUMENT", tenant="rival")  # half the queue of 8 is its share
        assert refused.value.retry_after_s == 1.0 and "EMBED_MAX_QUEUE" in str(refused.value)
        other = asyncio.create_task(batcher.embed(["other-5", "other-6"], "DOCUMENT", tenant="demo"))
        await asyncio.sleep(0.01)
        assert batcher.waiting == 6
        with pytest.raises(ResourceExhausted):  # half of the 4 places the rival leaves: 2, taken
            await batcher.embed(["over-7"], "DOCUMENT", tenant="demo")
        backend.gate.set()
        await first
        for i, task in zip((2, 3), waiting):
            assert (await task).tolist() == [vector(f"w-{i}", "QUERY"), vector(f"w-{i + 10}", "QUERY")]
        assert len(await other) == 2
        assert (await batcher.embed(["over-9"], "DOCUMENT", tenant="rival")).tolist() == [vector("over-9", "DOCUMENT")]

    run(batcher, scenario)


def test_a_lone_request_at_an_idle_model_does_not_wait_out_the_window() -> None:
    """Batching pays while requests keep coming; one question at a quiet embedder runs at once."""
    backend = FakeBackend()
    batcher = MicroBatcher(backend, window_ms=60_000, max_batch=64)

    async def scenario() -> None:
        for i in range(3):  # idle before each one
            rows = await asyncio.wait_for(batcher.embed([f"q-{i}"], "QUERY"), 5)
            assert rows.tolist() == [vector(f"q-{i}", "QUERY")]
            await asyncio.sleep(0.01)

    run(batcher, scenario)


# ----------------------------------------------------------------------------- fairness between tenants
# Every request below is queued while the gated backend holds a first call, then the gate opens: the
# order of the backend's calls is the scheduler's decision alone, whatever the machine's speed.


@pytest.fixture(autouse=True)
def tenants_stay_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant served once counts as about for the whole test, however slow the machine."""
    monkeypatch.setattr(batcher_module, "ACTIVE_S", 3600.0)


def text(name: str, i: int, chars: int = 8) -> str:
    """A text of exactly `chars` characters that the fake embeds as `i`."""
    tail = f"-{i}"
    return name[: chars - len(tail)].ljust(chars - len(tail), "x") + tail


async def queued(batcher: MicroBatcher, *requests: tuple[list[str], str, str]) -> list[asyncio.Task]:
    """Starts each (texts, task, tenant) request in order and returns once all of them wait."""
    tasks = []
    for texts, task, tenant in requests:
        tasks.append(asyncio.create_task(batcher.embed(texts, task, tenant=tenant)))
        await asyncio.sleep(0)  # each arrives after the one before
    return tasks


def test_another_tenants_request_runs_before_the_rest_of_a_big_requests_slices() -> None:
    """Alone, the rival's call runs ALONE_SLICE (2) times two texts a slice; once another tenant is
    about, two a slice."""
    assert ALONE_SLICE == 2
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=16)  # two 8-character texts a call

    async def scenario() -> None:
        big = [text("big", i) for i in range(10)]
        attacker = asyncio.create_task(batcher.embed(big, "DOCUMENT", tenant="rival"))
        await running(backend)  # its first slice holds the model
        victim, = await queued(batcher, ([text("upload", 100)], "DOCUMENT", "demo"))
        backend.gate.set()
        assert (await victim).tolist() == [vector(text("upload", 100), "DOCUMENT")]
        assert (await attacker).tolist() == [vector(t, "DOCUMENT") for t in big], "rows in order across slices"
        assert [call for _, call in backend.calls] == [big[0:4], [text("upload", 100)], big[4:6], big[6:8], big[8:10]]

    run(batcher, scenario)


def test_a_slice_is_never_merged_into_another_tenants_batch() -> None:
    """The victim's batch takes other tenants' requests only whole and within the slice: the rest of a
    big request waits for its own tenant's turn instead of making the victim's call long."""
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=16)

    async def scenario() -> None:
        blocker = asyncio.create_task(batcher.embed([text("hold", 0)], "QUERY", tenant="other"))
        await running(backend)
        tasks = await queued(batcher, ([text("big", i) for i in range(1, 7)], "QUERY", "rival"),
                             ([text("ask", 50)], "QUERY", "demo"))
        backend.gate.set()
        await asyncio.gather(blocker, *tasks)
        calls = [call for _, call in backend.calls]
        assert calls[1] == [text("big", 1), text("big", 2)], "the older request's tenant goes first"
        assert calls[2] == [text("ask", 50)], "then the victim, alone: no slice rides with it"

    run(batcher, scenario)


def test_one_tenants_many_small_requests_still_share_full_batches() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, max_batch=64, slice_chars=4096)

    async def scenario() -> None:
        blocker = asyncio.create_task(batcher.embed(["hold-0"], "QUERY", tenant="acme"))
        await running(backend)
        questions = [f"What was the net exposure of fund {i} in Q3?-{i}" for i in range(1, 129)]
        tasks = await queued(batcher, *(([q], "QUERY", "acme") for q in questions))
        backend.gate.set()
        results = await asyncio.gather(blocker, *tasks)
        for q, rows in zip(questions, results[1:]):
            assert rows.tolist() == [vector(q, "QUERY")]
        assert [len(call) for _, call in backend.calls] == [1, 64, 64]

    run(batcher, scenario)


def test_many_tenants_questions_share_a_call_taking_tenants_in_turn() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, max_batch=4, slice_chars=4096)

    async def scenario() -> None:
        blocker = asyncio.create_task(batcher.embed(["hold-0"], "QUERY", tenant="z"))
        await running(backend)
        tasks = await queued(batcher, *(([f"{tenant}-{i}"], "QUERY", tenant)
                                        for tenant, i in (("a", 1), ("a", 2), ("a", 3), ("b", 4), ("c", 5), ("c", 6))))
        backend.gate.set()
        await asyncio.gather(blocker, *tasks)
        # One of each tenant a round: a's third question waits for the next call, not b's or c's.
        assert [call for _, call in backend.calls][1:] == [["a-1", "b-4", "c-5", "a-2"], ["c-6", "a-3"]]

    run(batcher, scenario)


def test_three_tenants_with_big_requests_take_turns_slice_by_slice() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8)  # one 8-character text a call

    async def scenario() -> None:
        blocker = asyncio.create_task(batcher.embed([text("hold", 0)], "DOCUMENT", tenant="z"))
        await running(backend)
        bigs = {tenant: [text(tenant, 10 * n + i) for i in range(3)] for n, tenant in enumerate(("a", "b", "c"), 1)}
        tasks = await queued(batcher, *((texts, "DOCUMENT", tenant) for tenant, texts in bigs.items()))
        late, = await queued(batcher, ([text("d", 40)], "DOCUMENT", "d"))  # a newcomer gets the next turn
        backend.gate.set()
        results = await asyncio.gather(*tasks, late, blocker)
        for (tenant, texts), rows in zip(bigs.items(), results):
            assert rows.tolist() == [vector(t, "DOCUMENT") for t in texts]
        order = [call[0][0] for _, call in backend.calls[1:]]
        assert order == ["a", "b", "c", "d", "a", "b", "c", "a", "b", "c"]

    run(batcher, scenario)


def test_a_big_request_cancelled_between_slices_runs_no_more_and_frees_the_queue() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8, max_queue=10)

    async def scenario() -> None:
        big = asyncio.create_task(batcher.embed([text("big", i) for i in range(10)], "DOCUMENT", tenant="rival"))
        await running(backend)
        big.cancel()
        await asyncio.sleep(0)
        # Its untaken texts no longer count: 10 new ones fit the queue of 10.
        after = asyncio.create_task(batcher.embed([text("new", 20 + i) for i in range(10)], "DOCUMENT", tenant="demo"))
        await asyncio.sleep(0)
        backend.gate.set()
        assert len(await after) == 10
        with pytest.raises(asyncio.CancelledError):
            await big
        assert [call[0] for _, call in backend.calls[:2]] == [text("big", 0), text("new", 20)]
        assert not any(t.startswith("big") for _, call in backend.calls[1:] for t in call)
        assert batcher.dropped == 1

    run(batcher, scenario)


def test_a_failing_slice_fails_its_request_and_its_later_slices_never_run() -> None:
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=4)  # alone: one 6-character text a call

    async def scenario() -> None:
        doomed = asyncio.create_task(batcher.embed(["fine-1", "boom-2", "never-3"], "DOCUMENT", tenant="a"))
        await running(backend)
        backend.gate.set()
        with pytest.raises(RuntimeError, match="model exploded"):
            await doomed
        assert (await batcher.embed(["after-4"], "DOCUMENT", tenant="a")).tolist() == [vector("after-4", "DOCUMENT")]
        assert [call for _, call in backend.calls] == [["fine-1"], ["boom-2"], ["after-4"]]

    run(batcher, scenario)


def test_a_lone_tenants_concurrent_big_calls_still_run_slice_by_slice() -> None:
    """Alone, a tenant's small requests share calls without a character bound, but its big ones do
    not ride along: each runs in slices, so whoever comes next waits for one slice."""
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8)  # alone: two 8-character texts a call

    async def scenario() -> None:
        first = asyncio.create_task(batcher.embed([text("big", i) for i in range(4)], "DOCUMENT", tenant="rival"))
        await running(backend)
        tasks = await queued(batcher, *(([text("big", 10 * n + i) for i in range(4)], "DOCUMENT", "rival")
                                        for n in (1, 2)),
                             *(([text("doc", 100 + i)], "DOCUMENT", "rival") for i in range(5)))
        backend.gate.set()
        await asyncio.gather(first, *tasks)
        bigs = [[t for t in call if t.startswith("big")] for _, call in backend.calls]
        assert all(len(b) <= 2 for b in bigs) and sum(map(len, bigs)) == 12, backend.calls
        docs = [[t for t in call if t.startswith("doc")] for _, call in backend.calls]
        assert [text("doc", 100 + i) for i in range(5)] in docs, "the small ones share one call"

    run(batcher, scenario)


# ----------------------------------------------------------------------------- lanes: calls side by side


async def calls_made(backend: FakeBackend, n: int) -> None:
    """Returns once the backend has been called `n` times."""
    for _ in range(500):
        if len(backend.calls) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(backend.calls)} calls, expected {n}")


class HeldBackend(FakeBackend):
    """Takes calls side by side; a call with a text starting "big" is held until the test opens the gate,
    and the most calls ever under way at once are counted."""

    lanes = 2

    def __init__(self) -> None:
        super().__init__(gated=True)
        self.under_way = 0
        self.most = 0
        self._count = threading.Lock()

    def embed(self, texts: list[str], task: str) -> np.ndarray:
        with self._count:
            self.under_way += 1
            self.most = max(self.most, self.under_way)
        try:
            if not any(t.startswith("big") for t in texts):
                self.calls.append((task, list(texts)))
                return np.array([vector(t, task) for t in texts], dtype=np.float32)
            return super().embed(texts, task)
        finally:
            with self._count:
                self.under_way -= 1


def test_another_tenants_upload_runs_beside_a_held_slice_instead_of_waiting_for_it() -> None:
    backend = HeldBackend()
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=16, lanes=2)

    async def scenario() -> None:
        rival = asyncio.create_task(batcher.embed([text("big", i) for i in range(6)], "DOCUMENT", tenant="rival"))
        await running(backend)  # its first slice holds one lane
        upload = await asyncio.wait_for(batcher.embed([text("upload", 7)], "DOCUMENT", tenant="demo"), 5)
        assert upload.tolist() == [vector(text("upload", 7), "DOCUMENT")]
        assert not rival.done(), "the victim's rows came while the rival's slice was still held"
        backend.gate.set()
        assert (await rival).tolist() == [vector(text("big", i), "DOCUMENT") for i in range(6)]

    run(batcher, scenario)


def test_a_lone_tenant_never_has_two_calls_at_once_and_its_slices_keep_their_order() -> None:
    backend = HeldBackend()
    backend.gate.set()
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8, lanes=2)

    async def scenario() -> None:
        requests = [[text("big", 10 * n + i) for i in range(5)] for n in range(4)]
        results = await asyncio.gather(*(batcher.embed(r, "DOCUMENT", tenant="acme") for r in requests))
        for texts, rows in zip(requests, results):
            assert rows.tolist() == [vector(t, "DOCUMENT") for t in texts]
        assert backend.most == 1

    run(batcher, scenario)


def test_two_tenants_use_both_lanes_but_never_more() -> None:
    backend = HeldBackend()
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8, lanes=2)

    async def scenario() -> None:
        tasks = [asyncio.create_task(batcher.embed([text("big", 10 * n + i) for i in range(3)], "DOCUMENT",
                                                   tenant=tenant)) for n, tenant in enumerate("abc")]
        await calls_made(backend, 2)  # two tenants' slices held side by side; the third tenant waits
        backend.gate.set()
        await asyncio.gather(*tasks)
        assert backend.most == 2

    run(batcher, scenario)


def test_closing_fails_the_callers_of_every_call_under_way() -> None:
    backend = HeldBackend()
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=8, lanes=2)

    async def scenario() -> None:
        tasks = [asyncio.create_task(batcher.embed([text("big", 10 * n + i) for i in range(3)], "DOCUMENT", tenant=t))
                 for n, t in enumerate("ab")]
        await calls_made(backend, 2)
        await batcher.close()
        backend.gate.set()
        for task in tasks:
            with pytest.raises(Exception, match="shutting down"):
                await task

    run(batcher, scenario)


# ----------------------------------------------------------------------------- what one call costs another tenant


def test_a_short_text_never_shares_a_call_with_another_tenants_long_ones() -> None:
    """A call is as slow as its longest text (padded), so a one-line upload that carried a rival's
    800-character memory chunk took 30 times as long: another tenant's request joins only texts of its
    length class, and short ones (questions) still share calls across tenants."""
    backend = FakeBackend(gated=True)
    batcher = MicroBatcher(backend, window_ms=0, slice_chars=4096)

    async def scenario() -> None:
        blocker = asyncio.create_task(batcher.embed([text("hold", 0)], "DOCUMENT", tenant="z"))
        await running(backend)
        tasks = await queued(batcher, ([text("memory", 1, 800)], "DOCUMENT", "rival"),
                             ([text("upload", 2, 32)], "DOCUMENT", "demo"),
                             ([text("note", 3, 200)], "DOCUMENT", "other"),
                             ([text("memory", 4, 500)], "DOCUMENT", "third"))
        backend.gate.set()
        await asyncio.gather(blocker, *tasks)
        calls = [[len(t) for t in call] for _, call in backend.calls][1:]
        assert calls == [[800, 500], [32, 200]], calls

    run(batcher, scenario)


def test_a_lone_request_does_not_wait_out_the_window_because_another_tenant_is_busy() -> None:
    """The window gathers a tenant's requests while they keep coming; another tenant's call under way
    used to make every request wait it out."""
    backend = HeldBackend()
    batcher = MicroBatcher(backend, window_ms=60_000, slice_chars=16, lanes=2)

    async def scenario() -> None:
        rival = asyncio.create_task(batcher.embed([text("big", i) for i in range(6)], "DOCUMENT", tenant="rival"))
        await running(backend)  # the rival's call holds one lane
        upload = await asyncio.wait_for(batcher.embed([text("upload", 7)], "DOCUMENT", tenant="demo"), 5)
        assert upload.tolist() == [vector(text("upload", 7), "DOCUMENT")]
        assert not rival.done()
        backend.gate.set()
        await rival

    run(batcher, scenario)
