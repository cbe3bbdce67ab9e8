"""The scope of a search, declared once: every filter that limits what a search finds (and how its hits
rank), whether the request set it or the question named it. The search filter is made from it, and the
scope cache's key from all of its fields, so a filter added to `Scope` is in the key: hits found under
one scope are reused only under an equal one.

What the question names narrows what the request set, never replaces it (`Scope.narrowed`):
- funds it names narrow the selected funds to those among them (with none selected, they are the filter);
  named funds none of which is selected leave the selected funds as they are;
- a period it names intersects the request's dates; a period outside them leaves the request's dates;
- a window it names ("in the last 24 hours") applies when the request sets none: the request's ("all",
  any date, included) is the window;
- documents, data sources and every other filter the request set stay as they are."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ragmesh.types import SearchFilter
from services.gateway.request import AskInput


@dataclass(frozen=True)
class Scope:
    """What a search is limited to. Each field is one the request sets (`ASKED`) or one read from the
    question (`READ_FROM_QUESTION`)."""

    collections: tuple[str, ...] = ()  # searched (the request's data sources), sorted
    start_date: str = ""
    end_date: str = ""
    funds: tuple[str, ...] = ()  # sorted
    window: str = ""  # 24h | 48h | 1w | all, or none
    documents: tuple[str, ...] = ()  # the picked documents, sorted
    linear: bool = False  # ranked by the notes contract's linear fusion
    latest: bool = False  # the question asks for the latest: ranked by the time decay

    @classmethod
    def asked(cls, ask: AskInput) -> Scope:
        """The scope the request sets (nothing read from its question yet)."""
        return cls(collections=tuple(sorted(ask.collections)), start_date=ask.start_date, end_date=ask.end_date,
                   funds=tuple(sorted(ask.selected_funds)), window=ask.context_window,
                   documents=tuple(sorted(ask.document_ids)), linear=ask.notes_contract)

    @property
    def key(self) -> str:
        """Every field not at its default, by name: equal scopes alone have equal keys, whatever field
        is added."""
        return json.dumps({f.name: value for f in dataclasses.fields(self)
                           if (value := getattr(self, f.name)) != f.default}, separators=(",", ":"))

    def search_filter(self, tenant: str) -> SearchFilter:
        """The filter each collection's search runs under (the picked documents are applied per collection)."""
        return SearchFilter(tenant=tenant, start_date=self.start_date, end_date=self.end_date,
                            any_of={"fund_name": list(self.funds)} if self.funds else {})

    def narrowed(self, start_date: str = "", end_date: str = "", funds: list[str] | None = None, window: str = "",
                 latest: bool = False) -> Scope:
        """This scope with what the question names merged in (the module's rules); each left out: not named."""
        merged = dataclasses.replace(self, latest=self.latest or latest)
        start, end = max(self.start_date, start_date), min(self.end_date or end_date, end_date or self.end_date)
        if (start_date or end_date) and not (start and end and start > end):
            merged = dataclasses.replace(merged, start_date=start, end_date=end)
        if named := [f for f in funds or [] if not self.funds or f in self.funds]:
            merged = dataclasses.replace(merged, funds=tuple(sorted(named)))
        if window and not self.window:
            merged = dataclasses.replace(merged, window=window)
        return merged


# The Ask's fields (AskRequest's names) that set the scope, each the Scope field it sets ...
ASKED = {"data_sources": "collections", "start_date": "start_date", "end_date": "end_date",
         "selected_funds": "funds", "context_window": "window", "document_ids": "documents", "format": "linear"}
# ... the Scope fields read from the question alone ...
READ_FROM_QUESTION = frozenset({"latest"})
# ... and those that do not, each with why hits found under another value of it answer as well.
NOT_SCOPING = {
    "question": "what is searched for, not where: the topic check decides whether the cached hits answer it",
    "conversation_id": "scopes are kept per conversation: it is where one is looked up",
    "conversation_history": "what was said, not where to search: routing reads it",
    "tenant": "scopes are kept per tenant, and a reused scope's sources are checked again as the asker",
    "user_id": "a conversation is its user's, and a reused scope's sources are checked again as the asker",
    "model": "which model answers from the hits, not which chunks may be found",
    "top_k": "how many of the hits the context takes, not which chunks may be found",
    "persona": "how the answer is worded",
}
