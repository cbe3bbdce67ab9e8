"""A call that gives way (a tenant over its share, on a lowered thread) has all of its model work run at
the lowered priority: none of it on the question sessions' intra-op helper thread, which runs at the
normal priority beside another tenant's upload. Measured as each thread's CPU time (/proc), by its nice
value, while the real ONNX model embeds questions."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ragmesh.thread_priority import giving_way_pool, thread_nice
from services.embedder.backends.onnx import OnnxMiniLMEmbedder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority and /proc: Linux")

QUESTIONS = [f"Which fund bought turbine number {n} for the Skerry wind farm in {1990 + n}?" for n in range(8)]
CALLS = 60


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    model = OnnxMiniLMEmbedder(Path(os.environ["MODEL_CACHE_DIR"]), threads=2)  # a helper thread per run
    model.warm_up()
    return model


def cpu_by_nice() -> dict[int, int]:
    """Clock ticks of CPU each nice value's threads of this process have used so far."""
    out: dict[int, int] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(fields[16])] = out.get(int(fields[16]), 0) + int(fields[11]) + int(fields[12])
    return out


def cpu_of(work) -> dict[int, int]:  # noqa: ANN001 - a callable
    before = cpu_by_nice()
    work()
    after = cpu_by_nice()
    return {nice: after.get(nice, 0) - before.get(nice, 0) for nice in after}


def test_a_call_that_gives_way_runs_its_questions_on_its_lowered_thread_alone(embedder: OnnxMiniLMEmbedder) -> None:
    base = thread_nice()
    pool = giving_way_pool(1, "test-giving-way")

    def embed_many() -> np.ndarray:
        return np.stack([embedder.embed(QUESTIONS, "QUERY") for _ in range(CALLS)])

    try:
        lowered = pool.submit(embed_many).result()  # the pool's thread first, so it exists before measuring
        giving_way = cpu_of(lambda: pool.submit(embed_many).result())
        normal: list[np.ndarray] = []
        worker = threading.Thread(target=lambda: normal.append(embed_many()))
        at_normal = cpu_of(lambda: (worker.start(), worker.join()))
    finally:
        pool.shutdown()
    lowered_ticks = sum(ticks for nice, ticks in giving_way.items() if nice > base)
    assert lowered_ticks > 20, giving_way  # the work was measured where it ran
    assert giving_way.get(base, 0) <= lowered_ticks // 10, f"work at the normal priority: {giving_way}"
    # The same calls on a normal thread spread over the helper thread too: the measure sees it.
    assert at_normal.get(base, 0) > 20 and not any(t for nice, t in at_normal.items() if nice > base), at_normal
    assert np.allclose(lowered, normal[0], atol=1e-5), "the same vectors either way"
