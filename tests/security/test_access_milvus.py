"""Access lists inside a tenant on the Milvus search backend, tried as a colleague would: `bob`
searches, counts and lists field values of the tenant `acme`, where `alice` keeps a private memo.
Every read that takes a SearchFilter (dense and keyword lists, the admitted count, parents,
documents matching a filter) and `indexed` and `field_values` must leave out what bob may not read,
whatever else his filter says; a group share and rows written before access lists (no ACCESS_KEY)
admit him. The backend class is driven directly on a milvus-lite file."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ragmesh.access import ACCESS_KEY, GROUP, TENANT, USER, Access
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, DocumentRecord, SearchFilter, StoredChunk
from services.retriever.milvus import MilvusBackend, MilvusConfig

DIM = 4
TENANT_NAME = "acme"
BOB = frozenset((TENANT, USER + "bob", GROUP + "sales"))  # bob's principals: ragmesh.access.principals
RISK = frozenset((TENANT, USER + "carol", GROUP + "risk"))
PRIVATE = Access(owner="alice").encode()


@pytest.fixture
def milvus(tmp_path: Path) -> MilvusBackend:
    b = MilvusBackend(MilvusConfig(str(tmp_path / "index.db"), "", "", "FLAT", {}, {}, "Strong", "acl_"), DIM)
    b.connect()
    yield b
    b.close(Path(), 0)


def stored(doc_id: str, texts: list[str], access: str | None, parents: list[str] | None = None,
           vector: np.ndarray | None = None) -> list[StoredChunk]:
    """A document's chunks; `access` None: written before access lists (no ACCESS_KEY)."""
    metadata = {"team": doc_id} | ({} if access is None else {ACCESS_KEY: access})
    return [StoredChunk(Chunk(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, collection="c", text=text, tenant=TENANT_NAME,
                              metadata=dict(metadata), parent_chunk_id=(parents or [""] * len(texts))[i],
                              chunk_index=i),
                        np.ones(DIM, np.float32) if vector is None else vector) for i, text in enumerate(texts)]


def write(b: MilvusBackend, doc_id: str, texts: list[str], access: str | None, **kw) -> None:
    b.apply("c", [((TENANT_NAME, doc_id), stored(doc_id, texts, access, **kw))])


def reads(b: MilvusBackend, readers: frozenset[str] | None, **where) -> dict:
    """Everything the reader learns of the collection: each list's documents, the counts, the values."""
    f = SearchFilter(tenant=TENANT_NAME, readers=readers, **where)
    r = b.search("c", ["lantern"], np.ones((1, DIM), np.float32), 50, f)

    def docs(ranked) -> list[str]:
        return sorted({r.chunks[int(s)].doc_id for s in ranked[0]})
    return {"dense": docs(r.dense[0]), "keyword": docs(r.sparse[0]), "admitted": r.admitted,
            "indexed": b.indexed("c", TENANT_NAME, readers),
            "matching": b.matching_doc_ids("c", f),
            "team": b.field_values("team", ["c"], TENANT_NAME, readers)}


def everything(*docs: str, chunks: int) -> dict:
    docs = sorted(docs)
    return {"dense": docs, "keyword": docs, "admitted": chunks, "indexed": chunks, "matching": docs, "team": docs}


def test_a_colleagues_private_document_is_in_no_result_count_or_value(milvus: MilvusBackend) -> None:
    write(milvus, "memo", ["alice lantern salary memo", "alice lantern review"], PRIVATE)
    write(milvus, "handbook", ["tenant lantern handbook"], Access(owner="admin", tenant=True).encode())
    write(milvus, "deal", ["sales lantern deal"], Access(owner="dave", groups=("sales",)).encode())
    write(milvus, "risk", ["risk lantern register"], Access(owner="carol", groups=("risk",)).encode())
    write(milvus, "legacy", ["old lantern notes"], None)  # written before access lists: the tenant's
    for sealed in (False, True):  # the growing segment, then sealed ones: both are filtered
        if sealed:
            milvus.seal("c")
        assert reads(milvus, BOB) == everything("handbook", "deal", "legacy", chunks=3)
        assert reads(milvus, RISK) == everything("handbook", "risk", "legacy", chunks=3)
        assert reads(milvus, frozenset((TENANT, USER + "alice"))) == everything("memo", "handbook", "legacy", chunks=4)
        assert reads(milvus, None) == everything("memo", "handbook", "deal", "risk", "legacy", chunks=6)
    assert milvus.indexed("c") == 6  # the platform figure (every tenant, no reader)


