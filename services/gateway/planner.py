"""The planner: everything decided before generation, as one Plan: the route, the filters (including
those read from the question), whether the cached scope is reused, the quality steps run around the
search, and the hits, searched per collection under the retrieval deadline and merged by rank (each
collection's first, then each one's second: `collection_merge.by_rank`), since each collection's search
scores on its own scale. The planner alone writes a Plan; once `Planner.plan` returns it, it is only
read (the strategy event is assembled from it)."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ragmesh import tracing
from ragmesh.clients import EmbedderClient, GeneratorClient, RetrieverClient, SearchResult
from ragmesh.config import AnsweringSettings
from ragmesh.errors import NotFound, RagmeshError
from ragmesh.models import EXTRACTIVE
from ragmesh.types import MEMORY_COLLECTION, Chunk, Hit, SearchFilter
from ragmesh.validation import MAX_VARIANTS
from services.gateway import boosts, collection_merge, context, followup, router
from services.gateway.context_budgets import ContextBudgets
from services.gateway.followup import Followup
from services.gateway.history import Recent
from services.gateway.quality import QualityStack, QualityStep
from services.gateway.question_lookup import numbered_filter
from services.gateway.reading import Reading, read
from services.gateway.request import AskInput, document_ref
from services.gateway.scope import Scope
from services.gateway.scope_cache import ScopeEntry, Scopes

log = logging.getLogger(__name__)

RAG_REUSE, RAG_NEW_QUERY, NO_RETRIEVAL = "RAG_REUSE", "RAG_NEW_QUERY", "NO_RAG"
SEARCH_DEPTH = 15  # hits kept per search, so any route can reuse the cached scope
# The question's embedding may take at most this share of the retrieval deadline; the searches get
# the rest. A slow embedder then means keyword-only search (said so), never a search that never ran.
EMBED_SHARE = 0.5


@dataclass
class Plan:
    """What the planner decided for one question, and the hits it found."""

    route: str
    retrieval: str  # RAG_NEW_QUERY | RAG_REUSE | NO_RAG (no search)
    reason: str
    conversation_id: str
    collections: list[str]
    filter: SearchFilter
    followup: Followup  # whether it reworks the conversation, and the signal that decided
    model: str
    k: int = 0
    cache_key: str = ""
    cache_hit: bool = False
    candidate_count: int = 0
    retrieval_ms: float = 0.0
    embed_ms: float = 0.0  # the question's embedding, request to vector (it may start before retrieval_ms does)
    search_ms: float = 0.0  # of retrieval_ms, waiting for the searches
    check_ms: float = 0.0  # checking a cached scope's sources, beside the embedding (0: none checked)
    dense_skipped: bool = False
    unavailable: list[str] = field(default_factory=list)  # collections whose search failed or timed out
    threshold_layer: int = 0
    time_hint: str = ""
    time_window: str = ""  # the retriever's window filter (24h | 48h | 1w | all)
    detected_funds: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)  # the question rewritten, searched with it
    rerank_count: int = 0
    quality: list[QualityStep] = field(default_factory=list)  # the quality steps run while planning, in order
    hits: list[Hit] = field(default_factory=list, repr=False)
    recency: str = ""  # the words asking for the latest, which sent the retriever's time decay
    # The question's vector when it was embedded as asked (not in other words): memory stores it as is.
    question_vector: np.ndarray | None = field(default=None, repr=False)
    default_window: dict[str, int] = field(default_factory=dict)  # collection -> days of its default window searched
    relaxed: list[str] = field(default_factory=list)  # filters read from the question, loosened, and why
    reading: Reading | None = field(default=None, repr=False)  # the question's, with what it inherits

    @property
    def searched(self) -> bool:
        """A search was planned (its quality steps ran): not a direct, summary or follow-up route."""
        return bool(self.quality)


def _not_reusable(reading: Reading, s: Plan, cached: ScopeEntry | None) -> str:
    """Why the cached scope cannot be reused whatever the question's topic, or "" when it may be."""
    if cached is None:
        return "no cached scope for this conversation"
    if cached.key != s.cache_key:
        return f"filters changed ({cached.key} -> {s.cache_key})"
    if missing := followup.not_in_hits(reading.words, cached.hits):
        return f"same filters, but {', '.join(missing)} not in the cached hits"
    if kind := followup.new_kind(reading.kinds, cached.question):
        return f"same filters, but it asks for {kind}, the cached search did not"
    return ""


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    if a is None or b is None or a.shape != b.shape:  # a vector of another model (or from a bad entry): unknown
        return None
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class Planner:
    def __init__(self, retriever: RetrieverClient, generator: GeneratorClient, embedder: EmbedderClient,
                 cache: Scopes, known_funds: Callable[[str], Awaitable[list[str]]], settings: AnsweringSettings,
                 default_model: str, windows: dict[str, int],
                 today: Callable[[], dt.date] = lambda: dt.datetime.now(dt.timezone.utc).date()) -> None:
        """`settings`: the gateway's; `default_model`: the model of a question that names none;
        `windows`: the time window per data source (collection -> days, from DEFAULT_WINDOW_DAYS)."""
        self.retriever = retriever
        self.generator = generator
        self.embedder = embedder
        self.cache = cache
        self.known_funds = known_funds
        self.settings = settings
        self.default_model = default_model
        self.windows = windows
        self.today = today
        self.quality = QualityStack(generator, settings)
        self.budgets = ContextBudgets(generator, settings)  # what each model's context takes

    def read(self, ask: AskInput) -> Reading:
        """The question's one reading (services/gateway/reading.py); `plan` adds the funds it names."""
        return read(ask.question, self.today())

    def embed_early(self, ask: AskInput, reading: Reading) -> asyncio.Task[tuple[np.ndarray | None, float]] | None:
        """The question's embedding, started before its conversation is read when every route the
        question can take searches (only NO_RAG depends on the conversation, and only a question that
        refers back can take it, and only an elliptical one is searched in other words): it then runs while
        history is read and the question routed, so a question that reuses its scope waits for little more
        than its embedding. None when a route may not need it."""
        if followup.may_rework(reading) or not router.route(reading, None, len(ask.document_ids)).retrieves:
            return None
        return asyncio.ensure_future(self._embed_question(ask.question))

    async def plan(self, ask: AskInput, conversation: Recent,
                   embedding: asyncio.Future[tuple[np.ndarray | None, float]] | None = None,
                   reading: Reading | None = None) -> Plan:
        """Route, filters, scope decision and hits for one question in `conversation`;
        `embedding` is the question's embedding if `embed_early` started it, `reading` the question's
        reading if the caller made it (else it is read here)."""
        turns = conversation.count
        # The conversation's last search: the follow-up check reads it, and so does the reuse decision.
        cached = await self.cache.get(ask.tenant, ask.conversation_id) if turns else None
        reading = reading or self.read(ask)
        # The known funds are looked up for what the question names and the conversation's turns (a greeting
        # that opens a conversation needs neither: it is answered whatever the retriever does).
        known = await self.known_funds(ask.tenant) if not reading.small_talk or conversation.turns else []
        reading = reading.naming(known).following(conversation.turns, known, self.today())
        with tracing.span("routing"):
            follow = await self._followup(ask, conversation, cached, reading)
            rt = router.route(reading, follow, len(ask.document_ids))
            tracing.annotate(route=rt.name, reason=rt.reason, followup=follow.signal)
        if ask.top_k and rt.retrieves:
            rt = dataclasses.replace(rt, k=ask.top_k)
        elif rt.retrieves:  # as many hits as the model's context takes, never fewer than the route's
            rt = dataclasses.replace(rt, k=max(rt.k, (await self.budgets.get(self._model(ask, rt))).hits))
        asked = Scope.asked(ask)
        s = Plan(rt.name, NO_RETRIEVAL, rt.reason, ask.conversation_id, ask.collections,
                 asked.search_filter(ask.tenant), follow,
                 self._model(ask, rt), k=rt.k, reading=reading)
        if said := reading.carried.describe():
            s.reason += f"; {said}"
        if rt.name == router.SUMMARY:
            if await self._summary_hits(ask, s, rt.contents):
                return s
            why = ("contents asked, but the document has no outline" if rt.contents
                   else "summary asked, but the document has no summary or outline")
            rt = router.Route(router.SPECIFIC, why, 10, 0.5)
            s.route, s.reason, s.k = rt.name, rt.reason, rt.k
        if not rt.retrieves:
            return s
        s.cache_key = self._read_question(ask, asked, s, reading).key
        started = time.perf_counter()
        deadline = time.monotonic() + self.settings.retrieval_timeout_s
        s.retrieval, why = RAG_NEW_QUERY, _not_reusable(reading, s, cached)
        # A scope that may be reused has its sources checked beside the question's embedding.
        checking = asyncio.ensure_future(self._changed(cached, s)) if cached and not why else None
        try:
            with tracing.span("embedding"):
                vector, s.embed_ms = await (embedding or self._embed_question(reading.text))
            s.question_vector = vector if embedding is not None or reading.text == ask.question else None
            if cached is not None and checking is not None:
                same, note = await self._same_topic(cached, reading.text, vector, s.model)
                if not same:
                    why = f"same filters, different topic {note}"
                elif changed := await checking:
                    why = f"same filters and topic {note}, but {changed}: searched again"
                    with contextlib.suppress(RagmeshError):  # left in Redis, it is checked again before any reuse
                        await self.cache.forget(ask.tenant, ask.conversation_id)
                else:
                    s.retrieval, s.cache_hit, why = RAG_REUSE, True, f"same filters and topic {note}"
                    s.hits, s.candidate_count = cached.hits, cached.candidate_count
        finally:
            if checking is not None:
                checking.cancel()
        s.reason += f"; {why}"
        paused = time.monotonic()
        rewritten = await self.quality.rewrite(reading.text, s.model, s.cache_hit)
        s.quality.append(rewritten.step)
        s.variants = rewritten.variants + followup.search_context(reading, conversation.turns)
        deadline += time.monotonic() - paused  # the model's time is not taken from the searches'
        if s.retrieval == RAG_NEW_QUERY:
            searching = time.perf_counter()
            await self._search(ask, reading, rt, s, vector, deadline)
            s.search_ms = (time.perf_counter() - searching) * 1000
            if not s.unavailable:
                await self.cache.put(ask.tenant, ask.conversation_id, ScopeEntry(
                    s.cache_key, s.collections, reading.text, vector, s.hits, s.candidate_count,
                    asked=asked.key))
        reranked = await self.quality.rerank(reading.text, s.model, s.hits)
        s.quality.append(reranked.step)
        s.hits, s.rerank_count = reranked.hits[: s.k], reranked.scored
        from_history = await self.quality.use_history(s.model, s.hits, s.dense_skipped, s.threshold_layer, turns)
        s.quality.append(from_history.step)
        if from_history.used:
            s.retrieval, s.hits = NO_RETRIEVAL, []
        s.retrieval_ms = (time.perf_counter() - started) * 1000
        log.info("retrieval", extra={"route": s.route, "retrieval": s.retrieval, "chunks": len(s.hits),
                                     "retrieval_ms": round(s.retrieval_ms, 1), "candidates": s.candidate_count,
                                     "cache_hit": s.cache_hit, "check_ms": round(s.check_ms, 2),
                                     "unavailable": s.unavailable})
        return s

    async def _changed(self, cached: ScopeEntry, s: Plan) -> str:
        """Why the cached scope may not be answered from, or "" when every text it holds is still there,
        readable by the asker and unchanged (the retriever's CheckChunks, called as the asker: a
        revoked share counts as a delete). A scope the retriever could not check in the embedding's
        share of the deadline is not reused either (the search has its fallbacks)."""
        checked = time.perf_counter()
        sources = cached.sources()
        if not sources:
            return ""
        try:
            with tracing.span("checking sources", chunks=len(sources)):
                current = await asyncio.wait_for(self.retriever.check_chunks(sources),
                                                 self.settings.retrieval_timeout_s * EMBED_SHARE)
        except (RagmeshError, asyncio.TimeoutError) as exc:
            log.warning("cached sources not checked", extra={"error": str(exc) or "no answer in time"})
            return f"the cached sources could not be checked ({str(exc) or 'no answer in time'})"
        finally:
            s.check_ms = (time.perf_counter() - checked) * 1000
        if len(current) == len(sources) and all(current):
            return ""
        gone = len(sources) - sum(current)
        return f"the cached sources changed ({gone} of {len(sources)} deleted, replaced or no longer readable)"

    async def _summary_hits(self, ask: AskInput, s: Plan, contents: bool = False) -> bool:
        """The summary path: the document's pre-computed summary and section summaries as the context, or
        its section titles as a table of contents, which is what `contents` (its chapters asked for)
        always takes. False when it has none of what is asked (search instead)."""
        ref = ask.document_ids[0]
        collection, doc_id = document_ref(ref)
        record = None
        for name in [collection] if collection else s.collections:
            try:
                record = await self.retriever.get_document(name, doc_id)
                break
            except NotFound:
                continue
        if record is None:
            raise NotFound(f"document_ids: {ref!r} is not in {', '.join([collection] if collection else s.collections)}")
        titles = [sec.title for sec in record.sections if sec.title]
        outline = ["Sections: " + "; ".join(titles)] if titles else []  # a table of contents from the titles
        summaries = [record.summary] if record.summary else []
        summaries += [f"{sec.title}: {sec.summary}" for sec in record.sections if sec.summary]
        texts = outline if contents else summaries or outline
        if not texts:
            return False
        base = Chunk(chunk_id=f"{record.collection}/{record.doc_id}#summary", doc_id=record.doc_id,
                     collection=record.collection, text="", metadata=dict(record.metadata), date=record.date,
                     tenant=record.tenant)
        s.hits = [Hit(dataclasses.replace(base, chunk_id=f"{base.chunk_id}{i or ''}", text=t), 1.0)
                  for i, t in enumerate(texts)]
        s.reason = f"{s.reason}; {'table of contents' if texts is outline else 'summary'} of {ref}"
        return True

    async def _followup(self, ask: AskInput, conversation: Recent, cached: ScopeEntry | None,
                        reading: Reading) -> Followup:
        """Whether the question reworks what the conversation holds: the cheap signals, then the
        model's word when it is configured to check."""
        verdict = followup.decide(reading, ask, conversation.turns, cached)
        model = ask.model or self.default_model
        if not self.settings.scope_llm_check or model == EXTRACTIVE:
            return verdict
        return await followup.confirm(verdict, reading.text, conversation.turns, self.generator, model,
                                      self.settings.scope_llm_timeout_s)

    def _model(self, ask: AskInput, rt: router.Route) -> str:
        if ask.model:
            return ask.model
        if rt.name == router.DEEP and self.settings.reasoning_model:
            return self.settings.reasoning_model
        return self.default_model

    def _read_question(self, ask: AskInput, asked: Scope, s: Plan, reading: Reading) -> Scope:
        """The search's scope: the request's (`asked`) narrowed by a time window, a period and fund names the
        question names or inherits from the conversation, merged by services/gateway/scope.py's rules (never
        replacing what the request set); `s.filter` is made from it. Words asking for the latest send the time
        decay; a question with no dates, window or such words searches the sources that have one within their
        default window (the last N days)."""
        scope = asked.narrowed(latest=bool(recency := reading.recency))
        if window := reading.window:
            scope = scope.narrowed(window=window.window)
            s.time_hint = window.phrase if scope.window != asked.window else ""
        elif hint := reading.scope_period:
            scope = scope.narrowed(start_date=hint.start, end_date=hint.end)
            dates = (scope.start_date, scope.end_date)
            s.time_hint = hint.phrase if dates != (asked.start_date, asked.end_date) else ""
        if named := list(reading.scope_funds):
            scope = scope.narrowed(funds=named)
            s.detected_funds = [f for f in named if f in scope.funds]
            if not s.detected_funds:
                s.reason += (f"; funds the question names or inherits ({', '.join(named)}) are not among those "
                             f"selected: kept")
        s.filter, s.time_window, s.recency = scope.search_filter(ask.tenant), scope.window, recency
        if not (recency or scope.start_date or scope.end_date or scope.window):
            s.default_window = {c: d for c, d in self.windows.items() if c in s.collections}
        return scope

    async def _embed_question(self, question: str) -> tuple[np.ndarray | None, float]:
        """The question's vector for the topic check and the dense search (None if the embedder is down
        or slower than its share of the retrieval deadline), and the milliseconds the call took."""
        started = time.perf_counter()
        try:
            timeout = self.settings.retrieval_timeout_s * EMBED_SHARE
            vector = (await self.embedder.embed([question], "QUERY", timeout))[0]
        except RagmeshError as exc:
            log.warning("embedder unavailable for the question", extra={"error": str(exc)})
            vector = None
        return vector, (time.perf_counter() - started) * 1000

    async def _same_topic(self, cached: ScopeEntry, question: str, vector: np.ndarray | None,
                          model: str) -> tuple[bool, str]:
        """The scope check's slow path: embedding similarity first (milliseconds, no model); an LLM verdict with a
        bounded wait confirms it when enabled, falling back to the similarity verdict."""
        similarity = cosine(cached.question_vector, vector)
        verdict = similarity is not None and similarity >= self.settings.same_topic_threshold
        note = f"(similarity {'unknown' if similarity is None else f'{similarity:.2f}'}"
        if self.settings.scope_llm_check and model != EXTRACTIVE:
            try:
                answer = await asyncio.wait_for(self._llm_topic(cached.question, question, model),
                                                self.settings.scope_llm_timeout_s)
                if answer:
                    verdict = answer == "SAME"
                    note += f", model says {answer}"
            except (asyncio.TimeoutError, RagmeshError):
                note += ", model check timed out"
        return verdict, note + ")"

    async def _llm_topic(self, previous: str, current: str, model: str) -> str:
        prompt = f"Previous: {previous}\nCurrent: {current}\nAre these SAME or DIFFERENT topics? Answer with one word."
        text = (await self.generator.complete(model=model, system_instruction="Classify topics.",
                                              prompt=prompt)).upper()
        return "DIFFERENT" if "DIFFERENT" in text else "SAME" if "SAME" in text else ""

    def _filter_for(self, collection: str, s: Plan, ask: AskInput, windowed: bool = True) -> SearchFilter:
        """The collection's filter; `windowed` adds its default window, if it has one."""
        if collection == MEMORY_COLLECTION:  # past turns: the user's own, whatever the fund or date filter
            f = SearchFilter(tenant=ask.tenant, equals={"user_id": ask.user_id})
        else:
            f = s.filter
        if windowed and (days := s.default_window.get(collection)):
            today = self.today()
            f = dataclasses.replace(f, start_date=(today - dt.timedelta(days=days)).isoformat(),
                                    end_date=today.isoformat())
        return f

    def _relaxations(self, ask: AskInput, s: Plan) -> Iterator[str]:
        """Loosens, one at a time, the filters read from the question back to those the user set, for a
        search they left with nothing. First the dates of a period it names: a note reporting on 2023 is
        dated 2024, and the period's words still rank what mentions it. Then the funds it names (a source
        may hold no fund names), but only with no dates or window left: those would be what found nothing,
        and other funds' notes would not answer. A window such as "the last 24 hours" stays: there the
        notes' own dates are what is asked."""
        f = s.filter
        if s.time_hint and (f.start_date, f.end_date) != (ask.start_date, ask.end_date):
            s.filter = dataclasses.replace(s.filter, start_date=ask.start_date, end_date=ask.end_date)
            yield (f"dates read from the question ({s.time_hint!r}: {f.start_date}..{f.end_date}) matched nothing: "
                   f"relaxed to {'the dates set' if ask.start_date or ask.end_date else 'every date'}")
        undated = not (s.filter.start_date or s.filter.end_date or s.time_window not in ("", "all"))
        selected = {"fund_name": sorted(ask.selected_funds)} if ask.selected_funds else {}
        if s.detected_funds and undated and s.filter.any_of.get("fund_name") != selected.get("fund_name"):
            others = {k: v for k, v in s.filter.any_of.items() if k != "fund_name"}
            s.filter = dataclasses.replace(s.filter, any_of={**others, **selected})
            yield (f"funds read from the question ({', '.join(s.detected_funds)}) matched nothing: relaxed to "
                   f"{'the funds selected' if selected else 'every fund'}")

    async def _search(self, ask: AskInput, reading: Reading, rt: router.Route, s: Plan, vector: np.ndarray | None,
                      deadline: float) -> None:
        """One search per collection side by side under the retrieval deadline; whatever arrives in time
        is used, the collections' hits merged by rank, never by score (`collection_merge.by_rank` says
        why). Searches that find nothing are widened: a source's default window to every date (most
        recent first), then the filters read from the question (`_relaxations`)."""
        # Asked for the latest, a newer note a little less like the question competes (its decayed score
        # decides) instead of being cut by the route's first similarity threshold.
        latest = dict(half_life_days=self.settings.recency_half_life_days, decay_floor=self.settings.recency_floor)
        ranking = boosts.Ranking(min(rt.min_similarity, router.FALLBACK_SIMILARITY) if s.recency else rt.min_similarity,
                                 ask.conversation_id, s.time_window, self.today().isoformat(),
                                 linear=ask.notes_contract, **(latest if s.recency else {}))
        ranking, period = boosts.toward_period(ranking, reading.reported)
        s.reason += period
        if ranking.linear:
            s.reason += "; linear fusion 0.6 vector + 0.25 keyword + 0.15 recency (notes contract)"
        if s.default_window:
            s.reason += "; default window: " + ", ".join(f"{c} last {d} days" for c, d in s.default_window.items())
        if s.recency:
            s.reason += (f"; {s.recency!r} asks for the latest: time decay, half-life {ranking.half_life_days:g} days, "
                         f"floor {ranking.decay_floor:g}")
        variants = [v for n in rt.question_numbers for v in (f"question {n}", f"problem {n}", f"{n}.")]
        variants = (variants + s.variants)[:MAX_VARIANTS]
        left = lambda: max(0.05, deadline - time.monotonic())  # noqa: E731

        async def one(collection: str) -> SearchResult:
            with tracing.span("search", collection=collection):
                return await searched(collection)

        def search(collection: str, f: SearchFilter, r: boosts.Ranking) -> Awaitable[SearchResult]:
            return self.retriever.search(reading.text, [collection], f, max(rt.k, SEARCH_DEPTH), vector, left(),
                                         variants, **boosts.options(collection, r))

        async def find(collection: str, f: SearchFilter, r: boosts.Ranking) -> SearchResult:
            f = dataclasses.replace(f, doc_ids=ask.picked(collection))
            # Question lookup: the numbered items themselves first (those named, or all when all are asked for)
            if exact := await numbered_filter(self.retriever, rt.question_numbers, rt.all_questions, f, collection):
                found = await search(collection, exact, r)
                if found.hits:
                    return found
            found = await search(collection, f, r)
            newest = max((h.chunk.date for h in found.hits), default="")
            if r.flat_for(newest):  # nothing recent: the decay counts from the newest hit, so it still orders them
                found = await search(collection, f, dataclasses.replace(r, now=newest))
            return found

        async def searched(collection: str) -> SearchResult:
            found = await find(collection, self._filter_for(collection, s, ask), ranking)
            if found.hits or collection not in s.default_window:
                return found
            # Default-window fallback: the window holds nothing, so every date, the most recent first
            days = s.default_window[collection]
            note = f"{collection}: nothing in the last {days} days: every date, most recent first"
            if note not in s.relaxed:
                s.relaxed.append(note)
            return await find(collection, self._filter_for(collection, s, ask, windowed=False),
                              dataclasses.replace(ranking, **latest))

        found = await self._gathered(s, [one(c) for c in s.collections])
        relaxing = self._relaxations(ask, s)  # each step loosens s.filter when it is taken
        while not any(found) and not s.unavailable and (note := next(relaxing, None)):
            s.relaxed.append(note)
            found = await self._gathered(s, [one(c) for c in s.collections])
        if s.relaxed:
            s.reason += "; " + "; ".join(s.relaxed)
        if s.unavailable:
            s.reason += f"; no answer in time from {', '.join(s.unavailable)}: using what arrived"
        if s.dense_skipped:
            s.reason += "; embedder unavailable: keyword search only"
        s.hits = context.with_neighbours(collection_merge.by_rank(found))

    async def _gathered(self, s: Plan, searches: list[Awaitable[SearchResult]]) -> list[list[Hit]]:
        """Each collection's hits, best first, its search run beside the others'; each failure named in
        `s.unavailable`."""
        results = await asyncio.gather(*searches, return_exceptions=True)
        found: list[list[Hit]] = []
        for collection, result in zip(s.collections, results):
            if isinstance(result, RagmeshError):
                s.unavailable.append(collection)
                log.warning("search failed", extra={"collection": collection, "error": str(result)})
                continue
            if isinstance(result, BaseException):
                raise result
            found.append(result.hits)
            s.candidate_count += result.candidate_count
            s.dense_skipped |= result.dense_skipped
            s.threshold_layer = max(s.threshold_layer, result.threshold_layer)
        return found
