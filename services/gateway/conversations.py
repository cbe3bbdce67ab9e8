"""Conversations as a caller sees them: list, read, rename, stop and delete, each checked against the
caller's identity. One place for both the gRPC servicer and the HTTP router."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from ragmesh.errors import Unavailable
from ragmesh.identity import Identity
from ragmesh.paging import DEFAULT_PAGE, Page, page
from ragmesh.store import ConversationInfo, MessageRecord
from ragmesh.text import one_line
from ragmesh.validation import check_page, check_text
from services.gateway.history import History
from services.gateway.memory import Memory
from services.gateway.pipeline import AskPipeline

MAX_TITLE_CHARS = 200


class Conversations:
    def __init__(self, history: History, memory: Memory, pipeline: AskPipeline) -> None:
        self.history = history
        self.memory = memory
        self.pipeline = pipeline

    async def list(self, who: Identity, limit: int | None = None, offset: int = 0) -> Page[ConversationInfo]:
        """Newest first; `offset` skips that many (the next page starts where the last one ended). A title
        made from the first question is shown on one line like a renamed one (`rename`)."""
        limit = DEFAULT_PAGE if limit is None else limit
        check_page(limit, offset)
        found = await asyncio.to_thread(self.history.conversations, who, limit, offset)
        return page([dataclasses.replace(c, title=one_line(c.title)) for c in found], limit, offset)

    async def rename(self, who: Identity, conversation_id: str, title: str) -> str:
        """Sets the title the list shows (blank: the first question again); returns the title kept: one
        line, without control or bidirectional-override characters (ragmesh.text.one_line)."""
        title = one_line(check_text("title", title, MAX_TITLE_CHARS))
        await asyncio.to_thread(self.history.require, who, conversation_id)
        await asyncio.to_thread(self.history.store.rename_conversation, who.tenant, conversation_id, title)
        return title

    async def messages(self, who: Identity, conversation_id: str) -> list[MessageRecord]:
        await asyncio.to_thread(self.history.require, who, conversation_id)
        return await asyncio.to_thread(self.history.messages, conversation_id)

    async def stop(self, who: Identity, conversation_id: str) -> bool:
        """True when an answer was running and is now stopped (and what it left stored)."""
        await asyncio.to_thread(self.history.require, who, conversation_id)
        return await self.pipeline.stop(conversation_id)

    async def delete(self, who: Identity, conversation_id: str) -> None:
        """The conversation, its messages, summary and corrections, its messages embedded in the
        conversation memory and its cached search results (the scope entry, on every replica): nothing
        of it stays searchable or reusable. The copies go first and the conversation last, so a copy
        that cannot be removed now (Unavailable: Redis or the retriever away) leaves the conversation
        there to be deleted again."""
        await asyncio.to_thread(self.history.require, who, conversation_id)
        with contextlib.suppress(Unavailable):  # an answer on a replica the shared state cannot reach goes on
            await self.pipeline.stop(conversation_id)  # nothing of a running answer is stored after the delete
        await self.pipeline.cache.forget(who.tenant, conversation_id)
        await self.memory.forget(conversation_id)
        await asyncio.to_thread(self.history.store.delete_conversation, who.tenant, conversation_id)
