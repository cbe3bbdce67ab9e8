"""The `ragmesh` command: ingest files and folders into a collection, or delete documents,
through the retriever's gRPC API.

    ragmesh ingest PATH... --collection NAME [--meta KEY=VALUE]... [--tenant T] [--retriever ADDR]
    ragmesh delete --collection NAME (--doc-id ID... | --where KEY=VALUE...) [--tenant T]

A file's doc_id is its name, or its path below a folder given on the command line; the
retriever parses it (PDF, DOCX, PPTX, Markdown, HTML, text, JSON records). Exit status: 0 when
every document went in, 1 when some failed (each is named with its reason), 2 when nothing could
be done (bad arguments, retriever unreachable)."""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from tqdm import tqdm

from ragmesh import convert
from ragmesh.clients import call_metadata
from ragmesh.config import Settings
from ragmesh.types import SearchFilter
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc

_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
_DONE = ("INDEXED", "UNCHANGED", "FAILED")


class UsageError(Exception):
    """Bad arguments: reported before anything is sent."""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _files(paths: list[Path]) -> list[tuple[Path, str]]:
    """(file, doc_id) for every file named or found below a named folder (hidden ones skipped)."""
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            found += [
                (f, f.relative_to(path).as_posix()) for f in sorted(path.rglob("*"))
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(path).parts)
            ]
        elif path.is_file():
            found.append((path, path.name))
        else:
            raise UsageError(f"{path}: no such file or folder")
    seen: dict[str, Path] = {}
    for f, doc_id in found:
        if doc_id in seen:
            raise UsageError(f"{f} and {seen[doc_id]} would both be document {doc_id!r}: ingest them separately")
        seen[doc_id] = f
    return found


@dataclass
class _Tally:
    indexed: int = 0
    unchanged: int = 0
    chunks: int = 0
    redactions: int = 0
    errors: list[str] = field(default_factory=list)

    def line(self, seconds: float) -> str:
        documents = self.indexed + self.unchanged
        return (f"{documents} documents ({self.indexed} indexed, {self.unchanged} unchanged), {self.chunks} chunks, "
                f"{self.redactions} redactions, {len(self.errors)} errors, {seconds:.1f} s")


def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    files = _files(args.paths)
    tally, started = _Tally(), time.monotonic()
    bar = tqdm(total=len(files), unit="file", file=sys.stderr, disable=None)

    def fail(message: str) -> None:
        tally.errors.append(message)
        bar.write(f"error: {message}", file=sys.stderr)

    def requests() -> Iterator[retriever_pb2.Document]:
        for path, doc_id in files:
            size = path.stat().st_size
            if size > settings.ingest_max_bytes:  # the retriever would refuse it; don't send it
                fail(f"{doc_id}: is {size:,} bytes, over the limit of {settings.ingest_max_bytes:,} bytes")
                bar.update(1)
                continue
            doc = retriever_pb2.Document(
                doc_id=doc_id, collection=args.collection, tenant=args.tenant, metadata=dict(args.meta),
                content=path.read_bytes(), filename=doc_id,
            )
            if args.summaries is not None:
                doc.summarize = args.summaries
            yield doc

    with grpc.insecure_channel(args.retriever or settings.address("retriever"), options=_CHANNEL_OPTIONS) as channel:
        stub = retriever_pb2_grpc.RetrieverStub(channel)
        current = None
        for p in stub.Ingest(requests(), timeout=args.timeout or settings.ingest_timeout, metadata=call_metadata()):
            if p.filename != current:
                bar.update(0 if current is None else 1)
                current = p.filename
            stage = retriever_pb2.IngestStage.Name(p.stage)
            if stage not in _DONE:
                continue
            if stage == "FAILED":
                fail(p.error)
                continue
            tally.indexed += stage == "INDEXED"
            tally.unchanged += stage == "UNCHANGED"
            tally.chunks += p.chunks
            tally.redactions += p.redactions
        bar.update(bar.total - bar.n)
    bar.close()
    print(tally.line(time.monotonic() - started))
    return 1 if tally.errors else 0


def _delete(args: argparse.Namespace, settings: Settings) -> int:
    request = retriever_pb2.DeleteRequest(collection=args.collection, tenant=args.tenant, doc_ids=args.doc_ids or [])
    if args.where:
        values: dict[str, list[str]] = defaultdict(list)
        for key, value in args.where:
            values[key].append(value)
        request.filter.CopyFrom(convert.filter_to_proto(SearchFilter(
            equals={k: v[0] for k, v in values.items() if len(v) == 1},
            any_of={k: v for k, v in values.items() if len(v) > 1},  # a repeated key: any of its values
        )))
    with grpc.insecure_channel(args.retriever or settings.address("retriever"), options=_CHANNEL_OPTIONS) as channel:
        reply = retriever_pb2_grpc.RetrieverStub(channel).Delete(
            request, timeout=args.timeout or settings.search_timeout, metadata=call_metadata())
    print(f"deleted {reply.documents} documents ({reply.chunks} chunks) from {args.collection}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragmesh", description="ragmesh operator commands")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--collection", required=True)
        sub.add_argument("--tenant", default="")
        sub.add_argument("--retriever", default="", metavar="HOST:PORT",
                         help="the retriever (default: RETRIEVER_ADDR, else this host and RETRIEVER_PORT)")
        sub.add_argument("--timeout", type=float, default=0.0, metavar="SECONDS")

    ingest = commands.add_parser("ingest", help="ingest files and folders (recursively)")
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    common(ingest)
    ingest.add_argument("--meta", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                        help="metadata on every document and chunk (repeatable)")
    ingest.add_argument("--summaries", action=argparse.BooleanOptionalAction, default=None,
                        help="make summaries at ingest (default: the retriever's INGEST_SUMMARIES setting)")

    delete = commands.add_parser("delete", help="delete documents by id or by metadata")
    common(delete)
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--doc-id", dest="doc_ids", nargs="+", action="extend", metavar="ID")
    which.add_argument("--where", nargs="+", action="extend", type=_key_value, metavar="KEY=VALUE",
                       help="documents with a chunk whose metadata matches every key (a repeated key: any value)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings()
    try:
        return _ingest(args, settings) if args.command == "ingest" else _delete(args, settings)
    except UsageError as exc:
        print(f"ragmesh: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"ragmesh: retriever: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
