"""Conversation history in the store: the question is saved before generation,
the answer right after (or the partial answer when the user stopped it); and what of it
a prompt carries: the whole conversation while it fits a character budget, past that the
running summary and every turn after what it covers.

A conversation the client holds (an Ask's `conversation_history`) is read as a stored one is and
stored nowhere: `held_recent`, `held_remembered` and `held_conversation_id`."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ragmesh.errors import NotFound
from ragmesh.identity import Identity
from ragmesh.store import ConversationInfo, ConversationStore, MessageRecord
from ragmesh.text import sha256
from ragmesh.types import Turn
from ragmesh.validation import shown

STOPPED_MARK = "*[Response stopped by user]*"
FAILED_MARK = "*[Response failed: {code}]*"
# The running summary is stored with the turns it covers on its first line, so a prompt knows where
# the summary ends and the verbatim turns must begin.
_COVERS = re.compile(r"\ATurns 1-(\d+):\n")
OVERFLOW = 4  # a summary that lags (or cannot be made) lets the turns after it take up to 4 x the budget


@dataclass(frozen=True)
class Recent:
    """What a question needs of its conversation before routing: how many turns it has, and the last
    few (all of it, for a short conversation, and then the prompt needs no other read)."""

    count: int
    turns: list[Turn]


@dataclass(frozen=True)
class Remembered:
    """What a prompt carries of a conversation: the running summary of its first `covered` turns
    (or none), then every later turn verbatim, so no turn is missing from both."""

    summary: str
    covered: int
    turns: list[Turn]


def turn_chars(turn: Turn) -> int:
    return len(turn.question) + len(turn.answer)


def fitting(turns: list[Turn], budget: int) -> int:
    """How many of the newest turns fit the budget together (the newest one always counts)."""
    used = n = 0
    for turn in reversed(turns):
        used += turn_chars(turn)
        if n and used > budget:
            break
        n += 1
    return n


def carried_whole(recent: Recent, budget: int) -> Remembered | None:
    """The conversation whole, when the turns already read are all of it and fit the budget."""
    if recent.count <= len(recent.turns) and sum(map(turn_chars, recent.turns)) <= budget:
        return Remembered("", 0, recent.turns)
    return None


def held_recent(turns: list[Turn], keep: int) -> Recent:
    """A conversation the client holds, as `History.recent` reads a stored one: how many turns it has,
    and its newest `keep`."""
    return Recent(len(turns), turns[max(0, len(turns) - keep):])


def held_remembered(turns: list[Turn], budget: int) -> Remembered:
    """What a prompt carries of a conversation the client holds: its newest turns that fit `budget`.
    Nothing of it is stored, so no summary is made of the turns that no longer fit, nor read."""
    return Remembered("", 0, turns[len(turns) - fitting(turns, budget):])


HELD_PREFIX = "held-"  # a stored conversation's id is 32 hex digits (uuid4().hex): never this


def held_conversation_id(tenant: str, user: str, first_question: str) -> str:
    """The id that names a conversation the client holds in the events, the scope cache and the running
    answers: the same for every turn of it (its first question: the first of its history, or the
    question itself when it has none), so a held follow-up may reuse the scope of the turn before, as a
    stored one does (checked as then: filters, topic, the hits holding the question's words, and the
    retriever's CheckChunks as the asker). A stored conversation's first search is kept under it too
    (AskPipeline._keep_for_held): a client may hold the conversation from its second turn on.

    The hash covers the tenant and the user, so no other caller's held conversation, nor any stored one,
    has this id; sent back as a conversation_id it names no stored conversation (404). Two held
    conversations of one user that open with the same question (two tabs, or many opening "hi") share
    the id: each turn reuses the latest search made under it only when that search passes the same
    checks (same filters and topic, the question's words in its hits): hits of the same user that a
    search of this question under these filters would find; a NO_RAG follow-up answers from its own
    turns only. Each still ends its own answer: a closed stream stops its own generation."""
    return HELD_PREFIX + sha256(json.dumps([tenant, user, first_question]))[:32]


def with_coverage(summary: str, covered: int) -> str:
    return f"Turns 1-{covered}:\n{summary}"


def coverage(stored: str) -> tuple[str, int]:
    """(summary text, turns it covers) of a stored summary; one stored without its coverage covers
    nothing, so the turns after it are all carried."""
    m = _COVERS.match(stored)
    return (stored[m.end():], int(m.group(1))) if m else (stored, 0)


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


class Unstored:
    """Where the turns of a conversation the client holds are written: nowhere (no conversation, message,
    title or summary is made of them). The ids it returns are empty: the done event names no message."""

    def save_question(self, tenant: str, user_id: str, conversation_id: str, question: str) -> str:
        return ""

    def save_answer(self, conversation_id: str, answer: str, meta: dict, stopped: bool = False,
                    failed: str = "") -> str:
        return ""

    def drop_question(self, tenant: str, conversation_id: str, question_id: str) -> None:
        """Nothing was saved."""


class History:
    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    def recent(self, conversation_id: str, keep: int) -> Recent:
        """How many turns the conversation has, and its last `keep` turns, read from its newest
        messages only: a long conversation is not read whole before every answer."""
        window = self.store.messages(conversation_id, limit=2 * keep + 2, with_meta=False) if keep > 0 else []
        return Recent(self.store.answer_count(conversation_id), _pairs(window)[-keep:] if window else [])

    def newest_turns(self, conversation_id: str, count: int, budget: int, after: int,
                     known: list[Turn] | None = None) -> list[Turn]:
        """The newest turns: at least those that fit `budget`, and every turn after the first `after`
        (what a summary covers) up to OVERFLOW x budget. Read newest first, in growing pages, so a
        long conversation is read only as far back as the prompt needs; `known` are its last turns
        already read (enough when they are all of it)."""
        if known is not None and len(known) >= count:
            pairs = known
        else:
            page = 8
            while True:
                messages = self.store.messages(conversation_id, limit=2 * page + 2, with_meta=False)
                pairs = _pairs(messages)
                chars = sum(map(turn_chars, pairs))
                if len(messages) < 2 * page + 2 or len(pairs) >= count or chars > OVERFLOW * budget \
                        or (chars > budget and len(pairs) >= count - after):
                    break
                page *= 4
        keep = max(fitting(pairs, budget), min(count - after, fitting(pairs, OVERFLOW * budget)))
        return pairs[len(pairs) - keep:]

    def turns_after(self, conversation_id: str, after: int) -> list[Turn]:
        """The turns after the first `after` (those a summary does not cover yet), oldest first."""
        due = self.store.answer_count(conversation_id) - after
        if due <= 0:
            return []
        return _pairs(self.store.messages(conversation_id, limit=2 * due + 2, with_meta=False))[-due:]

    def remembered(self, conversation_id: str, recent: Recent, budget: int) -> Remembered:
        """The conversation as a prompt carries it: whole while it fits `budget` characters; past
        that, the running summary and the turns after it (at least the newest that fit)."""
        if (whole := carried_whole(recent, budget)) is not None:
            return whole
        summary, covered = coverage(self.store.conversation_summary(conversation_id))
        turns = self.newest_turns(conversation_id, recent.count, budget, covered, recent.turns)
        return Remembered(summary if recent.count > len(turns) else "", covered, turns)

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
        """Stop before any answer: a question stopped before any answer is removed, not kept with a bare stop
        mark; a conversation it leaves empty goes too (no untitled conversation in the list)."""
        self.store.delete_message(question_id)
        if not self.store.messages(conversation_id, limit=1):
            self.store.delete_conversation(tenant, conversation_id)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        return self.store.messages(conversation_id)

    def require(self, who: Identity, conversation_id: str) -> None:
        """Raises NotFound unless the conversation is the caller's own: whatever the role, another user's
        answers as an unknown id does (same words), so ids cannot be probed and no admin reads a colleague's."""
        owner = self.store.conversation_owner(conversation_id)
        if owner != (who.tenant, who.user):  # None: no such conversation
            raise NotFound(f"conversation {shown(conversation_id)} not found")

    def own_recent(self, who: Identity, conversation_id: str, keep: int) -> Recent:
        """`recent` of a conversation that must be the caller's own: `require` and the read in one trip."""
        self.require(who, conversation_id)
        return self.recent(conversation_id, keep)

    def conversations(self, who: Identity, limit: int = 50, offset: int = 0) -> list[ConversationInfo]:
        """The caller's own conversations, whatever its role."""
        return self.store.conversations(who.tenant, who.user, limit, offset)
