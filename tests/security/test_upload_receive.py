"""A tenant's concurrent gRPC uploads, tried as an attacker would send them: gRPC receives each file
whole in the gateway's memory before the servicer sees it, so they used to be bounded only by the
tenant's share of streams (an eighth of 256 slots, each with a file of up to INGEST_MAX_BYTES: 1.6 GB).
Now each file is received within the tenant's share of UPLOAD_MEMORY_PER_TENANT_MB, as the HTTP
edge's files are sent within it: past it the upload is refused (RESOURCE_EXHAUSTED naming the share,
with retry-after), while another tenant's upload goes through."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import grpc

from ragmesh.serving import ServiceHost
from ragmesh.v1 import gateway_pb2_grpc, retriever_pb2
from tests.auth import bearer, channel
from tests.stack import Stack

MB = 1024 * 1024
SHARE_MB, FILE_MAX = 16, 5 * MB  # a file's message is up to 6 MiB (its other fields: 1 MiB): two at once


class Upload:
    """One Gateway.Ingest call of a file, whose bytes leave only once `go` is set."""

    def __init__(self, address: str, key: str, name: str, go: threading.Event, content: bytes) -> None:
        self.go, self.progress, self.error = go, [], None
        self.doc = retriever_pb2.Document(doc_id=name, filename=name, collection="documents", content=content)
        self.channel = channel(address, bearer(key))
        self.thread = threading.Thread(target=self._run, args=(gateway_pb2_grpc.GatewayStub(self.channel).Ingest,))
        self.thread.start()

    def _documents(self) -> Iterator[retriever_pb2.Document]:
        self.go.wait(30)
        yield self.doc

    def _run(self, ingest) -> None:
        try:
            self.progress = [retriever_pb2.IngestStage.Name(p.stage) for p in ingest(self._documents(), timeout=60)]
        except grpc.RpcError as exc:
            self.error = exc

    def ended(self, within_s: float) -> bool:
        self.thread.join(within_s)
        return not self.thread.is_alive()

    def close(self) -> None:
        self.go.set()
        self.thread.join(60)
        self.channel.close()


def test_a_tenants_concurrent_grpc_uploads_past_its_memory_share_are_refused_and_another_tenants_goes_through(
        stack: Stack) -> None:
    gateway: ServiceHost = stack.start_variant("gateway", upload_memory_per_tenant_mb=SHARE_MB,
                                               ingest_max_bytes=FILE_MAX)
    rival, other = stack.key("bigco-receive", "root", "admin"), stack.key("otherco-receive", "root", "admin")
    go = threading.Event()
    junk = os.urandom(1024) * (4 * MB // 1024)  # a damaged PDF: its parse fails fast
    uploads: list[Upload] = []
    try:
        for i in range(2):  # each waits to send its file: its read holds room for the largest file
            before = gateway.admission.in_flight
            uploads.append(Upload(gateway.address, rival, f"big-{i}.pdf", go, junk))
            deadline = time.monotonic() + 10
            while gateway.admission.in_flight == before and time.monotonic() < deadline:
                time.sleep(0.005)
            assert not uploads[-1].ended(0.2), uploads[-1].error  # admitted, and waiting for its file
        third = Upload(gateway.address, rival, "big-2.pdf", go, junk)
        uploads.append(third)
        assert third.ended(5), "a third upload of the tenant past its share was taken"
        assert third.error is not None and third.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, third.error
        assert "UPLOAD_MEMORY_PER_TENANT_MB" in third.error.details(), third.error.details()
        assert int(dict(third.error.trailing_metadata())["retry-after"]) >= 1

        mine = Upload(gateway.address, other, "other.txt", threading.Event(), b"Okapi notes for the other tenant.")
        uploads.append(mine)
        mine.go.set()
        assert mine.ended(60) and mine.error is None and mine.progress[-1] == "INDEXED", (mine.error, mine.progress)
    finally:
        for upload in uploads:
            upload.close()
    for upload in uploads[:2]:  # the two within the share were received and reached their (failed) parse
        assert upload.error is None and upload.progress[-1] == "FAILED", (upload.error, upload.progress)
    assert gateway.app.uploads.receiving.held("bigco-receive") == 0  # given back once on disk
    again = Upload(gateway.address, rival, "big-3.pdf", threading.Event(), junk)
    again.close()
    assert again.error is None and again.progress[-1] == "FAILED", (again.error, again.progress)
