"""The question, read once: one typed `Reading` of its text (the period, window and funds it names, the
people, the kind of fact asked, what it refers back to, whether it is small talk), made once per ask and
handed to routing, the scope key and the planner; `Reading.following` adds what it inherits from the
conversation. Every rule that reads a question's words lives in services/gateway/query_analysis.py,
services/gateway/referents.py and ragmesh/question_kinds.py; this module calls each once.

What a follow-up inherits from the conversation (the conversation's subject: the funds, period, person
and question of its turns, folded oldest first, each turn's own inheritance included):
- funds: a question that names no fund keeps the conversation's; one that names funds replaces them
  ("And Meridian?"); "the other fund" is the fund the conversation spoke of before the current one; a
  question across funds ("which funds", "every fund") inherits none;
- the person asked about: a question that refers to someone ("she", "him", "her") is searched with the
  conversation's person (named in a question, or the answer to a "who" question); naming one replaces it;
- the period: only an elliptical follow-up (nothing of its own but a period, a fund, a person or "the
  other fund": "How about July 2024?") keeps the conversation's period, and it asks the conversation's
  question again with what it names in place of what that question named ("How much did Northwind lose
  in July 2024?"); a question with words of its own asks across dates unless it names a period;
- documents and data sources: never inherited: the request states them on every ask (the page sends its
  pickers' state each time), and what the user un-picks is not searched again.
What is inherited narrows the request's filters like what the question names (services/gateway/scope.py),
never replacing them; the strategy event's `carried` says what was inherited and what was replaced."""
from __future__ import annotations

import calendar
import dataclasses
import datetime as dt
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragmesh.question_kinds import PERSON, asked
from ragmesh.text import STOPWORDS, strip_citations
from ragmesh.types import Turn
from services.gateway import query_analysis, referents
from services.gateway.question_lookup import asks_all_questions

# An elliptical follow-up says nothing of its own besides what it names: these words do not count.
_FILLER = frozenset("""how what about and or then so also too again instead same one ones please now
    with that this those these other fund funds the a an for in of at on during over s""".split()) | STOPWORDS
_OTHER_FUND = re.compile(r"\bthe other (?:fund|one|manager)\b", re.I)
_ACROSS_FUNDS = re.compile(r"\b(?:which|what|any|all|every|each|other|both)\s+(?:of\s+the\s+)?funds?\b|\bfunds\b",
                           re.I)
_PRONOUN = re.compile(r"\b(he|she|him|her|his|hers)\b", re.I)
_PERSON = re.compile(r"(?:\bDr\.?\s+)?\b[A-Z][a-zà-ÿ'-]+(?:\s+[A-Z][a-zà-ÿ'-]+)+")
_NOT_PEOPLE = frozenset("""who what when where why how which whose is was did does the and met telecom bio
    systems therapeutics components parks holdings bank capital partners group inc ltd corp aerospace payments
    insurance logistics home optics finance power ports semiconductor metabolic orthopedics bancorp retail
    auto industrial fund global macro equity credit markets emerging quant systematic healthcare innovation
    chapter phase new york london""".split())
_MONTHS = [name for name in calendar.month_name if name and name != "May"]  # "may" is a verb too
_BARE_MONTH = re.compile(rf"\b(?:in |during |for )?({'|'.join(_MONTHS)})\b(?!\.? ?\d)", re.I)
_LEADING = re.compile(r"^(?:in|during|for)\s+", re.I)
_NAME_GROUP = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z]+(?:[\s/]+[A-Z][A-Za-z]+)*")  # one name's words
_WORD = re.compile(r"[A-Za-zà-ÿ0-9&]+")
_THANKS = r"thanks|thank you|thx|cheers|ta"
_ABOUT_ASSISTANT = re.compile(r"\b(what('s| is) your name|who are you|what are you called)\b", re.I)
_SMALL_TALK = {  # small-talk phrases by what the reply does with them
    "thanks": re.compile(rf"^(?:{_THANKS})(?: (?:a lot|so much|again|very much|you))?$"),
    "bye": re.compile(r"^(?:bye|goodbye|good bye|see you|that's all|that is all)$"),
    "else": re.compile(r"^(?:what else|anything else|what else (?:is there|do you have|can you tell me|"
                       r"do the notes (?:hold|have|say))|what more|and what else)$"),
    "ack": re.compile(r"^(?:ok|okay|great|cool|nice|perfect|awesome|got it|understood|i see|makes sense|"
                      r"that helps|that's helpful|that is helpful|that's great|good|fine|alright|all right|noted|"
                      r"wonderful|excellent)$"),
    "hello": re.compile(r"^(?:hi|hello|hey|(?:hi|hello|hey) there|good (?:morning|afternoon|evening))$"),
}


