"""The parse worker pool: a parse past its time or memory limit, or one that crashes, ends its worker
process (not a thread left running) and fails only its document; the next parse gets a fresh
worker; a tenant has at most its share of parses at once and never waits behind another's; what
the real parsers produce comes back from a worker whole."""
from __future__ import annotations

import asyncio
import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragmesh import metrics
from ragmesh.types import Document
from services.retriever.ingest.parsed import Parsed, UnreadableFile
from services.retriever.ingest.parsers import parse
from services.retriever.ingest.workers import PARSE_NICENESS, ParseLimits, ParsePool
from tests.fakes.parsers import misbehaving
from tests.unit.test_ingest_parsers import FACTSHEET, docx_bytes, pdf_bytes, pptx_bytes

MAX_BYTES = 1024 * 1024


def parsing_alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (killed, waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def pool() -> Iterator[ParsePool]:
    pool = ParsePool(ParseLimits(timeout_s=2.0, memory_mb=256, workers=2, per_tenant=1, inline_bytes=0),
                     parser=misbehaving)
    yield pool
    pool.close()


def doc(title: str, tenant: str = "acme", **kw: object) -> Document:
    return Document(f"{title}-doc", "c", text=f"A {title} document.", title=title, tenant=tenant, **kw)


async def worker_pid(pool: ParsePool, tenant: str = "acme") -> int:
    parsed = await pool.parse(doc("pid", tenant), MAX_BYTES)
    return int(parsed[0].text.split()[-1].rstrip("."))


def killed(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("ragmesh_parse_workers_killed_total", {"reason": reason}) or 0


@pytest.mark.parametrize(("title", "reason", "limit"), [
    ("spin", "timeout", "took longer than 2 s to parse (INGEST_PARSE_TIMEOUT_S), so it was not ingested"),
    ("hoard", "memory", "needed more than 256 MB to parse (INGEST_PARSE_MEMORY_MB), so it was not ingested"),
    ("crash", "crash", "stopped its parse worker (exit code 3), so it was not ingested"),
])
def test_a_parse_past_a_limit_kills_its_worker_and_the_next_gets_a_new_one(pool: ParsePool, title: str, reason: str,
                                                                           limit: str) -> None:
    counted = killed(reason)

    async def main() -> None:
        first = await worker_pid(pool)  # idle now: the next parse goes to it
        with pytest.raises(UnreadableFile) as failed:
            await pool.parse(doc(title), MAX_BYTES)
        assert str(failed.value) == f"{title}-doc: {limit}"
        assert not parsing_alive(first) and first not in pool.pids()
        assert pool.killed == 1 and killed(reason) == counted + 1
        assert await worker_pid(pool) != first

    asyncio.run(main())


def test_a_caller_that_goes_away_ends_its_parse(pool: ParsePool) -> None:
    async def main() -> None:
        first = await worker_pid(pool)
        parsing = asyncio.create_task(pool.parse(doc("spin"), MAX_BYTES))
        while not pool.parsing():
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(pool.parse(doc("spin"), MAX_BYTES))  # acme's second: waits its turn
        await asyncio.sleep(0.1)
        for task in (waiting, parsing):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert not parsing_alive(first) and pool.killed == 1 and not pool.parsing()
        assert await worker_pid(pool) != first  # its turn was given back

    asyncio.run(main())


def test_a_tenant_parses_one_file_at_a_time_and_never_holds_up_another(pool: ParsePool, tmp_path: Path) -> None:
    gate = tmp_path / "gate"

    def started(doc_id: str) -> bool:
        return Path(f"{gate}.{doc_id}.started").exists()

    async def main() -> None:
        first = asyncio.create_task(pool.parse(doc("gated", metadata={"gate": str(gate)}), MAX_BYTES))
        second = asyncio.create_task(pool.parse(
            Document("second", "c", text="Waits its turn.", title="gated", tenant="acme", metadata={"gate": str(gate)}),
            MAX_BYTES))
        while not started("gated-doc"):
            await asyncio.sleep(0.01)
        other = await pool.parse(doc("plain", "umbra"), MAX_BYTES)  # a worker is free for another tenant
        assert other[0].text == "A plain document."
        assert not started("second") and not second.done()  # a free worker, but acme has its one parse
        gate.touch()
        assert (await first)[0].text == "A gated document." and (await second)[0].text == "Waits its turn."
        assert pool.killed == 0

    asyncio.run(main())


def test_the_real_parsers_results_come_back_from_a_worker_whole() -> None:
    files = [
        Document("", "c", content=pdf_bytes(["Page one text.", "Page two text."], title="Minutes"), filename="m.pdf"),
        Document("", "c", content=docx_bytes([("h", "Scope"), ("p", "What is in scope.")]), filename="s.docx"),
        Document("", "c", content=pptx_bytes([("Plan", "Ship it.")], {0: "Say it slowly."}), filename="p.pptx"),
        Document("", "c", content=json.dumps(FACTSHEET).encode(), filename="f.json"),
        Document("", "c", content=b'{"id": "a", "text": "One."}\nnot json\n', filename="r.jsonl"),
    ]
    pool = ParsePool(ParseLimits(inline_bytes=0))

    async def main() -> None:
        for file in files:
            expected = parse(file, MAX_BYTES)
            assert pickle.loads(pickle.dumps(expected)) == expected
            assert await pool.parse(file, MAX_BYTES) == expected

    try:
        asyncio.run(main())
    finally:
        pool.close()
    assert pool.killed == 0


def test_small_text_is_parsed_in_place_and_large_files_in_a_worker() -> None:
    pool = ParsePool(ParseLimits(inline_bytes=100), parser=misbehaving)

    async def main() -> None:
        small = await pool.parse(doc("pid"), MAX_BYTES)
        assert small[0].text == f"Parsed in process {os.getpid()}." and not pool.pids()
        large = await pool.parse(Document("big", "c", text="x " * 100, title="pid", tenant="acme"), MAX_BYTES)
        assert large[0].text != small[0].text and len(pool.pids()) == 1

    try:
        asyncio.run(main())
    finally:
        pool.close()


def test_limits_that_would_let_one_tenant_take_every_worker_are_refused() -> None:
    with pytest.raises(ValueError, match="INGEST_PARSE_WORKERS .2. must be more than INGEST_PARSES_PER_TENANT .2"):
        ParseLimits(workers=2, per_tenant=2)
    with pytest.raises(ValueError, match="INGEST_PARSE_MEMORY_MB must be 0"):
        ParseLimits(memory_mb=64)


def test_workers_parse_at_a_lower_cpu_priority_than_the_retriever(pool: ParsePool) -> None:
    """A tenant's parses (a bomb's minute of CPU) take the cores the serving processes leave."""

    async def main() -> int:
        return await worker_pid(pool)

    pid = asyncio.run(main())
    assert os.getpriority(os.PRIO_PROCESS, pid) >= os.getpriority(os.PRIO_PROCESS, 0) + PARSE_NICENESS
