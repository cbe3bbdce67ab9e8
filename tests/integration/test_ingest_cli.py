"""The `ragmesh` command as a subprocess against the stack's retriever: a folder ingested
recursively with metadata, a summary line, per-file errors and the exit status; then
delete by filter and by id. Every call carries an admin key, which decides the tenant: no key,
a garbage, revoked or member key is refused, and another tenant never sees the documents."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import HOST, Stack
from tests.unit.test_ingest_parsers import docx_bytes, meeting_note, pdf_bytes, sentence

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "ingest_cli"
# Settings of the test's own environment that would point the command somewhere else.
_FOREIGN = ("RAGMESH_API_KEY", "SERVICE_TOKEN", "API_KEY_PEPPER", "MONGODB_URI", "TLS_CERT", "TLS_KEY", "TLS_CA",
            "RETRIEVER_ADDR")


def ragmesh(stack: Stack, *args: str, key: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """`ragmesh ARGS` in a subprocess with the stack's DATA_DIR (its store and pepper) and retriever;
    RAGMESH_API_KEY is `key`, the stack's DEMO admin key by default ("" for none)."""
    base = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    base |= {"DATA_DIR": str(stack.settings.data_dir), "RAGMESH_HOST": HOST,
             "RETRIEVER_ADDR": stack.address("retriever"), "RAGMESH_API_KEY": stack.admin_key if key is None else key}
    return subprocess.run([sys.executable, "-m", "ragmesh.cli", *args], cwd=ROOT, env=base | env,
                          capture_output=True, text=True, timeout=120)


def doc_ids(stack: Stack, key: str | None = None, collection: str = COLLECTION,
            query: str = "orchard report") -> set[str]:
    """The documents a search with `key` (default: the DEMO admin key) finds in the collection."""
    with channel(stack.address("retriever"), bearer(key or stack.admin_key)) as chan:
        reply = retriever_pb2_grpc.RetrieverStub(chan).Search(
            retriever_pb2.SearchRequest(query=query, collections=[collection], top_k=200), timeout=10)
    return {h.chunk.doc_id for h in reply.hits}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    (root / "reports").mkdir()
    (root / "reports" / "q1.pdf").write_bytes(pdf_bytes([" ".join(sentence("orchard report", i) for i in range(5))] * 2))
    (root / "reports" / "q2.docx").write_bytes(docx_bytes([("h", "Orchard"), ("p", "The orchard report for Q2.")]))
    (root / "notes.jsonl").write_text(json.dumps(meeting_note("mn-cli")) + "\n")
    (root / "readme.md").write_text("# Orchard\n\nThe orchard report index. Contact ops@example.com.")
    (root / "empty.txt").write_bytes(b"")
    (root / ".hidden.txt").write_text("Never sent.")
    return root


def test_ingest_a_folder_then_again_then_delete(stack: Stack, folder: Path) -> None:
    first = ragmesh(stack, "ingest", str(folder), "--collection", COLLECTION, "--meta", "batch=cli", "--no-summaries")
    assert first.returncode == 1, first.stderr  # one file failed
    assert "error: empty.txt: is empty" in first.stderr
    summary = first.stdout.strip().splitlines()[-1]
    assert summary.startswith("4 documents (4 indexed, 0 unchanged), ")
    assert " 1 redactions, 1 errors, " in summary and summary.endswith(" s")
    assert doc_ids(stack) == {"reports/q1.pdf", "reports/q2.docx", "mn-cli", "readme.md"}

    again = ragmesh(stack, "ingest", str(folder / "reports"), "--collection", COLLECTION, "--meta", "batch=cli",
                    "--no-summaries")
    assert again.returncode == 0, again.stderr
    # Below this folder the files are named q1.pdf and q2.docx: two more documents.
    assert again.stdout.strip().startswith("2 documents (2 indexed, 0 unchanged)")
    same = ragmesh(stack, "ingest", str(folder / "reports"), "--collection", COLLECTION, "--meta", "batch=cli",
                   "--no-summaries")
    assert same.stdout.strip().startswith("2 documents (0 indexed, 2 unchanged)")

    deleted = ragmesh(stack, "delete", "--collection", COLLECTION, "--where", "filetype=pdf", "filetype=docx")
    assert deleted.returncode == 0, deleted.stderr
    assert re.fullmatch(rf"deleted 4 documents \(\d+ chunks\) from {COLLECTION}", deleted.stdout.strip())
    assert doc_ids(stack) == {"mn-cli", "readme.md"}
    # --key instead of RAGMESH_API_KEY, and --retriever instead of RETRIEVER_ADDR.
    by_id = ragmesh(stack, "delete", "--collection", COLLECTION, "--doc-id", "mn-cli", "readme.md",
                    "--key", stack.admin_key, "--retriever", stack.address("retriever"), key="", RETRIEVER_ADDR="")
    assert by_id.stdout.startswith("deleted 2 documents") and doc_ids(stack) == set()