@dataclass(frozen=True)
class Carried:
    """What a follow-up took from the conversation because it named none of its own, and what it named in
    place of the conversation's (the strategy event's `carried`)."""

    __pydantic_config__ = {"use_attribute_docstrings": True, "json_schema_serialization_defaults_required": True}

    funds: tuple[str, ...] = ()
    """Funds of the conversation the question names none of, kept as the fund filter"""
    period: str = ""
    """The conversation's period (its words), kept by an elliptical follow-up"""
    start_date: str = ""
    """The carried period's first day"""
    end_date: str = ""
    """The carried period's last day"""
    people: tuple[str, ...] = ()
    """The person the question refers to ('she', 'him'), searched with it"""
    question: str = ""
    """The conversation's question an elliptical follow-up asks again"""
    replaced: tuple[str, ...] = ()
    """What the question named in place of the conversation's, e.g. 'fund: Northwind Global Macro Fund ->
    Meridian Quant Systematic'"""

    def describe(self) -> str:
        """What the strategy's reason says of it ("" when nothing was carried or replaced)."""
        kept = [f"{name} {', '.join(v) if isinstance(v, tuple) else repr(v)}" for name, v in
                (("funds", self.funds), ("period", self.period), ("person", self.people)) if v]
        said = [f"carried from the conversation: {'; '.join(kept)}"] if kept else []
        said += [f"asks again {self.question!r}"] if self.question else []
        said += [f"replaced {'; '.join(self.replaced)}"] if self.replaced else []
        return ", ".join(said)


@dataclass(frozen=True)
class Subject:
    """What the conversation is about so far: a follow-up inherits it (the module's rule)."""

    funds: tuple[str, ...] = ()
    fund_words: tuple[str, ...] = ()  # the words naming them in `question`
    period: query_analysis.DateRange | None = None
    people: tuple[str, ...] = ()
    question: str = ""  # its latest question with words of its own, as read (what it inherited included)
    funds_seen: tuple[str, ...] = ()  # every fund spoken of, the latest first


