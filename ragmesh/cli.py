"""The operator commands that need only the shared library: ingest files and folders into a
collection or delete documents through the retriever's gRPC API, and manage the API keys every
caller needs. The `ragmesh` command (services.cli) is these and the services' own (the retriever's
`index rebuild`, services/retriever/cli.py), added through `main`'s `more`.

    ragmesh ingest PATH... --collection NAME [--meta KEY=VALUE]... [--key KEY] [--retriever ADDR]
    ragmesh ingest --transcript FILE... [--collection NAME] [--tag TAG]... [--key KEY] [--gateway ADDR]
    ragmesh delete --collection NAME (--doc-id ID... | --where KEY=VALUE...) [--key KEY]
    ragmesh keys create --tenant T --user U [--role admin|member] [--groups G1,G2] [--expires-days N] [--label TEXT]
    ragmesh keys list [--tenant T]
    ragmesh keys revoke ID

ingest and delete send an admin API key (--key, default RAGMESH_API_KEY) as `authorization:
Bearer <key>`, over TLS when TLS_CERT/TLS_KEY are set; the key decides the tenant. A file's
doc_id is its name, or its path below a folder given on the command line; the retriever parses it
(PDF, DOCX, PPTX, Markdown, HTML, text, JSON records). With --transcript each file is a call
transcript's raw text (UTF-8), sent to the gateway's IngestTranscript: the gateway's model tags it
with 3-6 topics (or --tag gives them), it is stored as a document of type "transcript" (collection
default: documents), and each line printed names the document and its tags, or why it has none.

keys works on the store directly (SQLite under DATA_DIR, or MONGODB_URI), with the services'
pepper (API_KEY_PEPPER, or the one under DATA_DIR/secrets): run it where the services' settings
are. `keys create` prints the key once, alone on the last line of stdout; only its hash is kept.
A key's --groups are the groups its holder is in (documents are shared with groups); they are
fixed when the key is made: to change them, make a new key and revoke the old one.

Exit status: 0 when everything was done, 1 when some documents failed (each is named with its
reason) or there is no live key to revoke, 2 when nothing could be done (bad arguments, missing or
refused credential, bad settings, retriever unreachable)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from tqdm import tqdm

from ragmesh import convert
from ragmesh.clients import ClientAuth, call_metadata
from ragmesh.config import Settings
from ragmesh.access import Access
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.identity import ADMIN, MEMBER, ROLES, keys
from ragmesh.identity.authenticator import pepper
from ragmesh.private_files import UMASK
from ragmesh.store import open_store
from ragmesh.types import SearchFilter
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc

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


def _credential(args: argparse.Namespace, settings: Settings) -> ClientAuth:
    """The caller's key and channel credentials; checked before any file is read or anything sent."""
    key = (args.key or settings.api_key).strip()
    if not key:
        raise UsageError("no credential: pass --key or set RAGMESH_API_KEY to an admin key "
                         "(make one with `ragmesh keys create --tenant T --user U --role admin`)")
    return ClientAuth.key(settings, key)


def _channel(args: argparse.Namespace, settings: Settings, auth: ClientAuth, service: str = "retriever") -> grpc.Channel:
    """TLS when the settings name a certificate (the services then refuse plaintext), else plaintext."""
    address = getattr(args, service) or settings.address(service)
    if auth.channel is not None:
        return grpc.secure_channel(address, auth.channel, options=_CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)


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


def _transcripts(args: argparse.Namespace, settings: Settings, auth: ClientAuth) -> int:
    """One IngestTranscript call per file, through the gateway (which holds the tagging model)."""
    failed = 0
    with _channel(args, settings, auth, "gateway") as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for path in args.paths:
            try:
                raw_text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path}: not a readable UTF-8 text file ({exc})") from None
            request = gateway_pb2.TranscriptRequest(raw_text=raw_text, tags=args.tags, collection=args.collection or "",
                                                    transcript_id=path.stem)
            try:
                done = stub.IngestTranscript(request, timeout=args.timeout or settings.ingest_timeout,
                                             metadata=call_metadata(auth))
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.UNAVAILABLE):  # no use trying the next file
                    raise UsageError(f"gateway: {exc.code().name}: {exc.details()}") from None
                print(f"error: {path}: {exc.code().name}: {exc.details()}", file=sys.stderr)
                failed += 1
                continue
            tags = f"tags {', '.join(done.tags)} ({done.tagged_by})" if done.tags else done.note
            print(f"{path}: {done.collection}/{done.doc_id}, {done.chunks} chunks, {done.stage.lower()}; {tags}")
    return 1 if failed else 0