def test_bad_arguments_and_errors_exit_2(stack: Stack, tmp_path: Path) -> None:
    missing = ragmesh(stack, "ingest", str(tmp_path / "nope"), "--collection", COLLECTION)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    bad_meta = ragmesh(stack, "ingest", str(tmp_path), "--collection", COLLECTION, "--meta", "novalue")
    assert bad_meta.returncode == 2 and "expected KEY=VALUE" in bad_meta.stderr
    refused = ragmesh(stack, "delete", "--collection", "bad name!", "--doc-id", "x")
    assert refused.returncode == 2 and "INVALID_ARGUMENT" in refused.stderr


def test_a_credential_is_required_and_checked(stack: Stack, folder: Path) -> None:
    readme = str(folder / "readme.md")
    none = ragmesh(stack, "ingest", readme, "--collection", COLLECTION, key="")
    assert none.returncode == 2 and "no credential" in none.stderr and "RAGMESH_API_KEY" in none.stderr
    no_delete = ragmesh(stack, "delete", "--collection", COLLECTION, "--doc-id", "x", key="")
    assert no_delete.returncode == 2 and "no credential" in no_delete.stderr

    garbage = ragmesh(stack, "ingest", readme, "--collection", COLLECTION, key="not-a-key")
    assert garbage.returncode == 2 and "UNAUTHENTICATED" in garbage.stderr, garbage.stderr
    revoked = stack.key("demo", "gone", "admin")
    assert ragmesh(stack, "keys", "revoke", revoked.split("_")[1]).returncode == 0
    refused = ragmesh(stack, "ingest", readme, "--collection", COLLECTION, "--key", revoked)
    assert refused.returncode == 2 and "UNAUTHENTICATED" in refused.stderr, refused.stderr
    member = ragmesh(stack, "ingest", readme, "--collection", COLLECTION, key=stack.key("demo", "reader"))
    assert member.returncode == 2 and "PERMISSION_DENIED" in member.stderr, member.stderr

    # The key decides the tenant: there is no --tenant to name another one.
    other = ragmesh(stack, "ingest", readme, "--collection", COLLECTION, "--tenant", "other")
    assert other.returncode == 2 and "unrecognized arguments: --tenant" in other.stderr
    assert doc_ids(stack) == set()


def test_documents_belong_to_the_keys_tenant(stack: Stack, tmp_path: Path) -> None:
    collection = "ingest_cli_tenants"
    (tmp_path / "quince.md").write_text("# Quince\n\nThe quince ledger lists every quince tree in the grove.")
    ingested = ragmesh(stack, "ingest", str(tmp_path), "--collection", collection, "--no-summaries")
    assert ingested.returncode == 0, ingested.stderr
    assert doc_ids(stack, collection=collection, query="quince ledger") == {"quince.md"}

    other = stack.key("other", "x", "admin")
    assert doc_ids(stack, other, collection, "quince ledger") == set()
    missed = ragmesh(stack, "delete", "--collection", collection, "--doc-id", "quince.md", key=other)
    assert missed.returncode == 0 and missed.stdout.startswith("deleted 0 documents"), missed.stderr
    assert doc_ids(stack, collection=collection, query="quince ledger") == {"quince.md"}

    deleted = ragmesh(stack, "delete", "--collection", collection, "--doc-id", "quince.md")
    assert deleted.stdout.startswith("deleted 1 documents"), deleted.stderr
    assert doc_ids(stack, collection=collection, query="quince ledger") == set()


def test_ingest_names_who_reads_the_files(stack: Stack, tmp_path: Path) -> None:
    """Into `documents` an admin's files are its own unless shared: --users and --tenant-wide share them."""
    (tmp_path / "pelican.md").write_text("# Pelican\n\nThe pelican-marmot ledger closes in June.")
    (tmp_path / "heron.md").write_text("# Heron\n\nThe heron-marmot ledger closes in July.")
    shared = ragmesh(stack, "ingest", str(tmp_path / "pelican.md"), "--collection", "documents", "--users", "cli-bob")
    assert shared.returncode == 0, shared.stderr
    everyone = ragmesh(stack, "ingest", str(tmp_path / "heron.md"), "--collection", "documents", "--tenant-wide")
    assert everyone.returncode == 0, everyone.stderr
    bob = stack.key("demo", "cli-bob", "admin")
    carol = stack.key("demo", "cli-carol", "admin")
    assert doc_ids(stack, bob, "documents", "marmot ledger closes") >= {"pelican.md", "heron.md"}
    assert "pelican.md" not in doc_ids(stack, carol, "documents", "marmot ledger closes")
    assert "heron.md" in doc_ids(stack, carol, "documents", "marmot ledger closes")
    bad = ragmesh(stack, "ingest", str(tmp_path / "heron.md"), "--collection", "documents", "--users", "bad name")
    assert bad.returncode == 2 and "access.users" in bad.stderr, bad.stderr
