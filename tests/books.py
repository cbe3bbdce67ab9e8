"""A small book made here: Markdown with a title, chapters, sections and paragraphs, and facts whose
place (chapter, section, paragraph) is known. Shared by the tests of book citations (unit, integration,
web page)."""
from __future__ import annotations

from dataclasses import dataclass

FILENAME = "lighthouse-handbook.md"
TITLE = "The Lighthouse Keeper's Handbook"
CHAPTERS = ["Chapter 1: Lamps and Lenses", "Chapter 2: Storms and Signals"]


@dataclass(frozen=True)
class Fact:
    question: str
    answer: str  # words the cited passage holds
    chapter: str
    section: str  # empty: the chapter's opening text
    paragraph: int

    @property
    def place(self) -> str:
        shown = " › ".join(p for p in (self.chapter, self.section) if p)
        return f"{shown} · ¶{self.paragraph}"


LENS = Fact("How many panels does the Cape Wren lens have?", "eleven brass-bound panels",
            CHAPTERS[0], "1.1 Fresnel lenses", 3)
SEASON = Fact("When does storm season on the Wren coast run?", "October to March", CHAPTERS[1], "", 1)
HORN = Fact("How long does each blast of the Cape Wren fog horn last?", "blast lasts five seconds",
            CHAPTERS[1], "2.1 The fog signal", 2)
FACTS = [LENS, SEASON, HORN]

BOOK = f"""# {TITLE}

## {CHAPTERS[0]}

A lighthouse exists to be seen, and everything in this chapter serves that single purpose. The keeper
who understands the light understands the station. We begin with the optics, because a poor lens wastes
the best flame, and then turn to the fuel that feeds it through the long winter nights on the headland.

### 1.1 Fresnel lenses

Augustin Fresnel proposed his stepped lens in the early nineteenth century: rings of prisms in place of
one thick curved glass, each bending the light toward the horizon. It weighed far less than a solid lens.

Polishing the glass is a daily duty. Salt spray dulls the prisms within a week, and a soft linen cloth
with a little spirit of wine keeps them clear; abrasive powders must never touch them.

The Cape Wren lens is built from eleven brass-bound panels of flint glass arranged around the lamp. Each
panel throws a beam, so a ship sees eleven flashes as the lens turns once. The clockwork that turns it
must be wound every four hours, and a keeper who forgets the winding leaves the coast in darkness. The
panels were cast in Paris and shipped to the headland in crates of straw before the tower was finished.

### 1.2 Lamp oil

Colza oil pressed from rapeseed replaced whale oil on most stations by the middle of the century. It burns
with a steadier flame and leaves less smoke on the chimney glass, though it thickens badly in the cold.

Mineral oil came later and burns brighter still. Store it in the stone oil house, well away from the
tower, and never carry an open flame through the door. The oil house at Cape Wren holds a winter supply.

## {CHAPTERS[1]}

Storm season on the Wren coast runs from October to March, and the keeper's duties double in those months.
The gallery windows ice over, the weights of the clockwork stiffen, and ships hug the coast to escape the
open sea. This chapter covers the signals a station gives when the light alone cannot be seen.

### 2.1 The fog signal

Fog hides the brightest light, so every station keeps a signal that ships can hear. Early stations rang a
bell by hand; later ones used a reed horn driven by compressed air from an engine in the signal house.
A bell carries a mile in still air and far less in a gale, which is why the horn replaced it. The old bell
still hangs in the gallery at Cape Wren, kept for the day the engine fails.

The Cape Wren fog horn sounds twice every thirty seconds whenever the far buoy is lost from sight. The
keeper starts the engine at the first sign of fog and keeps it running until the buoy is seen again. Each
blast lasts five seconds, a pattern that mariners use to tell Cape Wren from its neighbours. The engine
burns coal, so the signal house keeps a bunker of it filled through the whole of the storm season.

### 2.2 Logbooks

Every watch ends with an entry in the station logbook: the weather, the hours the light burned, the oil
used, and any ship sighted. The inspector reads the logbook on each visit, and a careless entry is a mark
against the keeper. Write plainly, in ink, and never tear out a page.
"""


def book_bytes() -> bytes:
    return BOOK.encode()
