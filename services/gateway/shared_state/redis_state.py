"""Shared conversation state in Redis (REDIS_URL), for several gateway replicas.

Keys (all under `ragmesh:`; a tenant is written with its length first, so no two tenants' keys meet):
  run:{conversation}            the replica running an answer there; 15 s, renewed every 5 s
  channels stop, ended          a stop request for a conversation, and an answer that has ended
  channel forgotten             a scope entry deleted, so no replica keeps its decoded copy
  scope:{tenant}:{conversation} a scope entry (codec.py); expires with the scope cache's TTL, deleted
                                with its conversation
  scopes:{tenant}               the tenant's scope entries by last use, to keep at most SCOPE_CACHE_SIZE
  sizes:{tenant}                the stored size of each of them, to keep at most SCOPE_CACHE_BYTES
  rate:{tenant}:{user}          the user's requests of the last minute (a sorted set of times)
Times come from the Redis server's clock, so replicas count one window whatever their own clocks say.

Only what an answer needs before its strategy event waits for Redis (the rate window, the scope entry:
one trip each); claiming a running answer and writing scope entries go on beside it, in order per key.

Redis unreachable (refused, or slower than REDIS_TIMEOUT_S): answers go on. For a second the gateway
does not try again; meanwhile a stop reaches answers on this replica only (a stop for one it does not
run answers UNAVAILABLE saying why), scopes are neither read nor written (every question searches),
and rate windows are counted in this replica (a user may get up to the limit from each replica: the
limit fails open rather than refusing everyone). The strategy event's reason says so.

Redis full (past `maxmemory` under `noeviction`: it refuses writes, OOM): answers go on. A scope entry is
not written (the follow-up searches again), a rate window is counted in this replica (fails open, as
above), a claim is not made (a stop reaches the answer on its own replica only); deletes still go
through (a Lua script, not MULTI: Redis refuses every command queued in a transaction while full). Said
by the log line `shared state full` (once a minute, with how many were refused) and the metric
`ragmesh_shared_state_refused_total{reason="full"}`.

What is read back is input: a pub/sub message that is not what its channel carries is logged and
skipped (the listener goes on), a scope entry that does not decode (codec.py) is a miss."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from ragmesh import metrics
from ragmesh.config import Settings, redact_uri
from ragmesh.errors import Unavailable
from services.gateway.limits import LocalWindows
from services.gateway.scope_cache import ScopeEntry
from services.gateway.shared_state import codec
from services.gateway.shared_state.runs import LocalRuns, Run
from services.gateway.shared_state.state import SharedState

log = logging.getLogger(__name__)

T = TypeVar("T")
PREFIX = "ragmesh:"
STOP_CHANNEL, ENDED_CHANNEL = f"{PREFIX}stop", f"{PREFIX}ended"
FORGOTTEN_CHANNEL = f"{PREFIX}forgotten"  # a scope entry deleted: every replica drops its decoded copy
RUN_TTL_MS = 15_000  # a replica that died mid-answer stops claiming it after this
RUN_RENEW_S = 5.0
QUIET_AFTER_FAILURE_S = 1.0  # Redis is not tried again for this long after a failure
DECODED_ENTRIES = 64  # scope entries kept decoded per replica
DECODE_OFF_LOOP = 64 << 10  # stored bytes past which an entry is decoded in a thread, not on the event loop
MAX_MESSAGE = 1024  # bytes of a pub/sub message: a conversation id, or a scope key (tenant and conversation)

_NOW_MS = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
_NOW_US = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "  # orders uses
# Scope entries. KEYS: entry, index (conversations by last use, in us), sizes (conversation -> stored
# bytes); ARGV: blob, ttl ms, max entries, conversation, the tenant's entry-key prefix, max bytes.
# Entries past the TTL leave the index, then the least recently used go while the tenant has more than
# max entries or max bytes.
_TRIM = """
local ttl = tonumber(ARGV[2])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl * 1000)) do
  redis.call('HDEL', KEYS[3], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl * 1000)
local total = 0
for _, size in ipairs(redis.call('HVALS', KEYS[3])) do total = total + (tonumber(size) or 0) end
local count = redis.call('ZCARD', KEYS[2])
while count > tonumber(ARGV[3]) or total > tonumber(ARGV[6]) do
  local gone = redis.call('ZPOPMIN', KEYS[2])
  if #gone == 0 then break end
  total = total - (tonumber(redis.call('HGET', KEYS[3], gone[1])) or 0)
  redis.call('HDEL', KEYS[3], gone[1])
  redis.call('DEL', ARGV[5] .. gone[1])
  count = count - 1
