"""Conversation history in the store: the question is saved before generation,
the answer right after (or the partial answer when the user stopped it)."""
from __future__ import annotations

from dataclasses import dataclass

from ragmesh.errors import NotFound
from ragmesh.identity import Identity
from ragmesh.store import ConversationInfo, MessageRecord, Store
from ragmesh.types import Turn
from ragmesh.validation import shown

STOPPED_MARK = "*[Response stopped by user]*"
FAILED_MARK = "*[Response failed: {code}]*"


@dataclass(frozen=True)
class Recent:
    """What a question needs of its conversation: how many turns it has (routing, summaries), and the
    last few (the prompt)."""

    count: int
    turns: list[Turn]


def _pairs(messages: list[MessageRecord]) -> list[Turn]:
    """Completed question/answer pairs, oldest first."""
    pairs: list[Turn] = []
    pending: str | None = None
    for m in messages:
        if m.role == "user":
            pending = m.content
        elif m.role == "assistant" and pending is not None:
            pairs.append(Turn(pending, m.content))
            pending = None
    return pairs


class History:
    def __init__(self, store: Store) -> None:
        self.store = store

    def recent(self, conversation_id: str, keep: int) -> Recent:
        """How many turns the conversation has, and its last `keep` turns, read from its newest
        messages only: a long conversation is not read whole before every answer."""
        window = self.store.messages(conversation_id, limit=2 * keep + 2, with_meta=False) if keep > 0 else []
        return Recent(self.store.answer_count(conversation_id), _pairs(window)[-keep:] if window else [])

    def save_question(self, tenant: str, user_id: str, conversation_id: str, question: str) -> str:
        self.store.ensure_conversation(tenant, user_id, conversation_id)
        return self.store.add_message(conversation_id, "user", question, {})

    def save_answer(self, conversation_id: str, answer: str, meta: dict, stopped: bool = False,
                    failed: str = "") -> str:
        """Stores the answer; a partial one ends with what cut it short: the user, or a failure (its code)."""
        mark = FAILED_MARK.format(code=failed) if failed else STOPPED_MARK if stopped else ""
        if mark:
            answer = f"{answer}\n\n{mark}" if answer else mark
        return self.store.add_message(conversation_id, "assistant", answer, meta)

    def drop_question(self, tenant: str, conversation_id: str, question_id: str) -> None:
        """000's stop flow: a question stopped before any answer is removed, not kept with a bare stop
        mark; a conversation it leaves empty goes too (no untitled conversation in the list)."""
        self.store.delete_message(question_id)
        if not self.store.messages(conversation_id, limit=1):
            self.store.delete_conversation(tenant, conversation_id)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        return self.store.messages(conversation_id)

    def require(self, who: Identity, conversation_id: str, *, owner_only: bool = False) -> None:
        """Raises NotFound unless the conversation is the caller's (or, without owner_only, in an admin's
        tenant). Unknown and not-yours raise the same error, so ids cannot be probed."""
        owner = self.store.conversation_owner(conversation_id)
        mine = owner is not None and owner[0] == who.tenant and (
            owner[1] == who.user or (who.is_admin and not owner_only))
        if not mine:
            raise NotFound(f"conversation {shown(conversation_id)} not found")

    def own_recent(self, who: Identity, conversation_id: str, keep: int) -> Recent:
        """`recent` of a conversation that must be the caller's own: `require` and the read in one trip."""
        self.require(who, conversation_id, owner_only=True)
        return self.recent(conversation_id, keep)

    def conversations(self, who: Identity, limit: int = 50, offset: int = 0) -> list[ConversationInfo]:
        """The caller's conversations; an admin's are every user's in its tenant."""
        return self.store.conversations(who.tenant, None if who.is_admin else who.user, limit, offset)