def _access(args: argparse.Namespace) -> Access | None:
    """Who reads the files: --share-with users and groups, --tenant-wide; neither: the collection's default."""
    if not (args.users or args.groups or args.tenant_wide):
        return None
    try:
        return Access.of(users=_listed(args.users), groups=_listed(args.groups), tenant=args.tenant_wide)
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


def _listed(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    if not (args.collection or args.transcript):
        raise UsageError("--collection is required (except with --transcript, where it defaults to documents)")
    auth = _credential(args, settings)
    if args.transcript:
        return _transcripts(args, settings, auth)
    shared = _access(args)
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
                doc_id=doc_id, collection=args.collection, metadata=dict(args.meta),
                content=path.read_bytes(), filename=doc_id,
            )
            if args.summaries is not None:
                doc.summarize = args.summaries
            if shared is not None:
                doc.access.CopyFrom(convert.access_to_proto(shared))
            yield doc

    with _channel(args, settings, auth) as channel:
        stub = retriever_pb2_grpc.RetrieverStub(channel)
        current = None
        for p in stub.Ingest(requests(), timeout=args.timeout or settings.ingest_timeout,
                             metadata=call_metadata(auth)):
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
    auth = _credential(args, settings)
    request = retriever_pb2.DeleteRequest(collection=args.collection, doc_ids=args.doc_ids or [])
    if args.where:
        values: dict[str, list[str]] = defaultdict(list)
        for key, value in args.where:
            values[key].append(value)
        request.filter.CopyFrom(convert.filter_to_proto(SearchFilter(
            equals={k: v[0] for k, v in values.items() if len(v) == 1},
            any_of={k: v for k, v in values.items() if len(v) > 1},  # a repeated key: any of its values
        )))
    with _channel(args, settings, auth) as channel:
        reply = retriever_pb2_grpc.RetrieverStub(channel).Delete(
            request, timeout=args.timeout or settings.search_timeout, metadata=call_metadata(auth))
    print(f"deleted {reply.documents} documents ({reply.chunks} chunks) from {args.collection}")
    return 0


def _when(iso: str, empty: str) -> str:
    """An ISO timestamp to the minute, for a table that fits a terminal."""
    return iso[:16].replace("T", " ") if iso else empty


def _keys_create(args: argparse.Namespace, settings: Settings) -> int:
    # The pepper first: with bad settings, fail before touching the store.
    key, record = keys.new_key(pepper(settings), args.tenant, args.user, args.role,
                               expires_days=args.expires_days, label=args.label, groups=_listed(args.groups))
    store = open_store(settings)
    try:
        store.add_api_key(record)
    finally:
        store.close()
    # The description on stderr, the key alone on stdout: `KEY=$(ragmesh keys create ...)` works.
    print(f"created key {record.key_id}: tenant {record.tenant}, user {record.user_id}, role {record.role}, "
          f"groups {','.join(record.groups) or 'none'}, expires {_when(record.expires_at, 'never')}. "
          f"It is shown only now: keep it safe.", file=sys.stderr)
    print(key)
    return 0


