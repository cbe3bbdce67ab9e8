"""`POST /api/transcripts` (admin keys): a call transcript in as JSON, tagged by the configured model
and stored as one document of type "transcript" (services/gateway/transcripts.py); the stored
document, its tags and who made them out, as JSON. The same as `Gateway.IngestTranscript` over gRPC."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict

from fastapi import APIRouter, Depends

from ragmesh.identity import Identity
from services.gateway.api.schemas import TranscriptStored, returns
from services.gateway.transcript_request import TranscriptBody
from services.gateway.transcripts import Transcripts


def transcripts_router(transcripts: Transcripts, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.post("/api/transcripts", summary="Store a call transcript (admin keys) as a document of type transcript, "
                                             "tagged with 3-6 topics by the configured model",
                 **returns(TranscriptStored, 502))
    async def ingest_transcript(body: TranscriptBody, who: Identity = Depends(caller)) -> dict:
        return asdict(await transcripts.ingest(who, body.to_input()))

    return router