end
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return 1"""
PUT_SCOPE = _NOW_US + """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('HSET', KEYS[3], ARGV[4], string.len(ARGV[1]))""" + _TRIM
# The context kept in an entry that still exists, its expiry unchanged (the same KEYS and ARGV).
KEEP_SCOPE = _NOW_US + """
if not redis.call('SET', KEYS[1], ARGV[1], 'XX', 'KEEPTTL') then return 0 end
if redis.call('ZSCORE', KEYS[2], ARGV[4]) then redis.call('HSET', KEYS[3], ARGV[4], string.len(ARGV[1])) end""" + _TRIM
# KEYS: entry, index; ARGV: conversation, most bytes read. The entry, marked used; false when larger.
GET_SCOPE = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' or redis.call('STRLEN', KEYS[1]) > tonumber(ARGV[2]) then return false end
local blob = redis.call('GET', KEYS[1])
if blob then """ + _NOW_US + """ redis.call('ZADD', KEYS[2], 'XX', now, ARGV[1]) end
return blob"""
# KEYS: entry, index, sizes; ARGV: conversation, the channel to say it on ('': none). The entry and its
# places gone, in one step that Redis takes even while full (it refuses a MULTI's commands then).
FORGET_SCOPE = """
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], KEYS[1]) end
return 1"""
# KEYS: window; ARGV: limit, window ms, a unique member. 0 when counted, else ms until one leaves.
COUNT_RATE = _NOW_MS + """
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tonumber(oldest[2]) + window - now
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return 0"""
# KEYS: run; ARGV: channel, conversation. 1 when an answer runs there (the stop is published), else 0.
STOP_RUN = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PUBLISH', ARGV[1], ARGV[2]) return 1 end
return 0"""


def _key(kind: str, tenant: str, rest: str = "") -> str:
    return f"{PREFIX}{kind}:{len(tenant)}:{tenant}:{rest}"


def _run_key(conversation_id: str) -> str:
    return f"{PREFIX}run:{conversation_id}"


class SharedUnavailable(Exception):
    """Redis did not answer; the message says why."""


class RedisLink:
    """The client, and what it is known to do: after a failure Redis is left alone for a second, so a
    Redis that is down costs an answer nothing (no connect timeout on every call). A command Redis
    refuses (full under `noeviction`, a key of another type that a writer left) fails that call alone."""

    def __init__(self, url: str, timeout_s: float) -> None:
        # One retry on a broken connection (a pooled one Redis closed when it restarted), none on a timeout.
        self.client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                           retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
        self.where = redact_uri(url)
        self.problem = ""
        self._quiet_until = 0.0
        self._refusals, self._next_refusal_log = 0, 0.0
        self._background: set[asyncio.Task] = set()

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        if self.problem and time.monotonic() < self._quiet_until:
            raise SharedUnavailable(self.problem)
        try:
            result = await fn(*args, **kwargs)
        except ResponseError as exc:  # Redis is there and refused this command (full, a key of another type)
            self.refused(exc)
            raise SharedUnavailable(f"Redis at {self.where} refused: {str(exc)[:200]}") from exc
        except (RedisError, OSError) as exc:
            self.failed(exc)
            raise SharedUnavailable(self.problem) from exc
        if self.problem:
            log.info("shared state reachable again", extra={"redis": self.where})
            self.problem = ""
        return result

    def refused(self, exc: ResponseError) -> None:
        """Counted; logged once a minute at most (a full Redis refuses every write of every answer), with
        how many were refused since."""
        full = isinstance(exc, OutOfMemoryError)
        metrics.shared_state_refused(full)
        self._refusals += 1
        if time.monotonic() >= self._next_refusal_log:
            self._next_refusal_log = time.monotonic() + 60.0
            log.warning("shared state full" if full else "shared state refused a command", extra={
                "redis": self.where, "error": str(exc)[:200], "refused": self._refusals})
            self._refusals = 0

    def failed(self, exc: BaseException) -> None:
        if not self.problem:
            log.warning("shared state unreachable", extra={"redis": self.where, "error": str(exc)})
        self.problem = f"shared state unreachable (Redis at {self.where}: {str(exc) or type(exc).__name__})"
        self._quiet_until = time.monotonic() + QUIET_AFTER_FAILURE_S

    def spawn(self, work: Coroutine[Any, Any, None], after: asyncio.Task | None = None) -> asyncio.Task:
        """Runs `work` beside the caller (after `after`, when given): a write nobody waits for. Redis
        being away is already said by `problem`; anything else is logged."""
        async def run() -> None:
            if after is not None:
                await asyncio.wait([after])
            try:
                await work
            except SharedUnavailable:
                pass
            except Exception:
                log.exception("shared state write failed")

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def drain(self, timeout_s: float = 1.0) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=timeout_s)


class RedisRuns(LocalRuns):
    """Answers running here are also claimed in Redis; a stop for one that runs elsewhere is published,
    and answered once its replica says the answer has ended (what it left is stored by then)."""

    def __init__(self, link: RedisLink) -> None:
        super().__init__()
        self.link = link
        self.replica = uuid.uuid4().hex
        self._stop_script = link.client.register_script(STOP_RUN)
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._claims: dict[str, asyncio.Task] = {}

    async def begin(self, conversation_id: str) -> Run:
        """Claimed beside the answer: the claim is in Redis long before a client can know the conversation
        id of a new answer (its strategy event), or see content worth stopping. Redis away: a stop reaches
        the answer on this replica only (until `renew` claims it)."""
        run = await super().begin(conversation_id)
        self._claims[conversation_id] = self.link.spawn(
            self.link.call(self.link.client.set, _run_key(conversation_id), self.replica, px=RUN_TTL_MS))
        return run

    def end(self, conversation_id: str, run: Run) -> None:
        super().end(conversation_id, run)
        pipe = self.link.client.pipeline(transaction=False)
        pipe.delete(_run_key(conversation_id)).publish(ENDED_CHANNEL, conversation_id)
        # After the claim; Redis away: the claim expires, and a stop waiting elsewhere times out.
        self.link.spawn(self.link.call(pipe.execute), after=self._claims.pop(conversation_id, None))

    async def stop(self, conversation_id: str, wait_s: float) -> bool:
        if conversation_id in self.running:
            return await super().stop(conversation_id, wait_s)
        ended = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(conversation_id, []).append(ended)  # before asking: the reply may come at once
        try:
            try:
                runs = await self.link.call(self._stop_script, keys=[_run_key(conversation_id)],
                                            args=[STOP_CHANNEL, conversation_id])
            except SharedUnavailable as exc:
                raise Unavailable(f"stop: {exc}, so an answer running on another gateway replica cannot be "
                                  f"reached (none runs on this one); try again") from None
            if not runs:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended, wait_s)
            return True
        finally:
            waiting = self._waiting.get(conversation_id, [])
            with contextlib.suppress(ValueError):
                waiting.remove(ended)
            if not waiting:
                self._waiting.pop(conversation_id, None)

    def stop_requested(self, conversation_id: str) -> None:
        if (run := self.running.get(conversation_id)) is not None:
            run.stop.set()

    def ended_elsewhere(self, conversation_id: str) -> None:
        for ended in self._waiting.get(conversation_id, []):
            if not ended.done():
                ended.set_result(None)

    async def renew(self) -> None:
        """Keeps this replica's claims alive (and makes them again after Redis was away)."""
        if not self.running:
            return
        pipe = self.link.client.pipeline(transaction=False)
        for conversation_id in list(self.running):
            pipe.set(_run_key(conversation_id), self.replica, px=RUN_TTL_MS)
        await self.link.call(pipe.execute)


