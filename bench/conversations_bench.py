"""`make bench`'s conversations part (issue 24): the labelled conversation set (tests/data/conversations.yaml)
asked turn by turn through `POST /api/chat/ask` on the whole stack as `make run` starts it (`python -m
deploy.run`: the demo corpus, the offline extractive generator), and three figures:
  stale        fresh turns (they need facts the conversation does not hold) answered with no search (target 0)
  fact recall  of the facts the fresh turns' answers must contain, the share present (target 100%)
  wasted       transform turns (they rework what was answered) that searched anyway (target <= 25%)
  small talk   turns that are not questions that searched, or whose reply lacks what it must say of the
               conversation (target 0)
  wrong-fact   answers holding a figure, name or date of another question (a turn's `not_facts`), or, for a
               turn asking what the notes do not hold (`absent`), not saying the sources lack it (target 0)
Each miss is listed with the signal the strategy event names, so a figure can be traced to a turn.
And context recall: the broad questions of tests/data/broad_questions.yaml asked of two models the same stack
serves through fakes that record their prompts (tests/fakes), the share of the facts each question needs that
reach the prompt, and how many of the complete factsheets it names come whole:
  today's budget    an OpenAI-compatible model declaring no window (OPENAI_CONTEXT_TOKENS=0), which gets the
                    offline answerer's budget: CONTEXT_CHAR_BUDGET's 4,000 characters and the route's 5, 10 or 15
                    hits, what every model got before budgets followed the model
  large window      Gemini (about a million tokens declared: CONTEXT_MAX_CHARS' 200,000 characters, 100 hits)
The quality steps are off for them (the fakes answer every prompt alike), so the figure is the context's alone.
The figures are about what is searched and answered, not how fast: the stack gets a retrieval deadline
long enough for a loaded machine (RETRIEVAL_TIMEOUT_S), so a late search never stands in for a decision.
The integration test (tests/integration/test_conversations_labelled.py) plays the same set on the test stack.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.load_bench import Stack
from bench.search_bench import Section, Target

LABELLED_SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "conversations.yaml"
BROAD_SET = LABELLED_SET.with_name("broad_questions.yaml")
TODAYS_BUDGET_MODEL, LARGE_WINDOW_MODEL = "openai", "gemini-2.5-flash"
FAKE_ANSWER = "From the notes [1]."
# The stack's settings for the two recorded models: one declares no window, the other's steps are off.
RECORDED_MODELS = {"OPENAI_MODEL": "served-model", "OPENAI_CONTEXT_TOKENS": "0", "GEMINI_API_KEY": "bench-key",
                   "DEFAULT_MODEL": "extractive", "QUALITY_REWRITE": "false", "QUALITY_RERANK": "false",
                   "QUALITY_COMPRESS": "false", "QUALITY_HISTORY": "false"}
FRESH, TRANSFORM, SMALL_TALK = "fresh", "transform", "small_talk"
LABELS = (FRESH, TRANSFORM, SMALL_TALK)
STALE_TARGET, RECALL_TARGET, WASTED_TARGET, WRONG_TARGET = 0, 1.0, 0.25, 0
# An answer that says the sources lack what was asked: the offline answerer's words, the gateway's no-match and
# not-enough answers, and a model's usual phrasings.
NOT_THERE = re.compile(
    r"\b(?:do|does|did)\s+not\s+(?:say|state|mention|contain|give|include|specify)\b|\bdon't\s+have\b"
    r"|\bnot\s+enough\s+information\b|\bno\s+(?:data|information|notes)\b|\bnot\s+(?:stated|mentioned|given|specified)\b",
    re.I)
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
    absent: str  # what the question asks that the notes do not hold ("" when they hold it)
    not_facts: list[str]
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

    @property
    def wrong_facts(self) -> list[str]:
        """The figures, names or dates of another question the answer holds."""
        return [f for f in self.not_facts if f in self.answer]

    @property
    def wrong(self) -> bool:
        """Gives another question's fact, or does not say the notes lack what they lack."""
        return bool(self.wrong_facts) or bool(self.absent and not NOT_THERE.search(self.answer))

    def describe(self) -> str:
        return (f"{self.conversation!r} turn {self.turn} ({self.label}) {self.ask!r}: {self.route}/{self.retrieval}, "
                f"follow-up signal {self.signal or '-'}" + (f", missing {self.missing}" if self.missing else "")
                + (f", holds {self.wrong_facts}" if self.wrong_facts else "")
                + (f", does not say the notes lack {self.absent}" if self.wrong and not self.wrong_facts else "")
                + (f" [needs {self.needs}]" if self.needs else ""))


@dataclass
class Score:
    played: list[Played]
    stale: list[Played] = field(init=False)
    wasted: list[Played] = field(init=False)
    missing: list[Played] = field(init=False)
    small_talk: list[Played] = field(init=False)  # small talk missed (searched, or facts missing)
    wrong: list[Played] = field(init=False)

    def __post_init__(self) -> None:
        self.stale = [p for p in self.played if p.stale]
        self.wasted = [p for p in self.played if p.wasted]
        self.missing = [p for p in self.played if p.label == FRESH and p.missing]
        self.small_talk = [p for p in self.played if p.small_talk_missed]
        self.wrong = [p for p in self.played if p.wrong]

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
                                 turn.get("needs", ""), turn.get("absent", ""), turn.get("not_facts", []),
                                 strategy["route"], strategy["retrieval"],
                                 (strategy.get("followup") or {}).get("signal", ""), reply["answer"]))
    return Score(played)