def _keys_list(args: argparse.Namespace, settings: Settings) -> int:
    """Never the key nor its hash: the id is enough to name a key in `keys revoke`."""
    store = open_store(settings)
    try:
        records = store.api_keys(args.tenant)
    finally:
        store.close()
    rows = [("ID", "TENANT", "USER", "ROLE", "GROUPS", "CREATED (UTC)", "EXPIRES (UTC)", "STATUS", "LABEL")]
    for r in records:
        status = "revoked" if r.revoked_at else "expired" if r.expired() else "live"
        rows.append((r.key_id, r.tenant, r.user_id, r.role, ",".join(r.groups) or "-", _when(r.created_at, ""),
                     _when(r.expires_at, "never"), status, r.label))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Takes effect on the next call: services look keys up in the store on every request."""
    store = open_store(settings)
    try:
        revoked = store.revoke_api_key(args.key_id)
    finally:
        store.close()
    if not revoked:
        print(f"ragmesh: no live key {args.key_id!r} (unknown, or revoked already)", file=sys.stderr)
        return 1
    print(f"revoked key {args.key_id}")
    return 0


Commands = argparse._SubParsersAction  # what `more` adds its commands to (add_parser)
# A group of commands from a layer above this library (a service's own), added to the `ragmesh` command.
MoreCommands = Callable[[Commands], None]


def _parser(more: Sequence[MoreCommands]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragmesh", description="ragmesh operator commands")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, collection_required: bool = True) -> None:
        sub.add_argument("--collection", required=collection_required)
        sub.add_argument("--key", default="", metavar="KEY",
                         help="an admin API key; it decides the tenant (default: RAGMESH_API_KEY)")
        sub.add_argument("--retriever", default="", metavar="HOST:PORT",
                         help="the retriever (default: RETRIEVER_ADDR, else this host and RETRIEVER_PORT)")
        sub.add_argument("--timeout", type=float, default=0.0, metavar="SECONDS")

    ingest = commands.add_parser("ingest", help="ingest files and folders (recursively)", allow_abbrev=False)
    ingest.set_defaults(run=_ingest)
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    common(ingest, collection_required=False)
    ingest.add_argument("--users", action="append", default=[], metavar="U1,U2",
                        help="users who may read the files besides the uploader (default: the collection's rule)")
    ingest.add_argument("--groups", action="append", default=[], metavar="G1,G2",
                        help="groups (from credentials) whose members may read the files")
    ingest.add_argument("--tenant-wide", action="store_true", help="every user of the tenant may read the files")
    ingest.add_argument("--transcript", action="store_true",
                        help="the files are call transcripts (text): tagged and stored through the gateway")
    ingest.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG",
                        help="with --transcript: a topic tag (repeatable; given, the model is not asked)")
    ingest.add_argument("--gateway", default="", metavar="HOST:PORT",
                        help="with --transcript: the gateway (default: this host and GATEWAY_PORT)")
    ingest.add_argument("--meta", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                        help="metadata on every document and chunk (repeatable)")
    ingest.add_argument("--summaries", action=argparse.BooleanOptionalAction, default=None,
                        help="make summaries at ingest (default: the retriever's INGEST_SUMMARIES setting)")

    delete = commands.add_parser("delete", help="delete documents by id or by metadata")
    delete.set_defaults(run=_delete)
    common(delete)
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--doc-id", dest="doc_ids", nargs="+", action="extend", metavar="ID")
    which.add_argument("--where", nargs="+", action="extend", type=_key_value, metavar="KEY=VALUE",
                       help="documents with a chunk whose metadata matches every key (a repeated key: any value)")

    key_commands = commands.add_parser("keys", help="create, list and revoke API keys (in the store)")
    actions = key_commands.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a key; prints it once, alone on the last line")
    create.set_defaults(run=_keys_create)
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True)
    create.add_argument("--role", choices=ROLES, default=MEMBER,
                        help=f"{ADMIN}: ingest, delete and operate on the tenant; {MEMBER}: chat as itself (default)")
    create.add_argument("--groups", action="append", default=[], metavar="G1,G2",
                        help="the groups the key's holder is in (default: none)")
    create.add_argument("--expires-days", type=float, default=0, metavar="N", help="default: never expires")
    create.add_argument("--label", default="", help="a note for `keys list`, e.g. who holds the key")
    listing = actions.add_parser("list", help="every key (never the key itself)")
    listing.set_defaults(run=_keys_list)
    listing.add_argument("--tenant", default=None, help="only this tenant's keys")
    revoke = actions.add_parser("revoke", help="revoke a key by its id (see `keys list`)")
    revoke.set_defaults(run=_keys_revoke)
    revoke.add_argument("key_id", metavar="ID")
    for add in more:
        add(commands)
    return parser


def main(argv: list[str] | None = None, more: Sequence[MoreCommands] = ()) -> int:
    """Runs one command (each command's `run(args, settings)` returns the exit status); `more` adds
    command groups from the layers above (services.cli)."""
    os.umask(UMASK)  # a store or secret this command makes under DATA_DIR is readable by its owner only
    args = _parser(more).parse_args(argv)
    try:
        return args.run(args, Settings())
    # ValueError: bad settings (ConfigError for secrets, unreadable TLS files, malformed numbers);
    # RagmeshError: a bad name for a key, or an unreachable store.
    except (UsageError, ValueError, RagmeshError) as exc:
        print(f"ragmesh: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"ragmesh: retriever: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
