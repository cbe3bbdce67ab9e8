"""An answer that cites nothing and does not admit missing information is not shown
(citation validation). While streaming, text is held back only until the first
valid citation or an admission appears; after that it flows freely. An answer that
ends without either is replaced by NOT_ENOUGH."""
from __future__ import annotations

import re

from ragmesh.prompts import NOT_ENOUGH
from ragmesh.text import citation_numbers

_ADMISSION = re.compile(
    r"(don't|do not|doesn't|does not) (have|contain) (enough|any)|not enough information|no data|"
    r"can(no|')t answer|unable to answer|nothing (in|about)|no (notes|information) (that|about)", re.I)


class AnswerGuard:
    def __init__(self, valid: set[int], enforce: bool) -> None:
        self.valid = valid
        self.enforce = enforce
        self.open = not enforce
        self._held: list[str] = []

    def feed(self, text: str) -> str:
        """What may be shown now of the text seen so far."""
        if self.open:
            return text
        self._held.append(text)
        held = "".join(self._held)
        if _ADMISSION.search(held) or any(n in self.valid for n in citation_numbers(held)):
            self.open = True
            self._held = []
            return held
        return ""

    def finish(self) -> tuple[str, bool]:
        """(text to show at the end, whether the answer was replaced)."""
        if self.open:
            return "", False
        return NOT_ENOUGH, True
