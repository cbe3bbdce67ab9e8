"""The largest request message each gRPC method takes.

The server interceptor checks a message's size on its bytes, after the caller is authenticated and
before anything parses it; a server's own receive limit is the largest of its methods' (4 MiB for the
embedder and the generator), so a message no method takes is refused by gRPC itself. Unary requests (a search, a
question, a prompt, a batch of texts to embed) are small; the streamed Ingest takes one document per
message (a file of up to INGEST_MAX_BYTES), Upsert one chunk, IngestTranscript two transcripts."""
from __future__ import annotations

from dataclasses import dataclass

from ragmesh.config import Settings

MiB = 1024 * 1024
# What a document carries beside its file: ids, title, date, filename and up to 64 metadata
# values of 4,000 characters (at most 4 bytes each in UTF-8): about 1 MiB at the very worst.
DOCUMENT_FIELDS_BYTES = MiB
# One Upsert message: a chunk's text (a parent holds up to 1,000,000 characters, up to 4 MB in
# UTF-8), 160 metadata pairs and a vector (3,072 floats for Gemini's embeddings).
CHUNK_BYTES = 8 * MiB
# IngestTranscript: raw_text and refined_text of up to 500,000 characters each, up to 4 bytes each.
TRANSCRIPT_BYTES = 5 * MiB


@dataclass(frozen=True)
class MessageLimits:
    """Bytes per request message: `unary` for every method not named below."""

    unary: int = 4 * MiB
    document: int = 50 * MiB + DOCUMENT_FIELDS_BYTES
    chunk: int = CHUNK_BYTES
    transcript: int = TRANSCRIPT_BYTES

    @classmethod
    def from_settings(cls, settings: Settings) -> "MessageLimits":
        return cls(unary=settings.grpc_unary_max_bytes, document=settings.ingest_max_bytes + DOCUMENT_FIELDS_BYTES)

    def _by_method(self) -> dict[str, tuple[int, str]]:
        document = (self.document, "INGEST_MAX_BYTES and 1 MiB for the document's other fields")
        return {
            "/ragmesh.v1.Retriever/Ingest": document,
            "/ragmesh.v1.Gateway/Ingest": document,
            "/ragmesh.v1.Retriever/Upsert": (self.chunk, "one chunk with its metadata and vector"),
            "/ragmesh.v1.Gateway/IngestTranscript": (self.transcript, "two transcripts of 500,000 characters"),
        }

    def of(self, method: str) -> tuple[int, str]:
        """(bytes, what sets them) for a method's request messages."""
        return self._by_method().get(method, (self.unary, "GRPC_UNARY_MAX_BYTES"))

    def largest(self, service: str) -> int:
        """A service's receive limit: none of its methods (nor health and reflection) takes more."""
        found = [limit for method, (limit, _) in self._by_method().items() if method.startswith(f"/{service}/")]
        return max([self.unary, *found])
