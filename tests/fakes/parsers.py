"""Parsers that misbehave, for the parse worker pool's tests: they run in the worker processes, so
they live in a module a worker can import (a test's closure cannot be sent to another process)."""
from __future__ import annotations

import os
import time

from ragmesh.types import Document
from services.retriever.ingest.parsed import BadRecord, Parsed
from services.retriever.ingest.parsers import parse
from services.retriever.ingest.parsers.archive import ArchiveLimits


def misbehaving(doc: Document, max_bytes: int, archive: ArchiveLimits) -> list[Parsed | BadRecord]:
    """What the document's title asks for: "spin" (forever), "hoard" (memory until it runs out),
    "crash" (the process dies), "pid" (a document naming the worker's process), "gated" (marks
    metadata["gate"] + "." + doc_id + ".started", then waits for the file metadata["gate"]), else
    a real parse."""
    if doc.title == "spin":
        while True:
            time.sleep(0.01)
    if doc.title == "hoard":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
    if doc.title == "crash":
        os._exit(3)
    if doc.title == "gated":
        gate = doc.metadata["gate"]
        open(f"{gate}.{doc.doc_id}.started", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.01)
    if doc.title == "pid":
        return parse(Document(doc.doc_id, doc.collection, text=f"Parsed in process {os.getpid()}."), max_bytes, archive)
    return parse(doc, max_bytes, archive)
