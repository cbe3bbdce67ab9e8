"""A correction as a client sends it, declared once for both edges (the HTTP body and the gRPC request are
checked by this model, then by Memory.record_correction in the domain, with the same CORRECTION_LIMITS)."""
from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from ragmesh.validation import NOT_BLANK
from services.gateway.memory import CORRECTION_LIMITS
from services.gateway.request import MAX_NAME_CHARS, Declared, MaybeConversationId, Name


def _text(limit: int, description: str) -> Any:
    """An optional text field (empty when left out) of at most `limit` characters."""
    return Field("", max_length=limit, description=description)


# The cross-field rules memory.record_correction checks, as JSON Schema: the question, or the message whose
# question it was; a message_id needs its conversation.
CORRECTION_RULES = {
    "anyOf": [{"required": ["question"], "properties": {"question": {"pattern": NOT_BLANK}}},
              {"required": ["message_id", "conversation_id"],
               "properties": {"message_id": {"minLength": 1}, "conversation_id": {"minLength": 1}}}],
    "if": {"required": ["message_id"], "properties": {"message_id": {"minLength": 1}}},
    "then": {"required": ["conversation_id"], "properties": {"conversation_id": {"minLength": 1}}},
}


class CorrectionBody(Declared):
    """A correction as a client sends it: the JSON body of POST /api/corrections, and Gateway.Correct's
    CorrectionRequest put through it."""

    model_config = ConfigDict(json_schema_extra=CORRECTION_RULES)

    correction: str = Field(max_length=CORRECTION_LIMITS["correction"], pattern=NOT_BLANK,
                            description="What the right answer is")
    tenant: Name = Field("", description="Empty or the credential's own tenant (403 otherwise)")
    user_id: Name = Field("", description="Empty or the caller's own user (403 otherwise, for an admin key too)")
    conversation_id: MaybeConversationId = Field("", description=(
        "One of the caller's own conversations (404 otherwise); needed with message_id"))
    message_id: str = _text(MAX_NAME_CHARS, "The wrong answer's message in conversation_id (404 when there is none)")
    question: str = _text(CORRECTION_LIMITS["question"], "The question answered wrongly; may be empty with message_id")
    wrong_answer: str = _text(CORRECTION_LIMITS["wrong_answer"], "Empty with message_id: that answer")
