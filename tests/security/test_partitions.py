"""Tenants are partitions, not filters: tried as an attacker holding two tenants' admin keys would,
through the real retriever gRPC server of the test stack. `vault` is the victim, `raven` the
attacker; both are operators of their own tenant (admin keys, which the retriever accepts). Nothing
one writes may be read, claimed, counted or felt in the other's scores, and conversation memory is
its author's alone: an operator's admin key reads nobody's chat text."""
from __future__ import annotations

import re

import grpc
import pytest

from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION
from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import Stack

VAULT, RAVEN = "vault-p", "raven-p"
COLLECTION = "partition_notes"
CONFIDENTIAL = "Vault board minutes: the Osprey merger closes at 17 dollars a share. Confidential."
PARENT_ID = "vault/minutes#parent"
CHAT = "my salary review with aubergine-quasar figures"  # only in the victim user's chat
DIM = 384


class Keys:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.vault = stack.key(VAULT, "vault-admin", "admin")
        self.raven = stack.key(RAVEN, "raven-admin", "admin")

    def retriever(self, key: str) -> retriever_pb2_grpc.RetrieverStub:
        return retriever_pb2_grpc.RetrieverStub(channel(self.stack.address("retriever"), bearer(key)))

    def acting_for(self, tenant: str, user: str) -> retriever_pb2_grpc.RetrieverStub:
        """The gateway's call: the service credential, acting for a tenant's user."""
        return retriever_pb2_grpc.RetrieverStub(channel(self.stack.address("retriever"),
                                                        self.stack.service_metadata(tenant, user)))


@pytest.fixture(scope="module")
def keys(stack: Stack) -> Keys:
    k = Keys(stack)
    # the victim's document: a searched child under a stored parent holding the confidential text
    summary = k.retriever(k.vault).Upsert(iter([
        _chunk(PARENT_ID, "minutes", CONFIDENTIAL, vector=None),
        _chunk("vault/minutes#0", "minutes", "Osprey merger status update", parent=PARENT_ID),
    ]))
    assert (summary.documents, summary.rejected) == (1, 0), summary
    return k


def _vector(hot: int = DIM - 1) -> list[float]:
    v = [0.0] * DIM
    v[hot] = 1.0
    return v


def _chunk(chunk_id: str, doc_id: str, text: str, parent: str = "", vector: list[float] | None = ...,
           collection: str = COLLECTION) -> retriever_pb2.UpsertRequest:
    given = _vector() if vector is ... else vector
    return retriever_pb2.UpsertRequest(chunk=common_pb2.Chunk(
        chunk_id=chunk_id, doc_id=doc_id, collection=collection, text=text, parent_chunk_id=parent),
        vector=given or [])


def _without_ids(text: str) -> str:
    return re.sub(r"'[^']*'(\.\.\. \([\d,]+ characters\))?", "ID", text)


# -- planted parent pointers ------------------------------------------------------------------------

def test_a_planted_parent_pointer_is_refused_and_never_expands_into_another_tenants_text(keys: Keys) -> None:
    raven = keys.retriever(keys.raven)
    planted = raven.Upsert(iter([_chunk("raven/bait#0", "bait", "Osprey merger status bait", parent=PARENT_ID)]))
    unknown = raven.Upsert(iter([_chunk("raven/bait2#0", "bait2", "Osprey merger bait two", parent="no/such#p")]))
    for summary in (planted, unknown):
        assert (summary.documents, summary.rejected) == (0, 1), summary
        assert summary.errors[0].split(": ", 1)[1].startswith("chunk.parent_chunk_id"), summary.errors
    # the refusal reads exactly as for an id nobody has
    assert _without_ids(planted.errors[0].replace("bait2", "bait")) == \
        _without_ids(unknown.errors[0].replace("bait2", "bait"))
    hits = raven.Search(retriever_pb2.SearchRequest(
        query="Osprey merger status", collections=[COLLECTION], top_k=20,
        boosters=retriever_pb2.Boosters(expand_parents=True))).hits
    assert all(h.chunk.tenant == RAVEN for h in hits)
    assert not any("17 dollars" in h.parent_text or "Confidential" in h.parent_text for h in hits)


