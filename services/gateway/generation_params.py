"""Which prompt of the library (ragmesh/prompts.py) an answer is generated with, and at
which temperature, by route and by what the asker wants:

| route / ask                          | prompt            | temperature |
|--------------------------------------|-------------------|-------------|
| SUMMARY (the summary path)           | global_summary    | 0.4         |
| DEEP (the deep-reasoner path)        | deep_reasoner     | 0.5         |
| the notes contract asked for         | citation_enforced | 0.3 (the notes assistant's chat temperature) |
| a persona given                      | rag_persona       | 0.7 (the default path's) |
| meeting notes or factsheets          | fund_research     | 1.0 (the fund-research chatbot's) |
| anything else: documents, memory     | investigator      | 0.7 (the default path) |

SPECIFIC, LOOKUP and NO_RAG follow the default path (specific hybrid search), except over the
fund-research sources, which are answered at temperature 1 on every route. A persona fills the
`{persona}` slot of whichever prompt is chosen.
"""
from __future__ import annotations

from dataclasses import dataclass

from ragmesh.prompts import CITATION_ENFORCED, DEEP_REASONER, FUND_RESEARCH, GLOBAL_SUMMARY, INVESTIGATOR, RAG_PERSONA
from services.gateway import router

FUND_COLLECTIONS = frozenset({"meeting_notes", "factsheets"})  # the fund-research sources
DEFAULT_PATH_TEMPERATURE = 0.7  # "balanced creativity"
NOTES_TEMPERATURE = 0.3  # "lower = more focused"
FUND_RESEARCH_TEMPERATURE = 1.0  # with and without web search
# The prompt for the notes contract, for the endpoint that answers in it (or set AskInput.notes_contract).
CITATION_CONTRACT_PROMPT = CITATION_ENFORCED.name


@dataclass(frozen=True)
class Generation:
    prompt: str  # a name in ragmesh.prompts.PROMPTS
    temperature: float


ROUTES = {router.SUMMARY: Generation(GLOBAL_SUMMARY.name, 0.4), router.DEEP: Generation(DEEP_REASONER.name, 0.5)}


def for_answer(route: str, collections: list[str], *, persona: bool = False,
               notes_contract: bool = False) -> Generation:
    """The prompt and temperature of one answer (the table above, first match wins)."""
    if route in ROUTES:
        return ROUTES[route]
    if notes_contract:
        return Generation(CITATION_CONTRACT_PROMPT, NOTES_TEMPERATURE)
    if persona:
        return Generation(RAG_PERSONA.name, DEFAULT_PATH_TEMPERATURE)
    if FUND_COLLECTIONS & set(collections):
        return Generation(FUND_RESEARCH.name, FUND_RESEARCH_TEMPERATURE)
    return Generation(INVESTIGATOR.name, DEFAULT_PATH_TEMPERATURE)