@dataclass(frozen=True)
class Reading:
    """One question as read: what it names, asks and refers back to, and what it inherits."""

    question: str
    period: query_analysis.DateRange | None = None  # a period it names: the date filter
    window: query_analysis.TimeWindow | None = None  # "in the last 24 hours": the window filter
    reported: query_analysis.DateRange | None = None  # a whole year's result asked ("2025 full-year")
    recency: str = ""  # words asking for the latest
    funds: tuple[str, ...] = ()  # known funds it names
    fund_words: tuple[str, ...] = ()  # the words naming them, as written
    people: tuple[str, ...] = ()  # people it names
    kinds: frozenset[str] = frozenset()  # the kinds of fact asked (ragmesh.question_kinds)
    referent: str = ""  # the words by which it refers back ("that", "her"), or ""
    content: tuple[tuple[str, str], ...] = ()  # its content words: (stem, as written)
    numbers: tuple[str, ...] = ()  # question numbers ("question 6")
    all_questions: bool = False  # every numbered item asked for
    general: bool = False  # a broad question
    reasoning: str = ""  # the words asking for reasoning ("why", "compare"): the DEEP route
    summary: str = ""  # the words asking for a summary: the SUMMARY route with one document picked
    small_talk: str = ""  # thanks | bye | name | else | ack | hello: not a question (answered without a search)
    other_fund: bool = False  # "the other fund"
    across_funds: bool = False  # asks across funds ("which funds"): inherits none
    pronoun: bool = False  # refers to a person ("she", "him")
    terse: bool = False  # one name at most, and no words of its own besides it, a period, pronouns, connectives
    elliptical: bool = False  # terse, and names a fund, period, person or "the other fund" ("How about July 2024?")
    carried: Carried = field(default_factory=Carried)
    standalone: str = ""  # the question with what it inherits, as searched and answered ("": the question)
    names: tuple[str, ...] = ()  # capitalised words not opening a sentence (names, as written)
    before: Subject = field(default_factory=Subject)  # the conversation's subject it inherited from

    @property
    def text(self) -> str:
        """What is searched for and answered: the question with what it inherits."""
        return self.standalone or self.question

    @property
    def scope_funds(self) -> tuple[str, ...]:
        """The funds it searches: named, or inherited."""
        return self.funds or self.carried.funds

    @property
    def scope_period(self) -> query_analysis.DateRange | None:
        """The period it searches: named, or inherited by an elliptical follow-up."""
        if self.period:
            return self.period
        if self.carried.period:
            return query_analysis.DateRange(self.carried.start_date, self.carried.end_date, self.carried.period)
        return None

    @property
    def refers_back(self) -> bool:
        return bool(self.referent)

    @property
    def words(self) -> dict[str, str]:
        """Its content words, stem -> as written."""
        return dict(self.content)

    def naming(self, known: Sequence[str]) -> Reading:
        """This reading with the funds (`known`: those the asker's documents hold) and people it names."""
        funds = tuple(query_analysis.mentioned_funds(self.question, list(known)))
        people = tuple(_people(self.question, funds))
        words = tuple(w for f in funds for w in _fund_words(self.question, f))
        named = bool(funds or self.period or self.window or people or self.other_fund)
        own = _own_words(self.question, [*(p.phrase for p in (self.period, self.window) if p), *words, *people])
        return dataclasses.replace(self, funds=funds, fund_words=words, people=people,
                                   elliptical=self.terse and named and not own and not self.small_talk)

    def following(self, turns: Sequence[Turn], known: Sequence[str], today: dt.date) -> Reading:
        """This reading with what it inherits from `turns` (the conversation so far, oldest first)."""
        subject = Subject()
        for turn in turns:
            subject = _earlier(turn.question, tuple(known), today)._inherit(subject).subject_after(turn.answer, known)
        return self._inherit(subject)

    def _inherit(self, subject: Subject) -> Reading:
        """The module's rule, applied to `subject`."""
        replaced, funds = [], self.funds
        own_period = self.period if not self.period or self.period.start else _in_year(self.period, subject.period)
        if self.other_fund and not funds and (other := next((f for f in subject.funds_seen
                                                             if f not in subject.funds), None)):
            funds = (other,)
        carried_funds = () if funds or self.across_funds else subject.funds
        if funds and subject.funds and set(funds) != set(subject.funds):
            replaced.append(f"fund: {', '.join(subject.funds)} -> {', '.join(funds)}")
        people = subject.people if self.pronoun and not self.people else ()
        if self.people and subject.people and set(self.people) != set(subject.people):
            replaced.append(f"person: {', '.join(subject.people)} -> {', '.join(self.people)}")
        period, question, standalone = None, "", ""
        if self.elliptical and subject.question:
            question = subject.question
            # a month whose year is not known is asked in words, with no date filter
            standalone = _asked_again(subject, own_period or self.period, self.people, funds)
            if not own_period and not self.window:
                period = subject.period
            elif subject.period and own_period and _bare(own_period.phrase) != _bare(subject.period.phrase):
                replaced.append(f"period: {_bare(subject.period.phrase)} -> {_bare(own_period.phrase)}")
        elif people:
            standalone = _PRONOUN.sub(lambda m: _named(m.group(1), people[0]), self.question)
        carried = Carried(carried_funds, _bare(period.phrase) if period else "", period.start if period else "",
                          period.end if period else "", people, question, tuple(replaced))
        return dataclasses.replace(self, period=own_period, funds=funds, carried=carried, standalone=standalone,
                                   before=subject)

    def subject_after(self, answer: str, known: Sequence[str]) -> Subject:
        """The conversation's subject once this question was asked and `answer` given (this reading
        inherited from the subject before it); `known`: the funds an answer may speak of."""
        prior = self.before
        if self.small_talk:  # not a question: the subject stays
            return prior
        text = self.text
        own = bool(self.content) or self.elliptical
        funds = self.scope_funds if not self.across_funds else ()
        if not funds and not self.across_funds:  # the one fund its answer speaks of, else the conversation's
            answered = query_analysis.mentioned_funds(answer, list(known))
            funds = tuple(answered) if len(answered) == 1 else prior.funds
        people = self.people or self.carried.people or prior.people
        if PERSON in self.kinds and (named := _answered_person(strip_citations(answer), funds, self.words)):
            people = (named,)
        period = self.scope_period if own else prior.period
        words = tuple(w for f in funds for w in _fund_words(text, f)) if own else prior.fund_words
        seen = tuple(dict.fromkeys((*funds, *prior.funds_seen)))
        return Subject(funds, words, period, people, text if own else prior.question, seen)


