"""Where in a book a chunk sits: its chapter, its section in the chapter and the number of its first
paragraph in that section, read from the metadata ingestion stores on chunks of documents with
chapters. Documents without chapters (notes, factsheets, memos) have no place: every field empty."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Place:
    chapter: str = ""
    section: str = ""  # empty in a chapter's opening text, before its first section
    paragraph: int = 0  # 1-based, in the section (in the chapter when there is no section); 0: not known

    def __bool__(self) -> bool:
        return bool(self.chapter)

    def __str__(self) -> str:
        """"Chapter 2: Storms › 2.1 The fog signal · ¶3", as labels and the page show it."""
        shown = " › ".join(p for p in (self.chapter, self.section) if p)
        return f"{shown} · ¶{self.paragraph}" if self.paragraph else shown


def place_of(metadata: Mapping[str, str]) -> Place:
    """The chunk's place; a chunk's `section` metadata is its heading, which is the chapter's own in the
    chapter's opening text."""
    chapter = metadata.get("chapter", "")
    if not chapter:
        return Place()
    section = metadata.get("section", "")
    paragraph = metadata.get("paragraph", "")
    return Place(chapter, "" if section == chapter else section, int(paragraph) if paragraph.isdigit() else 0)