# The scope entry a request has read or written (key, entry): read again by the same request (the pipeline
# reads it in planning, then to build the context), it is the same objects, without a second trip.
_this_request: ContextVar[tuple[str, ScopeEntry | None] | None] = ContextVar("scope_this_request", default=None)


class RedisScopes:
    """Scope entries in Redis: TTL from the write, at most `max_entries` and `max_bytes` per tenant (least
    recently used out); an entry larger than codec.MAX_ENTRY_BYTES is not stored. Writes go beside the
    answer, in order per key. The small entries last read or written here are kept decoded with their
    bytes, so an unchanged entry is decoded once per replica and read as the same objects (the pipeline reuses
    a context built from the very hits)."""

    def __init__(self, link: RedisLink, ttl_s: float, max_entries: int, max_bytes: int = 8 << 20) -> None:
        self.link = link
        self.ttl_ms = int(ttl_s * 1000)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._get = link.client.register_script(GET_SCOPE)
        self._put = link.client.register_script(PUT_SCOPE)
        self._keep = link.client.register_script(KEEP_SCOPE)
        self._forget = link.client.register_script(FORGET_SCOPE)
        self._decoded: OrderedDict[str, tuple[bytes, ScopeEntry]] = OrderedDict()
        self._writing: dict[str, asyncio.Task] = {}  # the last write of each key

    async def get(self, tenant: str, conversation_id: str) -> ScopeEntry | None:
        key = _key("scope", tenant, conversation_id)
        if (seen := _this_request.get()) is not None and seen[0] == key:
            return seen[1]
        entry = await self._read(key, tenant, conversation_id)
        _this_request.set((key, entry))
        return entry

    async def _read(self, key: str, tenant: str, conversation_id: str) -> ScopeEntry | None:
        try:
            blob = await self.link.call(self._get, keys=[key, _key("scopes", tenant)],
                                        args=[conversation_id, codec.MAX_STORED_BYTES])
        except SharedUnavailable:
            return None
        if not isinstance(blob, bytes):
            self._decoded.pop(key, None)
            return None
        known = self._decoded.get(key)
        if known is not None and known[0] == blob:
            self._decoded.move_to_end(key)
            return known[1]
        try:
            entry = await asyncio.to_thread(codec.decode, blob) if len(blob) > DECODE_OFF_LOOP else codec.decode(blob)
        except codec.Unreadable as exc:  # another layout (a rolling upgrade), or not an entry: searched again
            log.warning("scope entry unreadable", extra={"error": str(exc)})
            return None
        self._remember(key, blob, entry)
        return entry

    async def put(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        entry.created = time.monotonic()
        key = _key("scope", tenant, conversation_id)
        _this_request.set((key, entry))

        self._write(key, self._store(self._put, tenant, conversation_id, entry))

    async def keep_context(self, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        self._write(_key("scope", tenant, conversation_id), self._store(self._keep, tenant, conversation_id, entry))

    async def _store(self, script: Any, tenant: str, conversation_id: str, entry: ScopeEntry) -> None:
        """Writes the entry with `script`; one too large is not stored, and the one it replaces goes
        (a follow-up searches again rather than reuse an older search)."""
        key = _key("scope", tenant, conversation_id)
        try:
            blob = codec.encode(entry)
        except codec.TooLarge as exc:
            log.info("scope entry not stored", extra={"error": str(exc)})
            self._decoded.pop(key, None)
            await self._removed(tenant, conversation_id, "")
            return
        if await self.link.call(script, keys=[key, _key("scopes", tenant), _key("sizes", tenant)],
                                args=[blob, self.ttl_ms, self.max_entries, conversation_id, _key("scope", tenant),
                                      self.max_bytes]):
            self._remember(key, blob, entry)

    async def forget(self, tenant: str, conversation_id: str) -> None:
        """Deleted in Redis (the entry and its place in the tenant's index) after the writes of the key
        this replica has under way, and dropped from the decoded entries of every replica (published;
        a replica that misses it never reads its copy again: a read goes to Redis first). Unavailable
        when Redis is away: the entry would outlive what was deleted."""
        key = _key("scope", tenant, conversation_id)
        if (seen := _this_request.get()) is not None and seen[0] == key:
            _this_request.set((key, None))
        if (writing := self._writing.get(key)) is not None:
            await asyncio.wait([writing])
        self._decoded.pop(key, None)
        try:
            await self._removed(tenant, conversation_id, FORGOTTEN_CHANNEL)
        except SharedUnavailable as exc:
            raise Unavailable(f"the conversation's cached search results could not be removed: {exc}; "
                              f"try again") from None

    async def _removed(self, tenant: str, conversation_id: str, channel: str) -> None:
        """The entry gone from Redis with its places in the tenant's index (said on `channel`, if any)."""
        await self.link.call(self._forget, keys=[_key("scope", tenant, conversation_id), _key("scopes", tenant),
                                                 _key("sizes", tenant)], args=[conversation_id, channel])

    def forgotten(self, key: str) -> None:
        """Another replica deleted the entry: its decoded copy here goes too."""
        self._decoded.pop(key, None)

    def _write(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        task = self.link.spawn(work, after=self._writing.get(key))
        self._writing[key] = task
        task.add_done_callback(lambda done: self._writing.pop(key) if self._writing.get(key) is done else None)

    def _remember(self, key: str, blob: bytes, entry: ScopeEntry) -> None:
        """Kept decoded when small: the decoded entries take at most DECODED_ENTRIES x DECODE_OFF_LOOP of
        stored bytes (a large one is decoded again, in a thread, at each read)."""
        if len(blob) > DECODE_OFF_LOOP:
            self._decoded.pop(key, None)
            return
        self._decoded[key] = (blob, entry)
        self._decoded.move_to_end(key)
        while len(self._decoded) > DECODED_ENTRIES:
            self._decoded.popitem(last=False)


class RedisWindows:
    """Sliding windows in Redis, counted once for all replicas; this replica's own while Redis is away."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self.replica = uuid.uuid4().hex
        self.fallback = LocalWindows()
        self._count = link.client.register_script(COUNT_RATE)
        self._sent = 0

    async def count(self, tenant: str, user_id: str, limit: int, window_s: float) -> float:
        self._sent += 1
        try:
            wait_ms = await self.link.call(self._count, keys=[_key("rate", tenant, user_id)],
                                           args=[limit, int(window_s * 1000), f"{self.replica}:{self._sent}"])
        except SharedUnavailable:
            return self.fallback.count_now(tenant, user_id, limit, window_s)
        return min(max(float(wait_ms), 0.0), window_s * 1000) / 1000  # a planted window waits at most one


class RedisState(SharedState):
    def __init__(self, settings: Settings) -> None:
        self.link = RedisLink(settings.redis_url, settings.redis_timeout_s)
        self.redis_runs = RedisRuns(self.link)
        self.redis_scopes = RedisScopes(self.link, settings.scope_cache_ttl_s, settings.scope_cache_size,
                                        settings.scope_cache_bytes)
        super().__init__(self.redis_runs, self.redis_scopes,
                         RedisWindows(self.link), where=f"Redis at {self.link.where}")
        self._tasks: list[asyncio.Task] = []
        self._listening = asyncio.Event()
        self._handlers: dict[bytes, Callable[[str], None]] = {
            STOP_CHANNEL.encode(): self.redis_runs.stop_requested,
            ENDED_CHANNEL.encode(): self.redis_runs.ended_elsewhere,
            FORGOTTEN_CHANNEL.encode(): self.redis_scopes.forgotten}
        self._skips, self._next_skip_log = 0, 0.0

    @property
    def problem(self) -> str:
        if not self.link.problem:
            return ""
        return (f"{self.link.problem}: a stop reaches answers on this replica only, scopes are not reused, "
                f"rate windows are counted per replica")

    async def start(self) -> None:
        """Listens for stop requests; waits for the subscription a moment, never for Redis to come up."""
        if self._tasks:
            return
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._renew())]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), 2.0)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.link.drain()
        await self.link.client.aclose()

    async def _listen(self) -> None:
        """Stop requests for answers running here, answers ended elsewhere that a stop here awaits, and
        scope entries deleted elsewhere; subscribed again after Redis was away."""
        pause = 0.05
        while True:
            pubsub = self.link.client.pubsub()
            try:
                await pubsub.subscribe(STOP_CHANNEL, ENDED_CHANNEL, FORGOTTEN_CHANNEL)
                self._listening.set()
                pause = 0.05
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._heard(message.get("channel"), message.get("data"))
            except (RedisError, OSError) as exc:
                self.link.failed(exc)
            except Exception:  # anything else: logged, and subscribed again like after a failure
                log.exception("shared state listener failed; subscribing again")
            finally:
                self._listening.clear()
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _heard(self, channel: Any, data: Any) -> None:
        """One pub/sub message: a conversation id or a scope key, as UTF-8 of at most MAX_MESSAGE bytes.
        Anything else is logged and skipped (anyone who can publish on this Redis can send it)."""
        handle = self._handlers.get(channel) if isinstance(channel, bytes) else None
        if handle is None or not isinstance(data, bytes) or not 0 < len(data) <= MAX_MESSAGE:
            self._skipped(channel, f"not a name of at most {MAX_MESSAGE} bytes")
            return
        try:
            named = data.decode("utf-8")
        except UnicodeDecodeError:
            self._skipped(channel, "not UTF-8")
            return
        handle(named)

    def _skipped(self, channel: Any, why: str) -> None:
        """Logged once a minute at most, with how many were skipped since."""
        self._skips += 1
        if time.monotonic() >= self._next_skip_log:
            self._next_skip_log = time.monotonic() + 60.0
            log.warning("shared state message skipped", extra={
                "channel": repr(channel)[:80], "error": why, "skipped": self._skips})
            self._skips = 0

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(RUN_RENEW_S)
            with contextlib.suppress(SharedUnavailable):
                await self.redis_runs.renew()