def read(question: str, today: dt.date) -> Reading:
    """The question's reading: every rule that reads its words, applied once; the funds and people it
    names are added by `Reading.naming` (the known funds are looked up while the question is planned)."""
    period = query_analysis.time_hint(question, today)
    window = query_analysis.time_window(question)
    if period is None and window is None and (month := _BARE_MONTH.search(question)):
        period = query_analysis.DateRange("", "", month.group(0))  # its year: the conversation's (following)
    names = tuple(referents.names(question))
    other = bool(_OTHER_FUND.search(question))
    return Reading(
        question=question, period=period, window=window, reported=query_analysis.reported_period(question),
        recency=query_analysis.recency_phrase(question), kinds=frozenset(asked(question)),
        referent=referents.referent(question), content=tuple(referents.content_words(question).items()),
        numbers=tuple(query_analysis.question_numbers(question)), all_questions=asks_all_questions(question),
        general=query_analysis.is_general(question), reasoning=query_analysis.reasoning_keyword(question),
        summary=query_analysis.summary_keyword(question), small_talk=small_talk(question), other_fund=other,
        across_funds=bool(_ACROSS_FUNDS.search(question)) and not other, pronoun=bool(_PRONOUN.search(question)),
        names=names, terse=_terse(question, [p.phrase for p in (period, window) if p], names),
    )


def small_talk(question: str) -> str:
    """What a turn that is not a question is ("thanks", "ok, thanks, what else?", "who are you?"): the kind
    the reply answers (bye, else, name, thanks, ack, hello), or "" when some phrase asks something."""
    if _ABOUT_ASSISTANT.search(question):
        return "name"
    phrases = [p.strip() for p in re.split(r"[,.!?;:]+|\s+-\s+|\band\b(?= (?:thanks|thank|bye|what else))",
                                           question.lower().replace("’", "'")) if p.strip()]
    kinds = [next((k for k, pattern in _SMALL_TALK.items() if pattern.match(p)), "") for p in phrases]
    if not kinds or not all(kinds):
        return ""
    return next(k for k in ("bye", "else", "name", "thanks", "ack", "hello") if k in kinds)


@functools.lru_cache(maxsize=1024)
def _earlier(question: str, known: tuple[str, ...], today: dt.date) -> Reading:
    """An earlier turn's question, read once per process (each ask folds the conversation's turns)."""
    return read(question, today).naming(known)


