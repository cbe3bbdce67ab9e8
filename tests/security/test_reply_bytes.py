"""A tenant's search replies are bounded in bytes whatever metadata it stores: its documents carry the
most metadata allowed (three values of 4,000 characters and a fund name, MAX_METADATA_BYTES) and it
searches them with top_k 50, as a rival filling the shared cores with megabyte replies would. Each hit's
long values come cut and say so; the short ones come whole; the whole value is still read with GetChunk."""
from __future__ import annotations

import secrets

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import Stack

TENANT, COLLECTION = "rival-bytes", "documents"
LONG = 4_000
TEXT = " ".join(f"Quillmere lighthouse memo part {i}. The Quillmere lighthouse fund bought {i} more turbines "
                f"for the Skerry wind farm in quarter {i % 4 + 1}." for i in range(400))


def test_a_metadata_heavy_search_reply_is_cut_and_says_so(stack: Stack) -> None:
    key = stack.key(TENANT, "eve", "admin")
    metadata = {f"field{i:02}": secrets.token_hex(LONG // 2) for i in range(3)} | {"fund_name": "Quillmere"}
    with channel(stack.address("retriever"), bearer(key)) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        stages = [p.stage for p in stub.Ingest(iter([retriever_pb2.Document(
            doc_id="heavy", collection=COLLECTION, text=TEXT, metadata=metadata)]), timeout=120)]
        assert stages[-1] == retriever_pb2.INDEXED, stages
        reply = stub.Search(retriever_pb2.SearchRequest(query="Quillmere lighthouse turbines",
                                                        collections=[COLLECTION], top_k=50), timeout=60)
        whole = stub.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=reply.hits[0].chunk.chunk_id), timeout=30)

    assert len(reply.hits) >= 10, len(reply.hits)
    for hit in reply.hits:
        shown = hit.chunk.metadata
        assert shown["fund_name"] == "Quillmere"  # short values whole: names, places, types
        for name, value in metadata.items():
            if len(value) > 256:
                assert shown[name] == value[:256] + f"…[cut: {LONG - 256} more characters]", name
    metadata_bytes = sum(len(k) + len(v.encode()) for h in reply.hits for k, v in h.chunk.metadata.items())
    assert metadata_bytes <= len(reply.hits) * 2_000, f"{metadata_bytes} bytes of metadata in one reply"
    assert whole.chunk.metadata["field00"] == metadata["field00"]  # read whole where one chunk is read