def test_a_parent_in_another_document_of_the_same_tenant_is_refused(keys: Keys) -> None:
    vault = keys.retriever(keys.vault)
    summary = vault.Upsert(iter([_chunk("vault/other#0", "other", "Osprey elsewhere", parent=PARENT_ID)]))
    assert (summary.documents, summary.rejected) == (0, 1), summary
    assert "chunk.parent_chunk_id" in summary.errors[0]
    # the owner's own child still carries its parent
    hits = vault.Search(retriever_pb2.SearchRequest(
        query="Osprey merger status", collections=[COLLECTION], top_k=5,
        boosters=retriever_pb2.Boosters(expand_parents=True))).hits
    assert [h.parent_text for h in hits if h.chunk.chunk_id == "vault/minutes#0"] == [CONFIDENTIAL]


# -- chunk ids are keys within a tenant -------------------------------------------------------------

def test_another_tenants_chunk_id_is_no_oracle_and_cannot_be_squatted(keys: Keys) -> None:
    raven, vault = keys.retriever(keys.raven), keys.retriever(keys.vault)
    # the victim's id answers exactly as a fresh one: accepted, in the attacker's own tenant
    taken = raven.Upsert(iter([_chunk("vault/minutes#0", "probe", "raven probe text")]))
    fresh = raven.Upsert(iter([_chunk("raven/fresh#0", "probe-fresh", "raven fresh text")]))
    assert (taken.documents, taken.rejected, list(taken.errors)) == (fresh.documents, fresh.rejected,
                                                                    list(fresh.errors)) == (1, 0, [])
    # ids claimed ahead of the victim's upload do not make it fail
    squatted = raven.Upsert(iter([_chunk("vault/later#0", "squat", "raven squatting text")]))
    assert squatted.documents == 1
    later = vault.Upsert(iter([_chunk("vault/later#0", "later", "vault later text")]))
    assert (later.documents, later.rejected) == (1, 0), later
    mine = vault.GetChunk(retriever_pb2.GetChunkRequest(chunk_id="vault/later#0"))
    theirs = raven.GetChunk(retriever_pb2.GetChunkRequest(chunk_id="vault/later#0"))
    assert (mine.chunk.tenant, mine.chunk.text) == (VAULT, "vault later text")
    assert (theirs.chunk.tenant, theirs.chunk.text) == (RAVEN, "raven squatting text")
    assert vault.GetChunk(retriever_pb2.GetChunkRequest(chunk_id="vault/minutes#0")).chunk.doc_id == "minutes"


# -- lexical statistics are per tenant --------------------------------------------------------------

def test_keyword_scores_do_not_move_with_another_tenants_writes(keys: Keys) -> None:
    raven, vault = keys.retriever(keys.raven), keys.retriever(keys.vault)
    raven.Upsert(iter([_chunk("raven/bm#0", "bm", "the wombat ledger shows wombat payments"),
                       _chunk("raven/bm2#0", "bm2", "an unrelated ledger entry for payments")]))

    def score() -> float:
        hits = raven.Search(retriever_pb2.SearchRequest(query="wombat", collections=[COLLECTION], top_k=5,
                                                        dense_weight=0.0)).hits
        return [h.sparse_score for h in hits if h.chunk.chunk_id == "raven/bm#0"][0]

    before = score()
    vault.Upsert(iter([_chunk(f"vault/bm{i}#0", f"bm{i}", f"wombat wombat wombat {i}") for i in range(6)]))
    assert score() == before, "the victim's writes moved the attacker's keyword score"


# -- conversation memory is its author's ------------------------------------------------------------

