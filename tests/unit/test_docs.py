"""The README and docs/ hold together: the README stays a short front page that opens with the two
commands, every relative link (and its #anchor) leads somewhere, and design-document numbers appear
only in the glossary that maps names to them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragmesh import configdoc

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A design document's number (000-004) standing alone (not 2,000, 0.001 or gemini-embedding-001), the
# seeds' path letters, or a seed named as such.
DOCUMENT_NUMBER = re.compile(r"(?<![\w.,-])00[0-4](?![\w.,%])|\b[Pp]ath [ABC]\b|\bseeds?'|\bthe \w+ seed\b|\bseed 00")


def prose(text: str) -> str:
    """The text outside fenced code blocks and the generated settings table."""
    text = re.sub(re.escape(configdoc.START) + r".*?" + re.escape(configdoc.END), "", text, flags=re.S)
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.M)}


def test_readme_is_a_short_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move detail to docs/"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first_section = re.search(r"^## (.+)$", text, re.M)
    assert first_section and first_section.group(1) == "The two commands"
    block = re.search(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    assert block and block.start() < 600, "the first code block comes right after the title"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make run", "make test"]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_heading(page: Path):
    assert PAGES, "docs/ holds the pages the README links to"
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment}")
    assert not broken, broken


def test_the_readme_links_every_page_of_docs():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(README.read_text())}
    assert {p.resolve() for p in PAGES} <= linked


@pytest.mark.parametrize("page", [README, *(p for p in PAGES if p.name != "glossary.md")],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_design_documents_are_cited_only_in_the_glossary(page: Path):
    hits = [line.strip() for line in prose(page.read_text()).splitlines() if DOCUMENT_NUMBER.search(line)]
    assert not hits, f"name the behaviour (docs/glossary.md maps names to design sources): {hits}"
