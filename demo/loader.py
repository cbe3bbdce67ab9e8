"""Loads the demo corpus through Retriever.Ingest as a customer's upload goes: each record of
meeting_notes.jsonl and factsheets.jsonl is sent as that file's JSON, and the retriever's record
parser makes its sections, chunks and complete-factsheet parent (nothing is made by hand here,
so the demo shows what a customer's files get). Unchanged documents are skipped."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from ragmesh import convert
from ragmesh.clients import RetrieverClient
from ragmesh.types import Document
from ragmesh.v1 import retriever_pb2

CORPUS_DIR = Path(__file__).parent / "corpus"
FILES = {"meeting_notes": "meeting_notes.jsonl", "factsheets": "factsheets.jsonl"}  # collection: file
_ID_FIELDS = {"meeting_notes": "doc_id", "factsheets": "factsheet_id"}


def _documents(collection: str) -> list[Document]:
    """One Document per record of the collection's file, holding that record as the file's bytes."""
    name = FILES[collection]
    with open(CORPUS_DIR / name, encoding="utf-8") as fh:
        lines = [line.strip() for line in fh if line.strip()]
    return [Document(doc_id=json.loads(line)[_ID_FIELDS[collection]], collection=collection,
                     content=line.encode(), filename=name)
            for line in lines]


def meeting_documents() -> list[Document]:
    return _documents("meeting_notes")


def factsheet_documents() -> list[Document]:
    return _documents("factsheets")


def documents() -> list[Document]:
    return meeting_documents() + factsheet_documents()


def _hand_made_factsheet_ids() -> list[str]:
    """The ids of the per-section factsheet documents this loader made by hand before it sent the
    records through the public path: a DATA_DIR loaded then still holds them beside the new ones."""
    return [f"{doc.doc_id}:{section}" for doc in factsheet_documents()
            for section in ("performance", "holdings", "commentary")]


async def load(client: RetrieverClient) -> Counter:
    """Ingests the corpus (and removes the hand-made factsheet sections of an older load); returns how
    many documents ended in each stage."""
    async def stream() -> AsyncIterator[retriever_pb2.Document]:
        for doc in documents():
            yield convert.document_to_proto(doc)

    outcome: Counter = Counter()
    async for progress in client.ingest(stream()):
        stage = retriever_pb2.IngestStage.Name(progress.stage)
        if stage in ("INDEXED", "UNCHANGED", "FAILED"):
            outcome[stage] += 1
            if stage == "FAILED":
                raise RuntimeError(f"demo document {progress.doc_id} failed: {progress.error}")
    await client.delete("factsheets", _hand_made_factsheet_ids())
    return outcome
