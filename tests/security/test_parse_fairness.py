"""One tenant must not stall everyone's ingest, tried as an attacker would: tenant `bombco`'s admin
uploads DOCX decompression bombs (a few hundred kilobytes holding tens of megabytes of
document.xml, one of them with zip headers that lie about the size) over two Ingest streams at once,
to take every parse worker, while tenant `bystander` uploads a one-line DOCX (parsed in a worker
too). The bystander's upload must reach INDEXED, each bomb must FAIL naming the limit that stopped it, and once it has
failed no worker process may still be parsing it (the old retriever reported FAILED after 60 s and
left the thread parsing for minutes, with 1.4 GB of its memory)."""
from __future__ import annotations

import io
import os
import struct
import threading
import time
import zipfile

import docx
import pytest

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from services.retriever.ingest.parsers.archive import ArchiveLimits
from services.retriever.ingest.workers import ParseLimits, ParsePool
from tests.auth import bearer, channel
from tests.stack import Stack
from tests.unit.test_ingest_parsers import docx_bytes

COLLECTION = "parse_fairness"
BOMB_PARAGRAPHS = 720_000  # ~40 MB of document.xml


def docx_with_body(body: bytes, declared: int | None = None) -> bytes:
    """A real DOCX whose word/document.xml is `body`, deflated as hard as zip can; `declared`: the
    uncompressed size its local and central headers claim instead of the true one."""
    template = io.BytesIO()
    docx.Document().save(template)
    source, out = zipfile.ZipFile(template), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bomb:
        for info in source.infolist():
            bomb.writestr(info.filename, body if info.filename == "word/document.xml" else source.read(info))
    data = bytearray(out.getvalue())
    if declared is not None:
        member = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("word/document.xml")
        struct.pack_into("<I", data, member.header_offset + 22, declared)  # local file header
        entry = data.find(b"PK\x01\x02")  # the central directory: its entries name their local header's offset
        while struct.unpack_from("<I", data, entry + 42)[0] != member.header_offset:
            entry = data.find(b"PK\x01\x02", entry + 4)
        struct.pack_into("<I", data, entry + 24, declared)
    return bytes(data)


def bomb_body(paragraphs: int = BOMB_PARAGRAPHS) -> bytes:
    """Tens of megabytes of valid WordprocessingML that deflate to a few hundred kilobytes."""
    lines = b"".join(b"<w:p><w:r><w:t>Quarterly report line %d</w:t></w:r></w:p>" % (i % 20) for i in range(paragraphs))
    return (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w='
            b'"http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>' + lines + b"</w:body></w:document>")


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    body = bomb_body()
    honest, liar = docx_with_body(body), docx_with_body(body, declared=10_000)
    assert len(body) > 30_000_000 and len(honest) < 300_000 and len(liar) == len(honest)
    return {"bomb.docx": honest, "liar.docx": liar}


@pytest.fixture(scope="module")
def tenants(stack: Stack) -> dict[str, str]:
    return {"bombco": stack.key("bombco", "bombco-admin", "admin"),
            "bystander": stack.key("bystander", "bystander-admin", "admin")}


def upload(stack: Stack, key: str, files: dict[str, bytes], out: list[retriever_pb2.IngestProgress]) -> None:
    """One Ingest stream of the files, its progress appended to `out` as it arrives."""
    docs = (retriever_pb2.Document(collection=COLLECTION, filename=name, content=content)
            for name, content in files.items())
    with channel(stack.address("retriever"), bearer(key)) as ch:
        out.extend(retriever_pb2_grpc.RetrieverStub(ch).Ingest(docs, timeout=300))


