"""Tenants are partitions on the Milvus search backend, tried as an attacker would: `umbra` (the
attacker, with an admin key of its own: it writes and searches its own tenant only) probes what
`acme` (the victim) holds. BM25 keyword scores are a word-existence oracle when the statistics
span tenants; ids an attacker reuses must name its own things; a parent pointer it plants must
not fetch another tenant's text. The backend class is driven directly on a milvus-lite file."""
from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest

from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, DocumentRecord, SearchFilter, StoredChunk
from services.retriever.milvus import MilvusBackend, MilvusConfig, rows

DIM = 4
ATTACKER = "umbra"
GUESS, CONTROL = "nightingale", "quartzite"  # the word umbra guesses acme uses; one nobody uses


def sharing_a_partition(tenant: str) -> str:
    """A victim that one shared Milvus collection with `tenant` as partition key puts in the same
    partition (milvus-lite hashes the key, the tenant's hex, into 16 partitions and keeps BM25
    statistics per segment of a partition; a Milvus server keeps them per shard, across every
    partition): the victim the attack works on in milvus-lite too."""
    def bucket(t: str) -> int:
        return int(hashlib.md5(rows.hexed(t).encode()).hexdigest(), 16) % 16
    return next(t for t in (f"acme-{i}" for i in itertools.count()) if bucket(t) == bucket(ATTACKER))


VICTIM = sharing_a_partition(ATTACKER)


@pytest.fixture
def milvus(tmp_path: Path) -> MilvusBackend:
    b = MilvusBackend(MilvusConfig(str(tmp_path / "index.db"), "", "", "FLAT", {}, {}, "Strong", "sec_"), DIM)
    b.connect()
    yield b
    b.close(Path(), 0)


def stored(tenant: str, doc_id: str, texts: list[str], chunk_ids: list[str] | None = None,
           parents: list[str] | None = None) -> list[StoredChunk]:
    rng = np.random.default_rng(len(tenant) + len(doc_id))
    return [StoredChunk(Chunk(chunk_id=(chunk_ids or [f"{doc_id}#{i}" for i in range(len(texts))])[i], doc_id=doc_id,
                              collection="c", text=text, tenant=tenant,
                              parent_chunk_id=(parents or [""] * len(texts))[i], chunk_index=i),
                        rng.standard_normal(DIM).astype(np.float32)) for i, text in enumerate(texts)]


def keyword_scores(b: MilvusBackend, tenant: str, word: str) -> dict[str, float]:
    """Each of the tenant's chunks a keyword search for the word finds, with its BM25 score."""
    r = b.search("c", [word], None, 50, SearchFilter(tenant=tenant))
    if r is None:
        return {}
    slots, scores = r.sparse[0]
    return {r.chunks[int(s)].chunk_id: round(float(v), 5) for s, v in zip(slots, scores)}


def test_another_tenants_words_do_not_move_my_keyword_scores(milvus: MilvusBackend) -> None:
    """umbra writes one chunk holding its guess and a control word once each (equal term
    frequencies, so equal scores while the statistics are umbra's alone), searches both, and
    searches again once acme has written five documents with the guess and Milvus has sealed
    them. With statistics shared across tenants the guess scores lower than the control: umbra
    learns that acme's corpus holds the word. Every score must be what it was."""
    milvus.apply("c", [((ATTACKER, "probe"), stored(ATTACKER, "probe", [f"{GUESS} lantern {CONTROL} rules"])),
                       ((ATTACKER, "other"), stored(ATTACKER, "other", ["river stone bridge", "old mill road"]))])
    before = {w: keyword_scores(milvus, ATTACKER, w) for w in (GUESS, CONTROL)}
    assert before[GUESS] == before[CONTROL] and len(before[GUESS]) == 1

    milvus.apply("c", [((VICTIM, f"memo{i}"), stored(VICTIM, f"memo{i}", [f"{GUESS} {GUESS} board memo {i}"]))
                       for i in range(5)])
    milvus.seal("c")  # as Milvus does by itself once segments fill or age
    after = {w: keyword_scores(milvus, ATTACKER, w) for w in (GUESS, CONTROL)}
    assert after == before, f"acme's writes moved umbra's scores: {before} -> {after}"
    assert len(keyword_scores(milvus, VICTIM, GUESS)) == 5


