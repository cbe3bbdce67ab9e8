"""The `ragmesh` command as a subprocess against the stack's retriever: a folder ingested
recursively with metadata, a summary line, per-file errors and the exit status; then
delete by filter and by id."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.stack import Stack
from tests.unit.test_ingest_parsers import docx_bytes, meeting_note, pdf_bytes, sentence

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "ingest_cli"


def ragmesh(stack: Stack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragmesh.cli", *args, "--retriever", stack.address("retriever")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def doc_ids(stack: Stack) -> set[str]:
    with grpc.insecure_channel(stack.address("retriever")) as channel:
        reply = retriever_pb2_grpc.RetrieverStub(channel).Search(
            retriever_pb2.SearchRequest(query="orchard report", collections=[COLLECTION], top_k=200), timeout=10)
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
    by_id = ragmesh(stack, "delete", "--collection", COLLECTION, "--doc-id", "mn-cli", "readme.md")
    assert by_id.stdout.startswith("deleted 2 documents") and doc_ids(stack) == set()


def test_bad_arguments_and_errors_exit_2(stack: Stack, tmp_path: Path) -> None:
    missing = ragmesh(stack, "ingest", str(tmp_path / "nope"), "--collection", COLLECTION)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    bad_meta = ragmesh(stack, "ingest", str(tmp_path), "--collection", COLLECTION, "--meta", "novalue")
    assert bad_meta.returncode == 2 and "expected KEY=VALUE" in bad_meta.stderr
    refused = ragmesh(stack, "delete", "--collection", "bad name!", "--doc-id", "x")
    assert refused.returncode == 2 and "INVALID_ARGUMENT" in refused.stderr