def _terse(question: str, periods: Sequence[str], names: Sequence[str]) -> bool:
    """One name at most besides its periods, and no words of its own besides them, pronouns and connectives."""
    text = question
    for phrase in periods:
        text = re.sub(rf"\b{re.escape(phrase)}\b", " ", text)
    return len(_NAME_GROUP.findall(text)) <= 1 and not _own_words(text, names)


def _own_words(question: str, named: Sequence[str]) -> list[str]:
    """The question's words besides what it names (names, periods, pronouns) and the words that only connect."""
    text = question
    for words in named:
        text = re.sub(rf"\b{re.escape(words)}\b", " ", text)
    text = _PRONOUN.sub(" ", text)
    return [w for w in _WORD.findall(text.lower()) if w not in _FILLER and w.rstrip("s") not in _FILLER]


def _fund_words(text: str, fund: str) -> list[str]:
    """The words of `text` that name `fund`: its full name, or its first word."""
    for candidate in (fund, re.split(r"[\s/]+", fund)[0]):
        if m := re.search(rf"\b{re.escape(candidate)}\b", text, re.I):
            return [m.group(0)]
    return []


def _people(text: str, funds: Sequence[str]) -> list[str]:
    """Names of people in `text` (two or more capitalised words that are no fund's or company's)."""
    fund_text = " ".join(funds).lower()
    found = []
    for m in _PERSON.finditer(text):
        name = re.sub(r"^Dr\.?\s+", "", m.group(0))
        parts = name.lower().split()
        if any(p in _NOT_PEOPLE for p in parts) or any(p in fund_text for p in parts):
            continue
        found.append(name)
    return list(dict.fromkeys(found))


def _answered_person(answer: str, funds: Sequence[str], asked_about: dict[str, str]) -> str:
    """The person an answer to a "who" question names: of the people it names, the one nearest the words the
    question asked about ("head of research, Leah Abrams"); "" when it names none."""
    people = _people(answer, funds)
    if len(people) < 2:
        return people[0] if people else ""
    text = answer.lower()
    near = [m.start() for stem in asked_about for m in re.finditer(rf"\b{re.escape(stem)}", text)]

    def distance(person: str) -> int:
        at = text.find(person.lower())
        return min((abs(at - n) for n in near), default=at)

    return min(people, key=distance)


def _named(pronoun: str, person: str) -> str:
    return f"{person}'s" if pronoun.lower() in ("his", "hers") else person


def _asked_again(subject: Subject, period: query_analysis.DateRange | None, people: Sequence[str],
                 funds: Sequence[str]) -> str:
    """The conversation's question with what the elliptical follow-up names in place of what it named."""
    text = subject.question
    if funds and set(funds) != set(subject.funds):
        new = " and ".join(funds)
        if subject.fund_words:
            for word in subject.fund_words:
                text = re.sub(rf"\b{re.escape(word)}\b", new, text)
        else:
            text = f"{text.rstrip(' ?')} for {new}?"
    if period:
        if subject.period and re.search(re.escape(_bare(subject.period.phrase)), text, re.I):
            text = re.sub(re.escape(_bare(subject.period.phrase)), _bare(period.phrase), text, flags=re.I)
        else:
            text = f"{text.rstrip(' ?')} in {_bare(period.phrase)}?"
    for person in people:
        if subject.people:
            text = text.replace(subject.people[0], person)
    return text


def _bare(phrase: str) -> str:
    """A period's words without the preposition before them ("in August 2024" -> "August 2024")."""
    return _LEADING.sub("", phrase.strip())


def _in_year(month: query_analysis.DateRange, of: query_analysis.DateRange | None) -> query_analysis.DateRange | None:
    """A month named without its year ("How about July?"), in the year of the conversation's period; None
    when the conversation has none."""
    if of is None or not of.start:
        return None
    name = _bare(month.phrase).capitalize()
    year, number = int(of.start[:4]), list(calendar.month_name).index(name)
    last = calendar.monthrange(year, number)[1]
    return query_analysis.DateRange(f"{year}-{number:02d}-01", f"{year}-{number:02d}-{last:02d}", f"{name} {year}")
