"""Behaviours are named for what they do: product code never cites a design document by its number
("000's stop flow", "003 step 8", "004 Path B"). The one place that maps names to design sources is
docs/glossary.md."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A number a design document has (000-004) standing alone: not part of 0.001, 2,000,
# gemini-embedding-001 or 003% -- plus the seeds' path letters and the word itself.
CITATION = re.compile(r"(?<![\w.,-])00[0-4](?![\w.,%|])|\b[Pp]ath [ABC]\b|\bseeds?'|\bthe \w+ seed\b")
PRODUCT = ("ragmesh", "services", "protos", "deploy", "demo")
GENERATED = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
VENDORED = "vendor"  # third-party files served as they are (services/gateway/web/vendor)


def citations(text: str) -> list[str]:
    return [m.group(0) for m in CITATION.finditer(text)]


def test_the_pattern_finds_citations_and_leaves_figures_alone() -> None:
    assert citations("000's stop flow; 003 step 8; (004 Path B); # 002") == ["000", "003", "004", "Path B", "002"]
    assert citations("the fund-research seed's step 7") == ["seed'"]
    assert citations("0.001 s, 2,000 characters, gemini-embedding-001, 1.003x, rate 0.002, (?!000|666)") == []


def test_product_code_cites_no_design_document_by_number() -> None:
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.name.endswith(GENERATED) or VENDORED in path.parts or path.suffix not in {
                    ".py", ".proto", ".yaml", ".yml", ".md", ".toml", ".html", ".js"}:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if citations(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "name the behaviour instead (docs/glossary.md maps names to sources):\n" + "\n".join(found)