def http_asker(base_url: str, headers: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    client = httpx.Client(base_url=base_url, headers=headers, timeout=120)

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        reply = client.post("/api/chat/ask", json=body)
        reply.raise_for_status()
        return reply.json()

    return ask


@dataclass
class Reached:
    """One broad question as a model received it: the facts and complete factsheets it needs, and its prompt."""

    ask: str
    model: str
    facts: list[str]
    factsheets: list[str]
    prompt: str

    @property
    def missing(self) -> list[str]:
        """The facts the prompt lacks (a fact "a|b" is there when either is)."""
        return [f for f in self.facts if not any(alt in self.prompt for alt in f.split("|"))]

    @property
    def records_missing(self) -> list[str]:
        """The factsheets whose complete record the prompt lacks."""
        return [f for f in self.factsheets if f'"factsheet_id":"{f}"' not in self.prompt]


def context_recall(reached: list[Reached]) -> float:
    """Of the facts the questions need, the share that reached the prompts."""
    facts = sum(len(r.facts) for r in reached)
    return 1 - sum(len(r.missing) for r in reached) / facts if facts else 1.0


def broad_questions(path: Path = BROAD_SET) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["questions"]


class RecordedModels:
    """The fake OpenAI-compatible server and fake Gemini API, answering every prompt alike and keeping them."""

    def __init__(self) -> None:
        from tests.fakes.gemini import FakeGemini  # pytest plugins: imported when used, after pytest registers them
        from tests.fakes.openai import FakeOpenAI

        self.openai, self.gemini = FakeOpenAI(), FakeGemini()

    def __enter__(self) -> "RecordedModels":
        for fake in (self.openai, self.gemini):
            fake.respond("", FAKE_ANSWER)
            fake.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for fake in (self.openai, self.gemini):
            fake.server.stop()

    def prompts(self, model: str) -> list[str]:
        """The prompts `model` received, in order (system instruction and user prompt as one text)."""
        if model == LARGE_WINDOW_MODEL:
            return ["".join(p.get("text", "") for c in r.body["contents"] for p in c["parts"])
                    for r in self.gemini.requests("streamGenerateContent")]
        return ["\n".join(str(m.get("content", "")) for m in r.body["messages"]) for r in self.openai.requests()]


def reach(ask: Callable[[dict[str, Any]], dict[str, Any]], model: str, questions: list[dict[str, Any]],
          prompts: Callable[[str], list[str]]) -> list[Reached]:
    """Asks each question of `model` in a conversation of its own; its prompt is the last `model` received."""
    reached = []
    for question in questions:
        ask({"question": question["ask"], "model": model, **question.get("request", {})})
        prompt = next(p for p in reversed(prompts(model)) if f"Question: {question['ask']}" in p)
        reached.append(Reached(question["ask"], model, question["facts"], question.get("factsheets", []), prompt))
    return reached


def run_conversations(quick: bool = False) -> Section:
    """The figures on the whole stack (`quick` changes nothing: the set is small)."""
    with RecordedModels() as models, Stack(EXTRACTIVE_DELAY_MS="0", RETRIEVAL_TIMEOUT_S=RETRIEVAL_TIMEOUT_S,
                                           OPENAI_BASE_URL=models.openai.url, GEMINI_BASE_URL=models.gemini.url,
                                           **RECORDED_MODELS) as stack:
        asker = http_asker(stack.http_url, {"Authorization": f"Bearer {stack.key}"})
        score = play(asker, labelled_set())
        recalled = {m: reach(asker, m, broad_questions(), models.prompts)
                    for m in (TODAYS_BUDGET_MODEL, LARGE_WINDOW_MODEL)}
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
    checked = [p for p in score.played if p.absent or p.not_facts]
    section.add("wrong-fact answers (another question's figure, or not saying the notes lack it)", len(score.wrong),
                "", Target("<=", WRONG_TARGET),
                f"of {len(checked)} turns checked, {sum(bool(p.absent) for p in checked)} asking what the notes do not hold")
    own = [p for p in score.fresh if not p.needs]
    section.add("fact recall on fresh turns needing no other part of issue 24", Score(own).recall, "",
                note=f"{len(own)} turns; the others name what they need (`needs` in the set)")
    section.add("fresh turns answered from an earlier search's hits (RAG_REUSE)",
                sum(p.retrieval == "RAG_REUSE" for p in score.fresh), note="searched, not from the conversation")
    for model, reached in recalled.items():
        records = sum(len(r.factsheets) for r in reached)
        sizes = sorted(len(r.prompt) for r in reached)
        kind = "today's budget, the offline answerer's" if model == TODAYS_BUDGET_MODEL else "large window"
        section.add(f"context recall on broad questions, {kind} ({model})", context_recall(reached), "",
                    note=f"{len(reached)} questions, {sum(len(r.missing) for r in reached)} facts missing; complete "
                         f"factsheets {records - sum(len(r.records_missing) for r in reached)} of {records}; "
                         f"prompts {sizes[0]:,}-{sizes[-1]:,} chars")
        section.notes += [f"context missing ({model}): {r.ask!r}: {r.missing + r.records_missing}"
                          for r in reached if r.missing or r.records_missing]
    section.notes += [f"stale: {p.describe()}" for p in score.stale]
    section.notes += [f"missing facts: {p.describe()}" for p in score.missing]
    section.notes += [f"wasted search: {p.describe()}" for p in score.wasted]
    section.notes += [f"small talk: {p.describe()}" for p in score.small_talk]
    section.notes += [f"wrong fact: {p.describe()}" for p in score.wrong]
    return section