def test_conversation_memory_is_read_only_by_its_author(keys: Keys) -> None:
    alice = keys.acting_for(VAULT, "alice")
    progress = list(alice.Ingest(iter([retriever_pb2.Document(
        doc_id="alice-msg-1", collection=MEMORY_COLLECTION, text=CHAT, date="2026-01-02",
        metadata={MEMORY_AUTHOR: "alice", "conversation_id": "alice-conv", "role": "user"})])))
    assert progress[-1].stage == retriever_pb2.INDEXED, progress
    mine = alice.Search(retriever_pb2.SearchRequest(query=CHAT, collections=[MEMORY_COLLECTION], top_k=5)).hits
    assert [h.chunk.text for h in mine] == [CHAT], "the author finds her own message"
    chunk_id = mine[0].chunk.chunk_id

    for reader in (keys.retriever(keys.vault), keys.acting_for(VAULT, "bob"), keys.acting_for(VAULT, "")):
        for collections in ([MEMORY_COLLECTION], []):
            hits = reader.Search(retriever_pb2.SearchRequest(query=CHAT, collections=collections, top_k=50)).hits
            assert all(CHAT not in h.chunk.text for h in hits)
        assert reader.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=MEMORY_COLLECTION)).documents == []
        listed = reader.ListDocuments(retriever_pb2.ListDocumentsRequest(limit=200)).documents
        assert all(d.document.collection != MEMORY_COLLECTION for d in listed)
        for call in (
            lambda: reader.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id)),
            lambda: reader.GetDocument(retriever_pb2.GetDocumentRequest(collection=MEMORY_COLLECTION,
                                                                        doc_id="alice-msg-1")),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            assert CHAT not in info.value.details()
        for field in ("conversation_id", MEMORY_AUTHOR, "role"):
            assert reader.FieldValues(retriever_pb2.FieldValuesRequest(
                field=field, collections=[MEMORY_COLLECTION])).values == []

    # only the platform writes or deletes in it: an operator's admin key may not
    vault = keys.retriever(keys.vault)
    for call in (
        lambda: list(vault.Ingest(iter([retriever_pb2.Document(
            doc_id="forged", collection=MEMORY_COLLECTION, text="forged memory",
            metadata={MEMORY_AUTHOR: "alice", "conversation_id": "alice-conv"})]))),
        lambda: vault.Upsert(iter([_chunk("vault/forged#0", "forged", "forged memory",
                                          collection=MEMORY_COLLECTION)])),
        lambda: vault.Delete(retriever_pb2.DeleteRequest(collection=MEMORY_COLLECTION, doc_ids=["alice-msg-1"])),
        lambda: vault.Delete(retriever_pb2.DeleteRequest(collection=MEMORY_COLLECTION, filter=common_pb2.Filter(
            equals={"conversation_id": "alice-conv"}))),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    assert [h.chunk.text for h in alice.Search(retriever_pb2.SearchRequest(
        query=CHAT, collections=[MEMORY_COLLECTION], top_k=5)).hits] == [CHAT], "nothing was deleted"
    # the gateway's forget (the service credential) still removes it
    gone = alice.Delete(retriever_pb2.DeleteRequest(collection=MEMORY_COLLECTION, filter=common_pb2.Filter(
        equals={"conversation_id": "alice-conv"})))
    assert gone.documents == 1


# -- platform figures -------------------------------------------------------------------------------

def test_a_tenants_collection_figures_are_its_own(keys: Keys) -> None:
    raven = keys.retriever(keys.raven)
    listed = raven.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True)).collections
    figures = {c.name: c for c in listed}
    assert set(figures) == {COLLECTION}, "only the collections the tenant has documents in"
    own = figures[COLLECTION]
    assert own.indexed_chunks == own.chunks, "indexed chunks counted over other tenants' too"
    for call in (lambda: raven.ListCollections(retriever_pb2.ListCollectionsRequest()),
                 lambda: raven.Stats(retriever_pb2.StatsRequest())):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    service = retriever_pb2_grpc.RetrieverStub(channel(keys.stack.address("retriever"),
                                                       keys.stack.service_metadata()))
    everyone = {c.name: c for c in service.Stats(retriever_pb2.StatsRequest()).collections}
    assert everyone[COLLECTION].indexed_chunks > own.indexed_chunks


# -- ids echoed in errors ---------------------------------------------------------------------------

def test_an_id_in_an_error_is_cut_to_a_short_prefix(keys: Keys) -> None:
    raven = keys.retriever(keys.raven)
    long_id = "x" * 500
    for call in (lambda: raven.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=long_id)),
                 lambda: raven.GetDocument(retriever_pb2.GetDocumentRequest(collection=COLLECTION, doc_id=long_id))):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "x" * 80 not in info.value.details() and len(info.value.details()) < 160, info.value.details()
