"""`make bench`'s conversations part (issue 24): the labelled conversation set (tests/data/conversations.yaml)
asked turn by turn through `POST /api/chat/ask` on the whole stack as `make run` starts it (`python -m
deploy.run`: the demo corpus, the offline extractive generator), and three figures:
  stale        fresh turns (they need facts the conversation does not hold) answered with no search (target 0)
  fact recall  of the facts the fresh turns' answers must contain, the share present (target 100%)
  wasted       transform turns (they rework what was answered) that searched anyway (target <= 25%)
  small talk   turns that are not questions that searched, or whose reply lacks what it must say of the
               conversation (target 0)
Each miss is listed with the signal the strategy event names, so a figure can be traced to a turn.
The figures are about what is searched and answered, not how fast: the stack gets a retrieval deadline
long enough for a loaded machine (RETRIEVAL_TIMEOUT_S), so a late search never stands in for a decision.
The integration test (tests/integration/test_conversations_labelled.py) plays the same set on the test stack.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.load_bench import Stack
from bench.search_bench import Section, Target

LABELLED_SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "conversations.yaml"
FRESH, TRANSFORM, SMALL_TALK = "fresh", "transform", "small_talk"
LABELS = (FRESH, TRANSFORM, SMALL_TALK)
STALE_TARGET, RECALL_TARGET, WASTED_TARGET = 0, 1.0, 0.25
RETRIEVAL_TIMEOUT_S = "30"


@dataclass
class Played:
    """One turn of the set as asked, with what the gateway did."""

    conversation: str
    turn: int  # 1-based
    ask: str
    label: str
    facts: list[str]
    needs: str
    route: str
    retrieval: str
    signal: str  # the follow-up signal the strategy event names
    answer: str

    @property
    def searched(self) -> bool:
        return self.retrieval != "NO_RAG"

    @property
    def stale(self) -> bool:
        return self.label == FRESH and not self.searched

    @property
    def wasted(self) -> bool:
        return self.label == TRANSFORM and self.searched

    @property
    def small_talk_missed(self) -> bool:
        """Small talk that searched (not answered directly) or whose reply lacks its facts."""
        return self.label == SMALL_TALK and (self.route != "DIRECT" or bool(self.missing))

    @property
    def missing(self) -> list[str]:
        """The facts the answer lacks (a fact "a|b" is present when either is)."""
        return [f for f in self.facts if not any(alt in self.answer for alt in f.split("|"))]

    def describe(self) -> str:
        return (f"{self.conversation!r} turn {self.turn} ({self.label}) {self.ask!r}: {self.route}/{self.retrieval}, "
                f"follow-up signal {self.signal or '-'}" + (f", missing {self.missing}" if self.missing else "")
                + (f" [needs {self.needs}]" if self.needs else ""))


@dataclass
class Score:
    played: list[Played]
    stale: list[Played] = field(init=False)
    wasted: list[Played] = field(init=False)
    missing: list[Played] = field(init=False)
    small_talk: list[Played] = field(init=False)  # small talk missed (searched, or facts missing)

    def __post_init__(self) -> None:
        self.stale = [p for p in self.played if p.stale]
        self.wasted = [p for p in self.played if p.wasted]
        self.missing = [p for p in self.played if p.label == FRESH and p.missing]
        self.small_talk = [p for p in self.played if p.small_talk_missed]

    @property
    def fresh(self) -> list[Played]:
        return [p for p in self.played if p.label == FRESH]

    @property
    def transforms(self) -> list[Played]:
        return [p for p in self.played if p.label == TRANSFORM]

    @property
    def recall(self) -> float:
        facts = sum(len(p.facts) for p in self.fresh)
        return 1 - sum(len(p.missing) for p in self.fresh) / facts if facts else 1.0

    @property
    def wasted_share(self) -> float:
        return len(self.wasted) / len(self.transforms) if self.transforms else 0.0


def labelled_set(path: Path = LABELLED_SET) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["conversations"]


def play(ask: Callable[[dict[str, Any]], dict[str, Any]], conversations: list[dict[str, Any]]) -> Score:
    """Asks every turn in order; `ask` posts one request body to /api/chat/ask and returns its JSON."""
    played = []
    for conv in conversations:
        conversation_id = ""
        for i, turn in enumerate(conv["turns"], start=1):
            body = {"question": turn["ask"], **turn.get("request", {})}
            if conversation_id:
                body["conversation_id"] = conversation_id
            reply = ask(body)
            conversation_id = reply["conversation_id"]
            strategy = reply["meta"]["strategy"]
            played.append(Played(conv["name"], i, turn["ask"], turn["label"], turn.get("facts", []),
                                 turn.get("needs", ""), strategy["route"], strategy["retrieval"],
                                 (strategy.get("followup") or {}).get("signal", ""), reply["answer"]))
    return Score(played)


def http_asker(base_url: str, headers: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    client = httpx.Client(base_url=base_url, headers=headers, timeout=120)

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        reply = client.post("/api/chat/ask", json=body)
        reply.raise_for_status()
        return reply.json()

    return ask


def run_conversations(quick: bool = False) -> Section:
    """The figures on the whole stack (`quick` changes nothing: the set is small)."""
    with Stack(EXTRACTIVE_DELAY_MS="0", RETRIEVAL_TIMEOUT_S=RETRIEVAL_TIMEOUT_S) as stack:
        score = play(http_asker(stack.http_url, {"Authorization": f"Bearer {stack.key}"}), labelled_set())
    section = Section(f"conversations: {len(score.played)} turns in {len(labelled_set())} labelled conversations "
                      f"({len(score.fresh)} fresh, {len(score.transforms)} transform)")
    section.add("stale answers (fresh turns answered without a search)", len(score.stale), "",
                Target("<=", STALE_TARGET))
    section.add("fact recall on fresh turns", score.recall, "", Target(">=", RECALL_TARGET),
                f"{sum(len(p.missing) for p in score.fresh)} facts missing in {len(score.missing)} turns")
    section.add("wasted searches on transform turns", score.wasted_share, "", Target("<=", WASTED_TARGET),
                f"{len(score.wasted)} of {len(score.transforms)}")
    section.add("small talk searched or missing its facts", len(score.small_talk), "", Target("<=", 0),
                f"of {sum(p.label == SMALL_TALK for p in score.played)} small-talk turns")
    own = [p for p in score.fresh if not p.needs]
    section.add("fact recall on fresh turns needing no other part of issue 24", Score(own).recall, "",
                note=f"{len(own)} turns; the others name what they need (`needs` in the set)")
    section.add("fresh turns answered from an earlier search's hits (RAG_REUSE)",
                sum(p.retrieval == "RAG_REUSE" for p in score.fresh), note="searched, not from the conversation")
    section.notes += [f"stale: {p.describe()}" for p in score.stale]
    section.notes += [f"missing facts: {p.describe()}" for p in score.missing]
    section.notes += [f"wasted search: {p.describe()}" for p in score.wasted]
    section.notes += [f"small talk: {p.describe()}" for p in score.small_talk]
    return section
