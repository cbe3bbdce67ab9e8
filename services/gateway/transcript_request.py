"""A call transcript as a client sends it, declared once for both edges (the HTTP body and the gRPC
request are checked by this model, then by TranscriptInput.validate in the domain)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ragmesh.validation import COLLECTION_NAME, NOT_BLANK, WHITESPACE
from services.gateway.request import Date, Declared, Name
from services.gateway.transcripts import (MAX_TAG_CHARS, MAX_TAGS, MAX_TRANSCRIPT_CHARS, MAX_TRANSCRIPT_ID_CHARS,
                                          TranscriptInput)

Tag = Annotated[str, Field(max_length=MAX_TAG_CHARS, pattern=f"^[^,]*[^,{WHITESPACE}][^,]*$")]
Transcript = Annotated[str, Field(max_length=MAX_TRANSCRIPT_CHARS)]


class TranscriptBody(Declared):
    """A transcript as a client sends it: the JSON body of POST /api/transcripts, and Gateway.IngestTranscript's
    TranscriptRequest (which has no polished_text) put through it."""

    raw_text: Transcript = Field(pattern=NOT_BLANK, description="The call as said; not blank")
    refined_text: Transcript | None = Field("", description="Notes made from the call, stored after the raw text")
    polished_text: Transcript | None = Field("", description="The older name of refined_text (used when that is "
                                                             "empty)")
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS, description=(
        "Topics, not blank and without commas (repeats are dropped); sent, no model is asked"))
    echotag: Annotated[str, Field(max_length=MAX_TAG_CHARS)] | None = Field("", description=(
        "The transcript's main tag; empty or null: the first tag"))
    transcript_id: Annotated[str, Field(max_length=MAX_TRANSCRIPT_ID_CHARS)] | None = Field("", description=(
        "Empty or null: a new id; an id stored already is replaced"))
    collection: Annotated[str, Field(pattern=f"(?:{COLLECTION_NAME})|^$")] | None = Field("", description=(
        "Empty or null: documents"))
    date: Date | None = Field("", description="YYYY-MM-DD of the call; empty or null: today")
    tenant: Name = Field("", description="Empty or the credential's own tenant (403 otherwise)")

    def to_input(self) -> TranscriptInput:
        return TranscriptInput(
            raw_text=self.raw_text, refined_text=self.refined_text or self.polished_text or "", tags=self.tags,
            echotag=self.echotag or "", transcript_id=self.transcript_id or "", collection=self.collection or "",
            date=self.date or "", tenant=self.tenant,
        )
