"""What the gateway remembers beyond the message log, done in the background so the
answer is never delayed: a running conversation summary of the turns that no longer
fit the prompt's history budget, extended as turns stop fitting; each turn, its question and answer, in a per-user
`conversations` collection that the "Conversation memory" source searches (found by the question's vector, which
its search already has, and by the words of both); and the user's corrections, the most relevant of which go into
the system prompt."""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import weakref
from collections.abc import AsyncIterator, Coroutine

import numpy as np

from ragmesh import convert
from ragmesh.clients import EmbedderClient, GeneratorClient, RetrieverClient
from ragmesh.errors import InvalidArgument, NotFound, RagmeshError, ResourceExhausted, Unavailable
from ragmesh.identity import Identity
from ragmesh.models import EXTRACTIVE
from ragmesh.store import ConversationStore, CorrectionRecord
from ragmesh.text import strip_citations, tokenize
from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION, ContextBlock, Document, SearchFilter, Turn
from ragmesh.v1 import retriever_pb2
from services.gateway.history import History, coverage, fitting, with_coverage
from ragmesh.validation import check_text
from services.gateway.request import MAX_NAME_CHARS, MAX_QUESTION_CHARS

log = logging.getLogger(__name__)

SHORTLIST = 12  # corrections embedded per question, after a shared-word shortlist
CORRECTIONS_EMBED_TIMEOUT_S = 1.0  # before every answer: past this, shared words decide
CORRECTION_LIMITS = {"correction": 4000, "question": MAX_QUESTION_CHARS, "wrong_answer": 20_000,
                     "conversation_id": MAX_NAME_CHARS}
REMEMBER_RETRIES = 4  # memory embedding: tries after the first, waiting 0.5, 1, 2, 4 s
# The background work starts this long after the answer: a follow-up asked at once then has the embedder
# and the CPU to itself, instead of queueing behind the previous turn's messages (make bench, pipeline).
SETTLE_S = 0.25
SUMMARY_QUESTION = "Summarize this conversation: the user's goals, the decisions made and the key facts and figures."
DIGEST_ANSWER_CHARS = 300  # offline summary: each folded turn's question and the start of its answer


