"""Turns the demo corpus files into Documents for the `meeting_notes` and `factsheets`
collections and loads them through Retriever.Ingest (unchanged documents are skipped)."""
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


def _records(name: str) -> list[dict]:
    with open(CORPUS_DIR / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def meeting_documents() -> list[Document]:
    return [
        Document(
            doc_id=r["doc_id"], collection="meeting_notes",
            text=f"{r['notes']}\n\nConclusion: {r['conclusion']}",
            date=r["meeting_date"],
            title=f"{r['fund_name']} meeting with {r['manager']} ({r['meeting_date']})",
            metadata={"fund_name": r["fund_name"], "manager": r["manager"], "meeting_date": r["meeting_date"]},
        )
        for r in _records("meeting_notes.jsonl")
    ]


def _sections(r: dict) -> dict[str, str]:
    """One text per factsheet section, so a search can match the section that answers."""
    fund, date, p, x = r["fund_name"], r["report_date"], r["performance"], r["exposure"]
    holdings = ", ".join(f"{h['name']} ({h['sector']}) {h['weight']}%" for h in r["holdings"])
    return {
        "performance": (
            f"{fund} performance as of {date}. Month return {p['month']}%. Quarter-to-date {p['qtd']}%. "
            f"Year-to-date {p['ytd']}%. One-year return {p['one_year']}%. Annualised since inception "
            f"{p['since_inception_annualised']}%. Volatility {p['volatility']}%. Sharpe ratio {p['sharpe']}. "
            f"Maximum drawdown {p['max_drawdown']}%. Assets under management ${r['aum_usd_bn']}bn."
        ),
        "holdings": (
            f"{fund} top holdings as of {date}: {holdings}. Gross exposure {x['gross']}%, net exposure "
            f"{x['net']}%, long {x['long']}%, short {x['short']}%."
        ),
        "commentary": f"{fund} manager commentary for the period ending {date}. {r['commentary']}",
    }


def factsheet_documents() -> list[Document]:
    docs = []
    for r in _records("factsheets.jsonl"):
        for section, text in _sections(r).items():
            docs.append(Document(
                doc_id=f"{r['factsheet_id']}:{section}", collection="factsheets", text=text,
                date=r["report_date"], title=f"{r['fund_name']} Factsheet ({r['report_date']})",
                metadata={"fund_name": r["fund_name"], "report_date": r["report_date"],
                          "section_type": section, "factsheet_id": r["factsheet_id"],
                          "filename": r["filename"],
                          # the complete factsheet, shown once per factsheet in the context (000 step 5)
                          "full_document": json.dumps(r, sort_keys=True, separators=(",", ":"))},
            ))
    return docs


def documents() -> list[Document]:
    return meeting_documents() + factsheet_documents()


async def load(client: RetrieverClient) -> Counter:
    """Ingests the corpus; returns how many documents ended in each stage."""
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
    return outcome