def test_the_same_ids_in_two_tenants_are_two_things(milvus: MilvusBackend) -> None:
    """umbra reuses acme's document id and chunk ids: each tenant finds, counts and deletes its own."""
    ids = ["memo#0", "memo#1"]
    milvus.apply("c", [((VICTIM, "memo"), stored(VICTIM, "memo", ["acme lantern plan", "acme lantern budget"], ids))])
    milvus.apply("c", [((ATTACKER, "memo"), stored(ATTACKER, "memo", ["umbra lantern decoy"], ids[:1]))])
    texts = {t: sorted(c.text for c in milvus.search("c", ["lantern"], None, 10, SearchFilter(tenant=t)).chunks.values())
             for t in (VICTIM, ATTACKER)}
    assert texts == {VICTIM: ["acme lantern budget", "acme lantern plan"], ATTACKER: ["umbra lantern decoy"]}
    assert milvus.indexed("c", VICTIM) == 2 and milvus.indexed("c", ATTACKER) == 1 and milvus.indexed("c") == 3
    assert milvus.matching_doc_ids("c", SearchFilter(tenant=ATTACKER, doc_ids=["memo"])) == ["memo"]
    assert milvus.held("c", [(VICTIM, "memo"), (ATTACKER, "memo")]) == {(VICTIM, "memo"): 2, (ATTACKER, "memo"): 1}

    milvus.apply("c", [((ATTACKER, "memo"), [])])  # umbra deletes "its" memo
    assert milvus.indexed("c", VICTIM) == 2 and milvus.indexed("c", ATTACKER) == 0
    assert milvus.searchable(["c"], VICTIM) == ["c"]
    assert milvus.searchable(["c"], "nobody") == [] and milvus.search("c", ["lantern"], None, 10,
                                                                     SearchFilter(tenant="nobody")) is None


def test_a_planted_parent_id_of_another_tenant_yields_no_parent_text(milvus: MilvusBackend, tmp_path: Path) -> None:
    """umbra upserts a chunk whose parent is acme's parent chunk (by its id), then searches with
    parent expansion: no parent text, as for an unknown id. Its own parent still expands."""
    store = SqliteStore(tmp_path / "ragmesh.sqlite3")
    try:
        secret = StoredChunk(Chunk(chunk_id="acme-parent", doc_id="plan", collection="c", tenant=VICTIM,
                                   text="Acme will acquire Lark Robotics for 42 million dollars."), None)
        victim = [secret] + stored(VICTIM, "plan", ["acme lantern plan"], parents=["acme-parent"])
        own = StoredChunk(Chunk(chunk_id="umbra-parent", doc_id="bait", collection="c", tenant=ATTACKER,
                                text="umbra's own parent text"), None)
        bait = [own] + stored(ATTACKER, "bait", ["umbra lantern bait", "umbra lantern hook"],
                              parents=["acme-parent", "umbra-parent"])
        for tenant, doc_id, chunks in ((VICTIM, "plan", victim), (ATTACKER, "bait", bait)):
            store.replace_documents([(DocumentRecord(doc_id=doc_id, collection="c", tenant=tenant,
                                                     content_hash=doc_id, chunk_count=len(chunks)), chunks)])
            milvus.apply("c", [((tenant, doc_id), chunks)])
        milvus.store = store
        found = milvus.search("c", ["lantern"], None, 10, SearchFilter(tenant=ATTACKER), with_parents=True)
        assert {c.parent_chunk_id for c in found.chunks.values()} == {"acme-parent", "umbra-parent"}
        assert found.parents == {"umbra-parent": "umbra's own parent text"}
    finally:
        store.close()
