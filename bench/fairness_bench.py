"""Fairness between tenants (issue 23): what one tenant's heavy or hostile work costs another.

The whole stack (`python -m deploy.run`, as `make run` starts it) on free ports and a temp DATA_DIR, with
the deployment's default limits, and two tenants made with `ragmesh keys create`: `demo` (the victim:
ten analysts' admin keys, used in turn) and `rival` (one admin key). The victim measures, one request at
a time:

  upload   a small text document (32 bytes, new content each time) through `POST /api/documents`, until
           its INDEXED progress event;
  ask      a demo question through `POST /api/chat/ask`, until the whole answer is back;

on an idle stack, then while the rival (or nobody in particular) does one thing at a time:

  bombs    two decompression bombs (DOCX files of ~240 KB whose document.xml inflates to 50 MB) uploaded
           by the rival, again as soon as one is answered (refused or not);
  halfopen 300 connections that send an /api request's headers and a few bytes of a JSON body, with no
           credential, and hold still (one the server closes is opened again a second later);
  embed    the rival's operator key calling `Embedder/Embed` with the costliest call the embedder's limits
           allow (the most texts, each as long as the call's characters allow), back to back;
  held     the rival's five admin keys holding all they are let of idle streams: `Gateway.Ingest` and
           `Retriever.Ingest` streams that send nothing and `/api/documents` uploads whose body never
           comes (HELD_STREAMS of each gRPC kind, more than a service's slots; HELD_UPLOADS), each opened
           again a second after it is ended (the idle timeout) or refused (the tenant's share).

  uploads  eight concurrent 40 MB uploads (a damaged PDF: its parse fails fast) from the rival's keys in
           turn over HTTP, each sent again as soon as it is answered; the peak RSS of each service process
           during it (VmRSS sampled every 0.1 s) beside its limit in deploy/k8s/base/<service>.yaml;
  metadata metadata-heavy asks (top_k 50 on the rival's documents with the most metadata a document may
           carry: 4,000-character values up to MAX_METADATA_BYTES) from eight askers of the rival, each in a new conversation, so each writes a scope
           entry to the tenant's share of Redis: Redis's used_memory before and after, and the tenant's
           scope bytes against SCOPE_CACHE_BYTES.

The stack shares its state in a real redis-server (tests/redis_server.py) run as the production overlay
runs it: `--maxmemory 200mb --maxmemory-policy noeviction`. Each load runs in a process of its own (the
victim's client keeps its CPU time). Each figure is the victim's p50 and p99 under load divided by the
same on the idle stack, measured in the same run (target <= 2); a victim request refused or failed makes
its figure infinite. Each load's rows are printed as it ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing
import multiprocessing.process
import queue
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import grpc
import httpx
import numpy as np
import redis
import yaml

from bench.load_bench import QUESTIONS, SERVICES, Stack
from bench.search_bench import REPO, Section, Target, log, render
from ragmesh import config
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc
from ragmesh.validation import MAX_METADATA_BYTES, MAX_METADATA_KEYS, MAX_METADATA_VALUE_CHARS
from services.embedder.limits import EmbedLimits
from services.gateway.shared_state.redis_state import _key
from tests.redis_server import RedisServer

RIVAL = "rival"
VICTIM_USERS = 10  # the victim's requests come from this many users in turn, each within its rate limit
HALF_OPEN = 300
HELD_STREAMS = 300  # idle gRPC streams of each kind, more than a service's 256 slots
HELD_UPLOADS = 50  # stalled uploads (past HTTP_BODIES_PER_USER for five keys)
RIVAL_KEYS = 5
BOMB_XML_BYTES = 50 * 2**20
TARGET_RATIO = 2.0
UPLOADERS, UPLOAD_BYTES = 8, 40 * 2**20
METADATA_CHARS, METADATA_DOCS, ASKERS, TOP_K = MAX_METADATA_VALUE_CHARS, 20, 8, 50
# As many METADATA_CHARS values (keys "fieldNN") as fit MAX_METADATA_BYTES beside the fund name.
METADATA_KEYS = min(MAX_METADATA_KEYS, (MAX_METADATA_BYTES - 64) // (METADATA_CHARS + len("field00"))) + 1
HEAVY_QUESTION = "How many turbines did the Quillmere lighthouse fund buy for the Skerry wind farm?"
REDIS_MAXMEMORY = "200mb"  # deploy/k8s/overlays/prod/redis.yaml
MB = 2**20
SETTLE_S = 2.0  # the load takes hold before the victim measures
FILL_S = 360.0  # at most this long for the metadata-heavy asks to fill the rival's share of Redis
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class FairnessPlan:
    uploads: int
    asks: int


FULL = FairnessPlan(uploads=40, asks=30)  # uploads take ~20 ms: 40 of them steady the p50 for under a second more
QUICK = FairnessPlan(uploads=3, asks=5)


def docx_bomb() -> bytes:
    """A real DOCX (python-docx's own template) whose document.xml is BOMB_XML_BYTES of one repeated paragraph."""
    import docx

    template = io.BytesIO()
    docx.Document().save(template)
    paragraph = b"<w:p><w:r><w:t>" + b"lorem ipsum dolor sit amet " * 8 + b"</w:t></w:r></w:p>"
    ns = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    xml = (b'<?xml version="1.0" encoding="UTF-8"?><w:document ' + ns + b"><w:body>"
           + paragraph * (BOMB_XML_BYTES // len(paragraph)) + b"</w:body></w:document>")
    out = io.BytesIO()
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, xml if item.filename == "word/document.xml" else src.read(item))
    return out.getvalue()


def make_key(stack: Stack, tenant: str, user: str) -> str:
    """An admin key, made as an operator would (`ragmesh keys create`)."""
    env = {"DATA_DIR": str(stack.data_dir), "MONGODB_URI": "", "API_KEY_PEPPER": "", "RAGMESH_HOST": "127.0.0.1",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "ragmesh.cli", "keys", "create", "--tenant", tenant, "--user", user,
                          "--role", "admin"], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


# ----------------------------------------------------------------------------- what the victim measures


async def upload_once(client: httpx.AsyncClient, stack: Stack, key: str, n: int) -> float:
    """Seconds from sending a 32-byte document to its INDEXED event."""
    text = f"Fairness probe {n:06d} {time.time_ns() % 10**6:06d}."[:32]
    body = {"collection": "documents", "documents": [{"doc_id": f"fairness-{n}", "text": text}]}
    started = time.perf_counter()
    async with client.stream("POST", stack.http_url + "/api/documents", json=body,
                             headers={"authorization": f"Bearer {key}"}) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"upload: HTTP {reply.status_code}: {(await reply.aread())[:200]!r}")
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and '"INDEXED"' in line:
                return time.perf_counter() - started
            if line.startswith("data: ") and ('"FAILED"' in line or '"error"' in line):
                raise RuntimeError(f"upload failed: {line[:200]}")
    raise RuntimeError("upload: the stream ended without INDEXED")


async def ask_once(client: httpx.AsyncClient, stack: Stack, key: str, n: int) -> float:
    """Seconds from sending a demo question to its whole answer."""
    started = time.perf_counter()
    reply = await client.post(stack.http_url + "/api/chat/ask", json={"question": QUESTIONS[n % len(QUESTIONS)]},
                              headers={"authorization": f"Bearer {key}"})
    if reply.status_code != 200:
        raise RuntimeError(f"ask: HTTP {reply.status_code}: {reply.text[:200]}")
    return time.perf_counter() - started


@dataclass
class Measured:
    """One kind of victim request: the seconds each took, and the ones refused or failed (a fairness
    failure too: the victim did not get its work done)."""

    seconds: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


async def victim(stack: Stack, plan: FairnessPlan, offset: int, keys: list[str]) -> dict[str, Measured]:
    """The victim's requests one at a time, from its users in turn (each within the per-user rate limit)."""
    out = {"upload": Measured(), "ask": Measured()}
    async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT_S)) as client:
        for kind, once, count in (("upload", upload_once, plan.uploads), ("ask", ask_once, plan.asks)):
            for i in range(count):
                try:
                    out[kind].seconds.append(await once(client, stack, keys[i % len(keys)], offset + i))
                except (RuntimeError, httpx.HTTPError) as exc:
                    out[kind].failed.append(f"{type(exc).__name__}: {exc}")
    return out


