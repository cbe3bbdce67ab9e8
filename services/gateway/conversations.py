"""Conversations as a caller sees them: list, read, stop and delete, each checked against the
caller's identity. One place for both the gRPC servicer and the HTTP router."""
from __future__ import annotations

import asyncio

from ragmesh.errors import InvalidArgument
from ragmesh.identity import Identity
from ragmesh.store import ConversationInfo, MessageRecord
from services.gateway.history import History
from services.gateway.memory import Memory
from services.gateway.pipeline import AskPipeline

MAX_LIST = 200


class Conversations:
    def __init__(self, history: History, memory: Memory, pipeline: AskPipeline) -> None:
        self.history = history
        self.memory = memory
        self.pipeline = pipeline

    async def list(self, who: Identity, limit: int | None = None) -> list[ConversationInfo]:
        limit = 50 if limit is None else limit
        if not 1 <= limit <= MAX_LIST:
            raise InvalidArgument("limit", f"must be 1..{MAX_LIST}, got {limit}")
        return await asyncio.to_thread(self.history.conversations, who, limit)

    async def messages(self, who: Identity, conversation_id: str) -> list[MessageRecord]:
        await asyncio.to_thread(self.history.require, who, conversation_id)
        return await asyncio.to_thread(self.history.messages, conversation_id)

    async def stop(self, who: Identity, conversation_id: str) -> bool:
        """True when an answer was running and is now stopped."""
        await asyncio.to_thread(self.history.require, who, conversation_id)
        return self.pipeline.stop(conversation_id)

    async def delete(self, who: Identity, conversation_id: str) -> None:
        """The conversation, its messages, summary and corrections, and its messages embedded in the
        conversation memory: nothing of it stays searchable."""
        await asyncio.to_thread(self.history.require, who, conversation_id)
        self.pipeline.stop(conversation_id)
        await asyncio.to_thread(self.history.store.delete_conversation, who.tenant, conversation_id)
        await self.memory.forget(conversation_id)