def test_no_other_part_of_a_filter_widens_access(milvus: MilvusBackend) -> None:
    """Bob names the private document and its access value in his filter: still nothing of it."""
    write(milvus, "memo", ["alice lantern salary memo"], PRIVATE)
    write(milvus, "legacy", ["old lantern notes"], None)
    for where, legacy in (({"doc_ids": ["memo"]}, []), ({"equals": {ACCESS_KEY: PRIVATE}}, []),
                          ({"any_of": {ACCESS_KEY: [PRIVATE, USER + "alice"]}}, []),
                          ({"any_of": {"team": ["memo", "legacy"]}}, ["legacy"])):
        seen = reads(milvus, BOB, **where)
        assert (seen["keyword"], seen["dense"], seen["matching"], seen["admitted"]) == (legacy, legacy, legacy,
                                                                                       len(legacy)), where


def test_no_readers_read_nothing_not_even_legacy_rows(milvus: MilvusBackend) -> None:
    """An empty set of principals (no token at all) admits nothing, as ragmesh.access.admits."""
    write(milvus, "legacy", ["old lantern notes"], None)
    write(milvus, "handbook", ["tenant lantern handbook"], Access(tenant=True).encode())
    assert reads(milvus, frozenset()) == {"dense": [], "keyword": [], "admitted": 0, "indexed": 0, "matching": [],
                                          "team": []}
    # Without `tenant` among them, neither the tenant's documents nor legacy ones.
    assert reads(milvus, frozenset((USER + "bob",)))["keyword"] == []


def test_a_changed_access_list_is_seen_by_the_next_search(milvus: MilvusBackend) -> None:
    """The document re-applied with each access in turn (as a share, a revocation, a widening do),
    in the growing segment and over a sealed one: each next search sees the new list."""
    texts = ["alice lantern salary memo", "alice lantern review"]
    steps = [(PRIVATE, []), (Access(owner="alice", users=("bob",)).encode(), ["memo"]), (PRIVATE, []),
             (Access(owner="alice", tenant=True).encode(), ["memo"]), (PRIVATE, [])]
    for i, (access, seen) in enumerate(steps):
        write(milvus, "memo", texts, access)
        assert reads(milvus, BOB) == everything(*seen, chunks=2 * len(seen)), i
        milvus.seal("c")


def test_parents_come_only_with_admitted_children(milvus: MilvusBackend, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ragmesh.sqlite3")
    try:
        for doc_id, access in (("memo", PRIVATE), ("deal", Access(owner="dave", groups=("sales",)).encode())):
            parent = StoredChunk(replace(stored(doc_id, [f"{doc_id} parent text"], access)[0].chunk,
                                         chunk_id=f"{doc_id}-parent"), None)
            children = [parent] + stored(doc_id, [f"{doc_id} lantern child"], access, parents=[f"{doc_id}-parent"])
            store.replace_documents([(DocumentRecord(doc_id=doc_id, collection="c", tenant=TENANT_NAME,
                                                     content_hash=doc_id, chunk_count=2), children)])
            milvus.apply("c", [((TENANT_NAME, doc_id), children)])
        milvus.store = store
        found = milvus.search("c", ["lantern"], None, 10, SearchFilter(tenant=TENANT_NAME, readers=BOB),
                              with_parents=True)
        assert [c.doc_id for c in found.chunks.values()] == ["deal"]
        assert found.parents == {"deal-parent": "deal parent text"}
    finally:
        store.close()


def test_access_is_never_cut_with_the_metadata_pairs(milvus: MilvusBackend) -> None:
    """The widest access list and more metadata pairs than a row holds (the retriever accepts 160):
    every reader still reads, and the chunk comes back with its whole metadata."""
    widest = Access.of(owner="alice", users=[f"u{i}" for i in range(63)] + ["bob"],
                       groups=[f"g{i}" for i in range(24)], tenant=False).encode()
    chunk = stored("memo", ["alice lantern memo"], widest)[0]
    chunk.chunk.metadata |= {f"k{i:03d}": "v" for i in range(300)}
    milvus.apply("c", [((TENANT_NAME, "memo"), [chunk])])
    for reader in (USER + "bob", USER + "alice", USER + "u0", GROUP + "g23"):
        r = milvus.search("c", ["lantern"], None, 10, SearchFilter(tenant=TENANT_NAME, readers=frozenset((reader,))))
        assert [c.metadata for c in r.chunks.values()] == [chunk.chunk.metadata], reader
    assert reads(milvus, BOB - {USER + "bob"})["keyword"] == []