# ----------------------------------------------------------------------------- what the load does
# Each load runs in a process of its own, so the attacker's client never takes the victim's client's
# CPU time or event loop: what the figures show is the stack's fairness, not the benchmark's.


@dataclass(frozen=True)
class Where:
    """What a load process needs of the stack."""

    http_port: int
    embedder: str
    key: str
    gateway: str = ""  # gRPC addresses, for the held streams
    retriever: str = ""
    keys: tuple[str, ...] = ()  # the rival's other admin keys
    uploaders: tuple[str, ...] = ()  # keys of the rival's users of their own for the large uploads
    askers: tuple[str, ...] = ()  # and for the metadata-heavy asks (each within its own rate window)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


async def bombs(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """Two uploaders of a decompression bomb each, again as soon as one is answered."""
    bomb = docx_bomb()

    async def uploader(i: int) -> None:
        n = 0
        async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT_S)) as client:
            while not stop.is_set():
                n += 1
                files = {"files": (f"bomb-{i}-{n}.docx", bomb,
                                   "application/vnd.openxmlformats-officedocument.wordprocessingml.document")}
                try:
                    async with client.stream("POST", where.http_url + "/api/documents", files=files,
                                             data={"collection": "documents"},
                                             headers={"authorization": f"Bearer {where.key}"}) as reply:
                        async for line in reply.aiter_lines():
                            if '"FAILED"' in line or '"INDEXED"' in line:
                                seen.append(line[6:200])
                except httpx.HTTPError as exc:
                    seen.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(uploader(1), uploader(2))


