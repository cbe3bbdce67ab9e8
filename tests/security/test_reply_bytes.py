"""A tenant's search replies are bounded in bytes whatever metadata it stores: its documents carry the
most metadata allowed (MAX_METADATA_BYTES: a few values of 4,000 characters, or 60 of 250) and it
searches them with top_k 50, as a rival filling the shared cores with ~800 KB replies would. Each hit's
long values come cut and say so, entries past the hit's budget are left out and said so, short ones
(the fund name) come whole; the whole metadata is still read with GetChunk."""
from __future__ import annotations

import secrets

import pytest

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import Stack

TENANT, COLLECTION = "rival-bytes", "documents"
TEXT = " ".join(f"Quillmere lighthouse memo part {i}. The Quillmere lighthouse fund bought {i} more turbines "
                f"for the Skerry wind farm in quarter {i % 4 + 1}." for i in range(400))
SHAPES = {  # values: how many, of how many characters (16 KB in all at most)
    "long values": (3, 4_000),
    "many values": (60, 250),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_metadata_heavy_search_reply_is_bounded_and_says_what_it_left_out(stack: Stack, shape: str) -> None:
    count, chars = SHAPES[shape]
    key = stack.key(f"{TENANT}-{count}", "eve", "admin")  # a tenant a shape: only its own hits
    metadata = {f"field{i:02}": secrets.token_hex(chars // 2) for i in range(count)} | {"fund_name": "Quillmere"}
    with channel(stack.address("retriever"), bearer(key)) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        stages = [p.stage for p in stub.Ingest(iter([retriever_pb2.Document(
            doc_id=shape.replace(" ", "-"), collection=COLLECTION, text=TEXT, metadata=metadata)]), timeout=120)]
        assert stages[-1] == retriever_pb2.INDEXED, stages
        reply = stub.Search(retriever_pb2.SearchRequest(query="Quillmere lighthouse turbines",
                                                        collections=[COLLECTION], top_k=50), timeout=60)
        whole = stub.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=reply.hits[0].chunk.chunk_id), timeout=30)

    assert len(reply.hits) >= 10, len(reply.hits)
    for hit in reply.hits:
        shown = dict(hit.chunk.metadata)
        assert shown.pop("fund_name") == "Quillmere"  # short values whole: names, places, types
        said = shown.pop("__cut__", "")
        fields = {name: value for name, value in shown.items() if name in metadata}  # besides the pipeline's
        for name, value in fields.items():  # each value whole, or cut saying by how much
            assert value in (metadata[name], metadata[name][:256] + f"…[cut: {chars - 256:,} more characters]")
        left_out = count - len(fields)
        assert (said == f"{left_out} more metadata entries left out of this search reply; GetChunk has them "
                        f"all") if left_out else not said
    metadata_chars = sum(len(k) + len(v) for h in reply.hits for k, v in h.chunk.metadata.items())
    assert metadata_chars <= len(reply.hits) * 2_200, f"{metadata_chars} characters of metadata in one reply"
    assert dict(whole.chunk.metadata).items() >= metadata.items()  # read whole where one chunk is read