def state(pid: int) -> tuple[int, str]:
    """A process's parent and state letter (R running, S sleeping, Z zombie); (0, "") when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0, ""
    return int(fields[1]), fields[0]


def parse_workers() -> dict[int, str]:
    """The state of every parse worker under this process: forked by multiprocessing's forkserver
    (a child of this process), they share its command line."""
    found: dict[int, str] = {}
    for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"multiprocessing.forkserver" not in cmdline.read():
                    continue
        except OSError:
            continue
        parent, letter = state(pid)
        if state(parent)[0] == os.getpid():
            found[pid] = letter
    return found


def rss_mb() -> float:
    """This process's resident memory: the in-process stack's retriever is part of it."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def final(progress: list[retriever_pb2.IngestProgress]) -> dict[str, tuple[str, str]]:
    return {p.filename: (retriever_pb2.IngestStage.Name(p.stage), p.error) for p in progress
            if retriever_pb2.IngestStage.Name(p.stage) in ("INDEXED", "UNCHANGED", "FAILED")}


def attack(stack: Stack, tenants: dict[str, str], bombs: dict[str, bytes], pool: ParsePool,
           note: str) -> dict[str, tuple[str, str]]:
    """The bombs over two streams at once; once one is being parsed, the bystander's DOCX `note`. Returns
    every document's last progress; checks no worker is left parsing after the bombs failed."""
    before, attacker = rss_mb(), []
    streams = [threading.Thread(target=upload, args=(stack, tenants["bombco"], {name: content}, attacker))
               for name, content in bombs.items()]
    for stream in streams:
        stream.start()
    while not pool.parsing().get("bombco") and any(s.is_alive() for s in streams):
        time.sleep(0.005)
    bystander: list[retriever_pb2.IngestProgress] = []
    upload(stack, tenants["bystander"], {note: docx_bytes([("p", f"Greetings from the bystander team ({note}).")])},
           bystander)
    for stream in streams:
        stream.join(300)
    assert final(bystander) == {note: ("INDEXED", "")}
    assert set(parse_workers().values()) <= {"S", "Z", ""}, \
        f"a worker is still parsing after its document failed: {parse_workers()}"
    assert rss_mb() - before < 300, "the retriever itself held the bombs' expansion"
    return final(attacker)


def test_bombs_are_refused_before_parsing_while_another_tenants_upload_completes(
        stack: Stack, tenants: dict[str, str], bombs: dict[str, bytes]) -> None:
    pool = stack.hosts["retriever"].app.parsing
    assert isinstance(pool, ParsePool)
    got = attack(stack, tenants, bombs, pool, "refused.docx")
    assert set(pool.pids()) <= set(parse_workers()) and pool.pids(), "the /proc scan sees the idle workers"
    assert got["bomb.docx"][0] == "FAILED" and got["bomb.docx"][1].startswith("bomb.docx: expands to "), got
    assert "over the limit of 100x (INGEST_ZIP_MAX_RATIO), so it was not parsed" in got["bomb.docx"][1]
    assert got["liar.docx"] == ("FAILED", "liar.docx: member 'word/document.xml' inflates past the 10,000 bytes its "
                                "zip headers declare (INGEST_ZIP_MAX_BYTES counts declared sizes), so it was not parsed")


@pytest.mark.slow  # two workers grow to their memory limit
def test_bombs_that_get_past_the_zip_checks_die_with_their_worker(
        stack: Stack, tenants: dict[str, str], bombs: dict[str, bytes]) -> None:
    """As if the bombs were shaped to pass the zip checks (here: checks relaxed): each reaches the
    parser, whose worker is killed at its memory limit, and the other tenant is not held up."""
    app = stack.hosts["retriever"].app
    pool = ParsePool(ParseLimits(memory_mb=384, archive=ArchiveLimits(max_ratio=1e9)))
    app.ingestor.parsing, kept = pool, app.ingestor.parsing
    try:
        got = attack(stack, tenants, {"bomb.docx": bombs["bomb.docx"], "bomb2.docx": bombs["bomb.docx"]}, pool,
                     "killed.docx")
    finally:
        app.ingestor.parsing = kept
        pool.close()
    for name in ("bomb.docx", "bomb2.docx"):
        assert got[name] == ("FAILED", f"{name}: needed more than 384 MB to parse (INGEST_PARSE_MEMORY_MB), so it "
                                       "was not ingested"), got
    assert pool.killed == 2