async def half_open(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """HALF_OPEN anonymous connections, each with an /api request's headers and a few bytes of its body,
    held still; one the server closes is opened again a second later."""
    request = (f"POST /api/chat/ask HTTP/1.1\r\nHost: 127.0.0.1:{where.http_port}\r\n"
               "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"quest").encode()

    await asyncio.gather(*(_hold(where.http_port, request, stop, seen) for _ in range(HALF_OPEN)))


async def _hold(port: int, head: bytes, stop: asyncio.Event, seen: list[str]) -> None:
    """One connection that sends `head` and is held still until the server answers or closes it (its first
    line kept in `seen`); then, a second later, another, until `stop` is set."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            seen.append(f"connect: {exc}")
            await asyncio.sleep(1.0)
            continue
        writer.write(head)
        try:
            await writer.drain()
            if reply := await _until(reader, stop):
                seen.append(reply.split(b"\r\n", 1)[0].decode(errors="replace"))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
        await asyncio.sleep(1.0)


async def _until(reader: asyncio.StreamReader, stop: asyncio.Event) -> bytes:
    """What the server answers (when it closes or answers), or b"" once `stop` is set."""
    read = asyncio.ensure_future(reader.read(200))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([read, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not read.done():
        read.cancel()
        return b""
    return read.result()


def largest_embed() -> tuple[int, int]:
    """(texts, characters per text) of the costliest Embed call the embedder's limits allow: the most
    texts, each as long as the call's characters allow (the model reads 256 tokens of each)."""
    limits = EmbedLimits.from_settings(config.load())
    return limits.texts, min(limits.text_chars, limits.call_chars // limits.texts)


async def big_embeds(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """The rival's operator key sends the costliest allowed Embed call, back to back."""
    texts, chars = largest_embed()
    words = ("revenue exposure hedge duration spread volatility " * (chars // 50 + 1))[:chars]
    request = embedder_pb2.EmbedRequest(texts=[words] * texts, task=embedder_pb2.DOCUMENT)
    async with grpc.aio.insecure_channel(where.embedder) as channel:
        embed = embedder_pb2_grpc.EmbedderStub(channel).Embed
        while not stop.is_set():
            try:
                await embed(request, metadata=(("authorization", f"Bearer {where.key}"),), timeout=TIMEOUT_S)
                seen.append("ok")
            except grpc.aio.AioRpcError as exc:
                seen.append(f"{exc.code().name}: {exc.details()}")
                await asyncio.sleep(0.2)


async def held(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """HELD_STREAMS idle Gateway.Ingest and Retriever.Ingest streams each and HELD_UPLOADS stalled
    uploads from the rival's keys in turn, each opened again a second after it ends or is refused."""
    keys = (where.key, *where.keys)
    upload_head = (f"POST /api/documents HTTP/1.1\r\nHost: 127.0.0.1:{where.http_port}\r\n"
                   "Content-Type: application/json\r\nContent-Length: 1000\r\nAuthorization: Bearer {key}\r\n\r\n"
                   "{{\"coll")

    async def nothing() -> AsyncIterator[bytes]:
        await stop.wait()
        return
        yield b""

    async def stream(address: str, method: str, key: str) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            while not stop.is_set():
                try:
                    async for _ in channel.stream_stream(method)(nothing(), timeout=TIMEOUT_S, metadata=(
                            ("authorization", f"Bearer {key}"),)):
                        pass
                    seen.append("ended")
                except grpc.aio.AioRpcError as exc:
                    seen.append(f"{exc.code().name}: {exc.details()}")
                await asyncio.sleep(1.0)

    await asyncio.gather(*(part for i in range(HELD_STREAMS) for part in (
        stream(where.gateway, "/ragmesh.v1.Gateway/Ingest", keys[i % len(keys)]),
        stream(where.retriever, "/ragmesh.v1.Retriever/Ingest", keys[i % len(keys)]))),
        *(_hold(where.http_port, upload_head.format(key=keys[i % len(keys)]).encode(), stop, seen)
          for i in range(HELD_UPLOADS)))


async def big_uploads(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """UPLOADERS concurrent uploads of UPLOAD_BYTES each from the rival's keys in turn, again as soon as
    one is answered."""
    content = np.random.default_rng(0).bytes(UPLOAD_BYTES)  # not a PDF: its parse fails fast

    async def uploader(i: int) -> None:
        n = 0
        async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT_S)) as client:
            while not stop.is_set():
                n += 1
                files = {"files": (f"big-{i}-{n}.pdf", content, "application/pdf")}
                try:
                    reply = await client.post(where.http_url + "/api/documents", files=files,
                                              data={"collection": "documents", "summarize": "false"},
                                              headers={"authorization": f"Bearer {where.uploaders[i]}"})
                    last = [line for line in reply.text.splitlines() if line.startswith("data:")][-2:-1]
                    seen.append(f"{reply.status_code} {last[0][6:120] if last else reply.text[:120]}")
                    if reply.status_code == 429:
                        await asyncio.sleep(float(reply.headers.get("retry-after", "1")))
                except httpx.HTTPError as exc:
                    seen.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(1.0)

    await asyncio.gather(*(uploader(i) for i in range(UPLOADERS)))


async def heavy_asks(where: Where, stop: asyncio.Event, seen: list[str]) -> None:
    """ASKERS askers of the rival asking, top_k TOP_K, about its metadata-heavy documents, each in a new
    conversation (a scope entry each)."""

    async def asker(i: int) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT_S)) as client:
            while not stop.is_set():
                try:
                    reply = await client.post(where.http_url + "/api/chat/ask", headers={
                        "authorization": f"Bearer {where.askers[i]}"},
                        json={"question": HEAVY_QUESTION, "top_k": TOP_K, "data_sources": ["Documents"]})
                    seen.append(f"{reply.status_code}")
                    if reply.status_code == 429:
                        await asyncio.sleep(float(reply.headers.get("retry-after", "1")))
                except httpx.HTTPError as exc:
                    seen.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(1.0)

    await asyncio.gather(*(asker(i) for i in range(ASKERS)))


LOADS = {"bombs": bombs, "halfopen": half_open, "embed": big_embeds, "held": held, "uploads": big_uploads,
         "metadata": heavy_asks}


def _load_process(kind: str, where: Where, stop: EventType, out: Queue) -> None:
    """A load process: runs the load until `stop` is set, then reports how many replies it saw and the first."""

    async def run() -> list[str]:
        seen: list[str] = []
        stopping = asyncio.Event()
        task = asyncio.ensure_future(LOADS[kind](where, stopping, seen))
        while not stop.is_set() and not task.done():
            await asyncio.sleep(0.1)
        stopping.set()
        try:
            await asyncio.wait_for(task, 60)
        except asyncio.TimeoutError:
            task.cancel()
        return seen

    seen = asyncio.run(run())
    out.put((len(seen), seen[:1]))


# ----------------------------------------------------------------------------- memory and Redis


def service_pids(stack: Stack) -> dict[str, int]:
    """The pid of each service process `deploy.run` started (`python -m services.<name>`)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) != \
                    stack.proc.pid:
                continue
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for name in SERVICES:
            if f"services.{name}".encode() in args:
                found[name] = int(proc.name)
    return found


class PeakRss:
    """The largest VmRSS of each process seen while it runs (sampled every 0.1 s in a thread)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.peak_kb = pids, dict.fromkeys(pids, 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            for name, pid in self.pids.items():
                with contextlib.suppress(OSError, ValueError, StopIteration):
                    line = next(li for li in Path(f"/proc/{pid}/status").read_text().splitlines()
                                if li.startswith("VmRSS:"))
                    self.peak_kb[name] = max(self.peak_kb[name], int(line.split()[1]))

    def __enter__(self) -> "PeakRss":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def manifest_limits() -> dict[str, str]:
    """Each service's memory limit in deploy/k8s/base/<service>.yaml."""
    limits = {}
    for name in SERVICES:
        for doc in yaml.safe_load_all((REPO / "deploy" / "k8s" / "base" / f"{name}.yaml").read_text()):
            if doc and doc.get("kind") in ("Deployment", "StatefulSet"):
                limits[name] = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    return limits


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else float(quantity) / MB


def ingest_heavy(stack: Stack, key: str) -> None:
    """METADATA_DOCS documents of the rival, each with the most metadata allowed (METADATA_KEYS - 1 values of
    METADATA_CHARS characters and a fund name)."""
    rng = np.random.default_rng(1)
    docs = []
    for d in range(METADATA_DOCS):
        metadata = {f"field{i:02}": rng.bytes(METADATA_CHARS // 2).hex() for i in range(METADATA_KEYS - 1)}
        text = " ".join(f"Quillmere lighthouse memo {d} part {i}. The Quillmere lighthouse fund bought {i} more "
                        f"turbines for the Skerry wind farm in quarter {i % 4 + 1}." for i in range(40))
        docs.append({"doc_id": f"heavy-{d}", "text": text, "metadata": metadata | {"fund_name": "Quillmere"}})
    for d in docs:  # one a request: each within the body limit
        reply = httpx.post(stack.http_url + "/api/documents", json={"collection": "documents", "documents": [d]},
                           headers={"authorization": f"Bearer {key}"}, timeout=TIMEOUT_S)
        if reply.status_code != 200 or '"INDEXED"' not in reply.text:
            raise RuntimeError(f"metadata-heavy ingest: {reply.status_code} {reply.text[:300]}")


def share_full(client: redis.Redis) -> bool:
    """The rival's scope entries are at SCOPE_CACHE_SIZE, or within an entry of SCOPE_CACHE_BYTES."""
    settings = config.load()
    stored, entries = scope_bytes(client, RIVAL)
    return entries >= settings.scope_cache_size or stored >= settings.scope_cache_bytes - (64 << 10)


def scope_bytes(client: redis.Redis, tenant: str) -> tuple[int, int]:
    """(stored bytes, entries) of a tenant's scope entries in Redis."""
    sizes = client.hvals(_key("sizes", tenant))
    return sum(int(v) for v in sizes), client.zcard(_key("scopes", tenant))


# ----------------------------------------------------------------------------- the part


async def measure(stack: Stack, plan: FairnessPlan, offset: int, load: str | None, where: Where,
                  keys: list[str], taken_hold: Callable[[], bool] = lambda: True) -> tuple[dict[str, Measured], str]:
    """The victim's figures while `load` runs in its own process (None: idle), once it has taken hold
    (SETTLE_S, and `taken_hold` says so, or FILL_S passed); and what the load saw."""
    if load is None:
        return await victim(stack, plan, offset, keys), ""
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    process = ctx.Process(target=_load_process, args=(load, where, stop, out), daemon=True)
    process.start()
    try:
        await asyncio.sleep(SETTLE_S)
        deadline = time.monotonic() + FILL_S
        while not taken_hold() and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        return await victim(stack, plan, offset, keys), _described(stop, out, process)
    finally:
        stop.set()
        process.join(90)
        if process.is_alive():
            process.kill()


def _described(stop: EventType, out: Queue, process: multiprocessing.process.BaseProcess) -> str:
    stop.set()
    try:
        count, first = out.get(timeout=90)
    except queue.Empty:
        return "the load process reported nothing"
    return f"{count:,} load replies" + (f"; first: {first[0][:80]!r}" if first else "")


def p(measured: Measured, q: float) -> float:
    """The q-th percentile in ms; infinite when any request failed (the victim's work was not done)."""
    if measured.failed or not measured.seconds:
        return float("inf")
    return float(np.percentile(measured.seconds, q)) * 1000


def _rows(section: Section, name: str, idle: dict[str, Measured], figures: dict[str, Measured], what: str,
          quick: bool) -> None:
    """The victim's ratios during one load, added and printed as the load ends."""
    for kind in ("upload", "ask"):
        for q in (50, 99):
            base, now = p(idle[kind], q), p(figures[kind], q)
            failed = figures[kind].failed
            note = (f"{len(failed)} of {len(failed) + len(figures[kind].seconds)} failed, first: {failed[0][:100]}"
                    if failed else f"{now:,.0f} ms vs {base:,.0f} ms idle")
            section.add(f"{kind} p{q} during {name}", round(now / base, 2), "x",
                        Target("<=", TARGET_RATIO) if not quick else None,
                        note + (f"; {what}" if kind == "upload" and q == 50 else ""))
            log(f"  {kind} p{q} during {name}: {now / base:.2f}x ({note})")
    if what:
        log(f"  the load: {what[:300]}")


def run_fairness(quick: bool = False, only: frozenset[str] | None = None) -> Section:
    """`only`: the loads to run (LOADS' names; None: every one), after the idle baseline."""
    plan = QUICK if quick else FULL
    section = Section("Fairness between tenants (victim's p50 / p99 under another's load, as a ratio to idle)")
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-redis-") as redis_dir:
        server = RedisServer(Path(redis_dir)).start()
        try:
            client = redis.Redis(port=server.port)
            client.config_set("maxmemory", REDIS_MAXMEMORY)
            client.config_set("maxmemory-policy", "noeviction")
            _run(section, plan, quick, server.url, client, only)
            client.close()
        finally:
            server.kill()
    return section


def _run(section: Section, plan: FairnessPlan, quick: bool, redis_url: str, client: redis.Redis,
         only: frozenset[str] | None) -> None:
    # the deployment's default limits and shares, for the rival too
    with Stack(RATE_LIMIT_PER_MINUTE="", TENANT_CALL_SHARE="", USER_CALL_SHARE="", TENANT_STREAM_SHARE="",
               REDIS_URL=redis_url) as stack:
        where = Where(stack.ports["http"], stack.address("embedder"), make_key(stack, RIVAL, "eve"),
                      stack.address("gateway"), stack.address("retriever"),
                      tuple(make_key(stack, RIVAL, f"eve-{i}") for i in range(1, RIVAL_KEYS)),
                      tuple(make_key(stack, RIVAL, f"uploader-{i}") for i in range(UPLOADERS)),
                      tuple(make_key(stack, RIVAL, f"asker-{i}") for i in range(ASKERS)))
        keys = [make_key(stack, "demo", f"analyst-{i}") for i in range(VICTIM_USERS)]
        loads = {"idle": None, "two bombs parsing": "bombs", f"{HALF_OPEN} half-open connections": "halfopen",
                 "the costliest allowed Embed": "embed", "one tenant holding idle streams at its share": "held",
                 f"{UPLOADERS} concurrent {UPLOAD_BYTES // MB} MB uploads of one tenant": "uploads",
                 "metadata-heavy asks filling one tenant's Redis share": "metadata"}
        limits, pids = manifest_limits(), service_pids(stack)
        idle: dict[str, Measured] = {}
        for i, (name, load) in enumerate(loads.items()):
            if load is not None and only is not None and load not in only:
                continue
            log(f"fairness: {name}")
            if load == "metadata":
                ingest_heavy(stack, make_key(stack, RIVAL, "librarian"))
                used_before, share_before = client.info("memory")["used_memory"], scope_bytes(client, RIVAL)
            with PeakRss(pids) as rss:
                figures, what = asyncio.run(measure(stack, plan, 1000 * i, load, where, keys,
                                                    (lambda: share_full(client)) if load == "metadata" else
                                                    (lambda: True)))
            if load is None:
                idle = figures
                continue
            _rows(section, name, idle, figures, what, quick)
            if load == "uploads":
                for service in SERVICES:
                    peak = rss.peak_kb.get(service, 0) / 1024
                    section.add(f"peak RSS of the {service} during the uploads", round(peak), "MB",
                                Target("<=", mebibytes(limits[service])),
                                f"limit {limits[service]} (deploy/k8s/base/{service}.yaml)")
                    log(f"  {service}: peak RSS {peak:,.0f} MB, limit {limits[service]}")
            if load == "metadata":
                used_after, (stored, entries) = client.info("memory")["used_memory"], scope_bytes(client, RIVAL)
                cap = config.load().scope_cache_bytes
                section.add("the rival's scope bytes in Redis after its metadata-heavy asks", round(stored / MB, 2),
                            "MB", Target("<=", cap / MB), f"{entries:,} entries (was {share_before[1]:,}; "
                            f"SCOPE_CACHE_SIZE {config.load().scope_cache_size:,}); SCOPE_CACHE_BYTES {cap / MB:g} MB")
                section.add("Redis used_memory during the metadata-heavy asks", round(used_after / MB, 1), "MB", None,
                            f"before {used_before / MB:.1f} MB; maxmemory {REDIS_MAXMEMORY}, noeviction")
                log(f"  Redis used_memory {used_before / MB:.1f} -> {used_after / MB:.1f} MB; the rival's scope "
                    f"entries {stored / MB:.2f} MB in {entries} (SCOPE_CACHE_BYTES {cap / MB:g} MB)")
        texts, chars = largest_embed()
        section.notes.append(f"{plan.uploads} uploads and {plan.asks} asks per row, one at a time, from "
                             f"{VICTIM_USERS} users of the victim in turn; the deployment's default limits (the "
                             f"rival's uploads count against its per-user rate); the load in a "
                             f"process of its own; the costliest Embed: {texts} texts of {chars:,} characters; "
                             f"the bombs: DOCX of {len(docx_bomb()):,} bytes inflating to "
                             f"{BOMB_XML_BYTES // 2**20} MB; the metadata-heavy documents: {METADATA_DOCS}, asked by "
                             f"{ASKERS} askers.")


if __name__ == "__main__":  # one load or a few, twice in a row say: python -m bench.fairness_bench uploads
    import argparse

    parser = argparse.ArgumentParser(description="the fairness part, the loads named only (after the idle baseline)")
    # no `choices`: argparse checks an empty list of a "*" positional against them, and refuses it
    parser.add_argument("loads", nargs="*", help=f"of {', '.join(sorted(LOADS))}; default: every load")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if unknown := set(args.loads) - set(LOADS):
        parser.error(f"unknown loads: {', '.join(sorted(unknown))}; choose from {', '.join(sorted(LOADS))}")
    print(render([run_fairness(args.quick, frozenset(args.loads) or None)]))
