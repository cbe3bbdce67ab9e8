"""The memory engine admits only what the readers may read: a colleague's private document is in
no dense or keyword list, no admitted count, no field value and no indexed count; a share (named
or through a group) admits; a chunk written before access lists is the whole tenant's; the
platform (readers None) reads everything; a changed access list holds from the next search on,
and through a snapshot."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragmesh.access import ACCESS_KEY, Access, admits, principals
from ragmesh.identity import Identity
from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.index import IndexRegistry

DIM = 8
T = "acme"
ALICE = frozenset({"tenant", "user:alice"})
BOB = frozenset({"tenant", "user:bob", "group:risk"})
CAROL = frozenset({"tenant", "user:carol", "group:ops"})
QUERY = np.ones((1, DIM), np.float32)  # every test vector is close to it: all chunks are dense candidates


def doc(doc_id: str, text: str, who: Access | None, n: int = 2, fund: str = "K",
        parent: bool = False) -> tuple[tuple[str, str], list[StoredChunk]]:
    """A document of n chunks with the access `who` (None: written before access lists)."""
    meta = {"fund": fund} | ({} if who is None else {ACCESS_KEY: who.encode()})
    vector = np.ones(DIM, np.float32) / np.sqrt(DIM)
    chunks = [StoredChunk(Chunk(f"{doc_id}#{i}", doc_id, "c", f"{text} part {i}", dict(meta), "", T,
                                parent_chunk_id=f"{doc_id}#p" if parent else ""), vector) for i in range(n)]
    if parent:
        chunks.append(StoredChunk(Chunk(f"{doc_id}#p", doc_id, "c", f"{text} whole", dict(meta), "", T), None))
    return (T, doc_id), chunks


def search(registry: IndexRegistry, readers: frozenset[str] | None, query: str = "copper", **kw):
    return registry.search("c", [query], QUERY, 50, SearchFilter(tenant=T, readers=readers, **kw), with_parents=True)


def docs_found(found) -> tuple[set[str], set[str]]:
    """Documents in the dense list and in the keyword list."""
    return tuple({found.chunks[int(s)].doc_id for s in ranked[0][0]} for ranked in (found.dense, found.sparse))


@pytest.fixture
def registry() -> IndexRegistry:
    registry = IndexRegistry(DIM)
    registry.apply("c", [
        doc("memo", "copper memo confidential", Access.of("alice"), fund="Secret"),
        doc("shared", "copper shared with risk", Access.of("alice", groups=["risk"]), fund="Risky"),
        doc("named", "copper named carol", Access.of("alice", users=["carol"]), fund="Named"),
        doc("open", "copper for everyone", Access.of("alice", tenant=True), fund="Open"),
        doc("old", "copper from before access lists", None, fund="Old"),
    ])
    return registry


def test_a_colleagues_private_document_is_nowhere_in_a_search_or_a_count(registry: IndexRegistry) -> None:
    found = search(registry, BOB)
    assert docs_found(found) == ({"shared", "open", "old"},) * 2
    assert found.admitted == 6
    assert registry.indexed("c", T, BOB) == 6 and registry.indexed("c", None, BOB) == 6
    assert registry.field_values("fund", ["c"], T, BOB) == ["Old", "Open", "Risky"]
    assert registry.matching_doc_ids("c", SearchFilter(tenant=T, readers=BOB)) == ["old", "open", "shared"]
    assert registry.matching_doc_ids("c", SearchFilter(tenant=T, readers=BOB, doc_ids=["memo"])) == []


def test_a_named_share_and_a_group_share_admit_and_the_owner_reads_all_of_theirs(registry: IndexRegistry) -> None:
    assert docs_found(search(registry, CAROL))[1] == {"named", "open", "old"}
    assert docs_found(search(registry, ALICE))[0] == {"memo", "shared", "named", "open", "old"}
    assert docs_found(search(registry, frozenset({"tenant", "user:zed", "group:risk"})))[0] == {"shared", "open", "old"}


def test_legacy_chunks_are_every_tenant_members_and_the_platform_reads_everything(registry: IndexRegistry) -> None:
    assert docs_found(search(registry, frozenset({"tenant"}))) == ({"open", "old"},) * 2
    assert docs_found(search(registry, frozenset({"user:bob"})))[0] == set()  # not a member of the tenant: none
    everything = search(registry, None)
    assert docs_found(everything) == ({"memo", "shared", "named", "open", "old"},) * 2 and everything.admitted == 10
    assert registry.indexed("c", T) == 10 and registry.field_values("fund", [], T) == [
        "Named", "Old", "Open", "Risky", "Secret"]


def test_the_engines_access_column_is_never_listed_as_a_field(registry: IndexRegistry) -> None:
    assert registry.field_values(ACCESS_KEY, ["c"], T) == [] and registry.field_values("__doc__", ["c"], T) == []


def test_a_changed_access_list_holds_from_the_next_search(registry: IndexRegistry) -> None:
    assert "memo" not in docs_found(search(registry, BOB))[0]
    registry.apply("c", [doc("memo", "copper memo confidential", Access.of("alice", users=["bob"]), fund="Secret")])
    assert "memo" in docs_found(search(registry, BOB))[0] and registry.indexed("c", T, BOB) == 8
    registry.apply("c", [doc("memo", "copper memo confidential", Access.of("alice"), fund="Secret")])
    found = search(registry, BOB)
    assert "memo" not in docs_found(found)[0] | docs_found(found)[1] and found.admitted == 6
    assert "Secret" not in registry.field_values("fund", ["c"], T, BOB)


def test_a_parent_is_shown_only_beside_an_admitted_child_and_only_if_it_admits_the_readers() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [doc("mine", "copper mine", Access.of("alice"), parent=True),
                         doc("ours", "copper ours", Access.of("alice", users=["bob"]), parent=True)])
    assert search(registry, ALICE).parents == {"mine#p": "copper mine whole", "ours#p": "copper ours whole"}
    assert search(registry, BOB).parents == {"ours#p": "copper ours whole"}
    # a store holding a parent whose access differs from its child's (never written so): not shown
    key, chunks = doc("odd", "copper odd", Access.of("alice", users=["bob"]), parent=True)
    chunks[-1].chunk.metadata[ACCESS_KEY] = Access.of("alice").encode()
    registry.apply("c", [(key, chunks)])
    assert "odd#p" not in search(registry, BOB).parents and "odd#p" in search(registry, ALICE).parents


def test_a_snapshot_keeps_who_reads_what(registry: IndexRegistry, tmp_path: Path) -> None:
    registry.save_snapshot(tmp_path, version=4)
    loaded = IndexRegistry(DIM)
    assert loaded.load_snapshot(tmp_path, version=4)
    for readers in (ALICE, BOB, CAROL, frozenset({"tenant"}), None):
        assert docs_found(search(loaded, readers)) == docs_found(search(registry, readers))
        assert search(loaded, readers).admitted == search(registry, readers).admitted
    loaded.apply("c", [doc("later", "copper later", Access.of("carol", groups=["risk"]))])  # a new access value
    assert "later" in docs_found(search(loaded, BOB))[0] and "later" not in docs_found(search(loaded, ALICE))[0]


def test_principals_of_an_identity_read_as_the_engine_admits(registry: IndexRegistry) -> None:
    bob = principals(Identity(tenant=T, user="bob", role="member", via="key", groups=("risk",)))
    assert bob == BOB and docs_found(search(registry, bob))[0] == {"shared", "open", "old"}


def test_many_distinct_access_lists_admit_exactly_what_admits_says() -> None:
    """Thousands of distinct access values, written, replaced and deleted in batches while the
    same readers search in between (their memoised codes are extended, never stale)."""
    rng = np.random.default_rng(5)
    users, groups = [f"u{i}" for i in range(300)], [f"g{i}" for i in range(30)]

    def random_access() -> Access | None:
        if rng.random() < 0.05:
            return None
        return Access.of(str(rng.choice(users)), users=rng.choice(users, rng.integers(0, 4)).tolist(),
                         groups=rng.choice(groups, rng.integers(0, 3)).tolist(), tenant=bool(rng.random() < 0.1))

    readers_sets = [frozenset({"tenant", f"user:{u}", *(f"group:{g}" for g in rng.choice(groups, 2))})
                    for u in rng.choice(users, 12)] + [frozenset({f"user:{users[0]}"}), frozenset({"tenant"})]
    registry = IndexRegistry(DIM)
    truth: dict[str, str | None] = {}
    for round_ in range(6):
        changes = []
        for _ in range(700):
            doc_id = f"d{rng.integers(3000)}"
            if rng.random() < 0.1:
                changes.append(((T, doc_id), []))
                truth.pop(doc_id, None)
            else:
                who = random_access()
                changes.append(doc(doc_id, "copper", who, n=1))
                truth[doc_id] = None if who is None else who.encode()
        registry.apply("c", changes)
        index = registry.get("c", T)
        assert len(index.columns.vocab[ACCESS_KEY]) > 500 * (round_ + 1) / 2  # many distinct values
        for readers in readers_sets:
            expected = sorted(d for d, value in truth.items() if admits(value, readers))
            assert registry.matching_doc_ids("c", SearchFilter(tenant=T, readers=readers)) == expected
            assert registry.indexed("c", T, readers) == len(expected)
            found = registry.search("c", ["copper"], QUERY, 5000, SearchFilter(tenant=T, readers=readers))
            assert found.admitted == len(expected)
            assert sorted({found.chunks[int(s)].doc_id for s in found.sparse[0][0]}) == expected
