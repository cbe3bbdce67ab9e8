"""`POST /api/transcripts` (admin keys): a call transcript in as JSON, tagged by the configured model
and stored as one document of type "transcript" (services/gateway/transcripts.py); the stored
document, its tags and who made them out, as JSON. The same as `Gateway.IngestTranscript` over gRPC."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from ragmesh.identity import Identity
from services.gateway.transcripts import MAX_TAGS, TranscriptInput, Transcripts


# Types and the tag count are checked here (so the OpenAPI document says what is accepted); the
# rest by TranscriptInput.validate, 400 naming the field.
class TranscriptBody(BaseModel):
    model_config = ConfigDict(strict=True)

    raw_text: str
    refined_text: str | None = ""
    polished_text: str | None = ""  # 003's older name for refined_text
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    echotag: str | None = ""
    transcript_id: str | None = ""
    collection: str | None = ""
    date: str | None = ""
    tenant: str = ""

    def to_input(self) -> TranscriptInput:
        return TranscriptInput(
            raw_text=self.raw_text, refined_text=self.refined_text or self.polished_text or "", tags=self.tags,
            echotag=self.echotag or "", transcript_id=self.transcript_id or "", collection=self.collection or "",
            date=self.date or "", tenant=self.tenant,
        )


def transcripts_router(transcripts: Transcripts, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.post("/api/transcripts")
    async def ingest_transcript(body: TranscriptBody, who: Identity = Depends(caller)) -> dict:
        return asdict(await transcripts.ingest(who, body.to_input()))

    return router