class Memory:
    def __init__(self, store: ConversationStore, retriever: RetrieverClient, generator: GeneratorClient,
                 embedder: EmbedderClient, history_char_budget: int = 6000, queue_max: int = 1000,
                 retry_base_s: float = 0.5, settle_s: float = SETTLE_S) -> None:
        self.store = store
        self.retriever = retriever
        self.generator = generator
        self.embedder = embedder
        self.history_char_budget = history_char_budget
        # One summary update at a time per conversation; a lock goes when no update holds it.
        self._folding: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self.queue_max = queue_max
        self.retry_base_s = retry_base_s
        self.settle_s = settle_s
        self.dropped = 0  # background work refused because the queue was full
        self._tasks: dict[asyncio.Task, str] = {}  # background work -> its conversation

    def _spawn(self, conversation_id: str, work: Coroutine) -> None:
        if len(self._tasks) >= self.queue_max:  # bounded: under overload the answers come first
            work.close()
            self.dropped += 1
            log.warning("memory work dropped: queue full", extra={"conversation_id": conversation_id,
                                                                  "queue_max": self.queue_max})
            return
        task = asyncio.create_task(self._settled(work))  # copies the context: the work acts as the caller's identity
        self._tasks[task] = conversation_id
        task.add_done_callback(lambda t: self._tasks.pop(t, None))

    async def _settled(self, work: Coroutine) -> None:
        try:
            await asyncio.sleep(self.settle_s)
        except BaseException:
            work.close()
            raise
        await work

    async def idle(self) -> None:
        """Waits for the background work scheduled so far (tests, graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def forget(self, conversation_id: str) -> None:
        """Removes a deleted conversation's messages from the conversation memory, after its pending
        background work, so none of it comes back."""
        pending = [t for t, c in self._tasks.items() if c == conversation_id]
        await asyncio.gather(*pending, return_exceptions=True)
        await self.retriever.delete(MEMORY_COLLECTION, where=SearchFilter(equals={"conversation_id": conversation_id}))

    async def _exists(self, conversation_id: str) -> bool:
        return await asyncio.to_thread(self.store.conversation_owner, conversation_id) is not None

    async def _unless_deleted(self, conversation_id: str) -> None:
        """A conversation deleted while its messages were embedded (its delete may have run on another
        replica, which does not wait for this one's work) loses what was just written."""
        if not await self._exists(conversation_id):
            await self.retriever.delete(MEMORY_COLLECTION, where=SearchFilter(equals={"conversation_id": conversation_id}))

    def after_turn(self, tenant: str, user_id: str, conversation_id: str, turns: int, model: str,
                   messages: list[tuple[str, str, str]], question_vector: np.ndarray | None = None) -> None:
        """Schedules the turn's memory, and (once the conversation outgrows the history budget) the summary of
        the turns that stopped fitting. `messages` are the turn's (message_id, role, text), the user's first;
        `question_vector` is the question's QUERY vector, when its search embedded it."""
        self._spawn(conversation_id, self._remember(tenant, user_id, conversation_id, messages, question_vector))
        if turns > 1:
            self._spawn(conversation_id, self._summarize(conversation_id, model))

    async def _turn_vector(self, question: str, vector: np.ndarray | None) -> np.ndarray | None:
        """The vector the turn is found by: its question's, embedded now when its search did not (a turn
        answered from the conversation). None when the embedder cannot: the retriever embeds the turn's text."""
        if vector is not None or not question.strip():
            return vector
        try:
            return (await self.embedder.embed([question], "QUERY"))[0]
        except RagmeshError:
            return None

    async def _remember(self, tenant: str, user_id: str, conversation_id: str,
                        messages: list[tuple[str, str, str]], question_vector: np.ndarray | None = None) -> None:
        """One record a turn: the question and the answer (without its citation markers) as one text, whose
        words are searched, with the question's vector. Nothing of the answer is embedded: what a later question
        shares with an answer alone is its rare words (a name, a figure), which the keyword search finds."""
        texts = {role: strip_citations(text).strip() for _, role, text in messages}
        question, answer = texts.get("user", ""), texts.get("assistant", "")
        if not (question or answer):
            return
        text = "\n\n".join(filter(None, (question and f"User: {question}", answer)))
        turn = Document(
            doc_id=messages[0][0], collection=MEMORY_COLLECTION, text=text, tenant=tenant,
            date=dt.datetime.now(dt.timezone.utc).date().isoformat(),  # dated: the conversation boosters' recency boost
            metadata={MEMORY_AUTHOR: user_id, "conversation_id": conversation_id, "role": "turn"},
            vector=await self._turn_vector(question, question_vector),
            summarize=False)  # a long answer's turn too: nothing reads a memory record's summary

        async def documents() -> AsyncIterator[retriever_pb2.Document]:
            yield convert.document_to_proto(turn)

        for attempt in range(REMEMBER_RETRIES + 1):
            failed = []
            try:
                async for progress in self.retriever.ingest(documents()):
                    if progress.error:
                        failed.append(progress.error)
            except (Unavailable, ResourceExhausted) as exc:  # busy or restarting: worth another try
                failed.append(str(exc))
            except RagmeshError as exc:
                log.warning("memory embedding failed", extra={"conversation_id": conversation_id, "error": str(exc)})
                return
            if not failed:
                await self._unless_deleted(conversation_id)
                return
            if attempt < REMEMBER_RETRIES:
                await asyncio.sleep(self.retry_base_s * 2 ** attempt)
        log.warning("memory embedding failed after retries",
                    extra={"conversation_id": conversation_id, "errors": failed[:3], "tries": REMEMBER_RETRIES + 1})

    async def _summarize(self, conversation_id: str, model: str) -> None:
        """Folds the turns that no longer fit the budget into the running summary (with the model, or
        offline as a digest of each turn), so the prompt's summary always reaches its verbatim turns."""
        lock = self._folding.setdefault(conversation_id, asyncio.Lock())  # held while in use, then let go
        async with lock:
            await self._fold(conversation_id, model)

    async def _fold(self, conversation_id: str, model: str) -> None:
        previous, covered = coverage(await asyncio.to_thread(self.store.conversation_summary, conversation_id))
        unsummarised = await asyncio.to_thread(History(self.store).turns_after, conversation_id, covered)
        due = len(unsummarised) - fitting(unsummarised, self.history_char_budget)  # no longer fit beside newer ones
        if due <= 0:
            return
        summary = await self._summary(conversation_id, previous, unsummarised[:due], model)
        if summary and await self._exists(conversation_id):  # deleted meanwhile (on another replica): not written
            await asyncio.to_thread(self.store.set_conversation_summary, conversation_id,
                                    with_coverage(summary, covered + due))
            log.info("conversation summary updated", extra={"conversation_id": conversation_id, "chars": len(summary),
                                                            "covers_turns": covered + due})

    async def _summary(self, conversation_id: str, previous: str, folded: list[Turn], model: str) -> str:
        earlier = [previous] if previous else []
        if model == EXTRACTIVE:  # no model to summarise with: each turn's question and the start of its answer
            return "\n".join(earlier + [_digest(t) for t in folded])
        texts = earlier + [f"User: {t.question}\n\n{strip_citations(t.answer)}" for t in folded]
        blocks = [ContextBlock(index=i, text=t, label="Conversation") for i, t in enumerate(texts, start=1)]
        try:
            reply = await self.generator.complete(
                model=model, question=SUMMARY_QUESTION, blocks=blocks,
                system_instruction="You keep a concise running summary of a conversation.",
                prompt=SUMMARY_QUESTION + "\n\n" + "\n\n".join(texts))
        except RagmeshError as exc:
            log.warning("conversation summary not updated",
                        extra={"conversation_id": conversation_id, "error": str(exc)})
            return ""
        return strip_citations(reply).strip()

    # -- corrections ----------------------------------------------------------------------------
    def record_correction(self, who: Identity, record: CorrectionRecord, message_id: str = "") -> str:
        """Stores the caller's correction; with a message id, the question and the wrong answer come from
        the log. The conversation must be the caller's own: another's answers the same NotFound as an
        unknown id, and nothing of it is copied."""
        for name, limit in CORRECTION_LIMITS.items():
            check_text(name, getattr(record, name), limit)
        check_text("message_id", message_id, MAX_NAME_CHARS)
        if not record.correction.strip():
            raise InvalidArgument("correction", "must say what the right answer is")
        record.tenant, record.user_id = who.tenant, who.user
        if message_id and not record.conversation_id:
            raise InvalidArgument("conversation_id", "is needed with message_id")
        if record.conversation_id:
            History(self.store).require(who, record.conversation_id)
        if message_id:
            messages = self.store.messages(record.conversation_id)
            found = [i for i, m in enumerate(messages) if m.message_id == message_id and m.role == "assistant"]
            if not found:
                raise NotFound(f"message {message_id!r} not found")
            i = found[0]
            record.wrong_answer = record.wrong_answer or messages[i].content
            if i and not record.question:
                record.question = messages[i - 1].content
        if not record.question.strip():
            raise InvalidArgument("question", "give the question, or the message_id of the wrong answer")
        return self.store.add_correction(record)

    async def relevant_corrections(self, tenant: str, user_id: str, question: str, k: int = 3) -> list[CorrectionRecord]:
        """The user's k corrections closest to the question. This runs before every answer, so shared
        words shortlist SHORTLIST of them cheaply and only those are embedded (or, with the embedder
        down, the shortlist's best by shared words stand)."""
        records = await asyncio.to_thread(self.store.corrections, tenant, user_id)
        if len(records) <= k:
            return records
        words = set(tokenize(question))
        overlap = [len(words & set(tokenize(f"{r.question} {r.correction}"))) for r in records]
        shortlist = [records[i] for i in np.argsort(-np.asarray(overlap), kind="stable")[:SHORTLIST]]
        try:
            vectors = await self.embedder.embed([question, *(f"{r.question} {r.correction}" for r in shortlist)],
                                                "QUERY", CORRECTIONS_EMBED_TIMEOUT_S)
        except RagmeshError:
            return shortlist[:k]
        best = np.argsort(-(vectors[1:] @ vectors[0]), kind="stable")[:k]
        return [shortlist[i] for i in best]


def _digest(turn: Turn) -> str:
    """One line of the offline summary: what was asked, and what the answer said first."""
    lines = [ln.strip().lstrip("-* ").strip() for ln in strip_citations(turn.answer).splitlines()]
    said = " ".join(ln for ln in lines if ln and not ln.endswith(":"))
    return f"- Asked: {turn.question.strip()} Answered: {said[:DIGEST_ANSWER_CHARS]}"


def corrections_text(records: list[CorrectionRecord]) -> str:
    """The corrections as the system prompt states them."""
    if not records:
        return ""
    lines = ["Corrections this user made to earlier answers (apply them):"]
    for r in records:
        wrong = f' the answer "{r.wrong_answer[:200]}" was wrong;' if r.wrong_answer else ""
        lines.append(f'- Asked "{r.question[:200]}":{wrong} correct is "{r.correction[:400]}"')
    return "\n".join(lines)
