"""Replies to turns that are not questions (the reading's `small_talk`: thanks, acknowledgements, "what
else?", greetings, goodbyes, "who are you?"), made without a search. Offline they know the conversation:
they name what it was about and offer what else the notes hold (the funds not spoken of yet); with a
model configured, a thanks, an acknowledgement or a "what else?" in a conversation that has turns is
answered by the model from the conversation instead (services/gateway/pipeline.py)."""
from __future__ import annotations

from collections.abc import Sequence

from services.gateway.reading import Reading

GOODBYE = "Goodbye! Your conversation is saved; come back any time."
GOODBYE_HELD = "Goodbye! Come back any time."  # nothing of a conversation the client holds is saved
GREETING = "Hello! I'm ragmesh. Ask me about your funds, meetings, factsheets or documents."
ABOUT_ME = ("I'm ragmesh, a research assistant that answers from your meeting notes, factsheets and documents, "
            "with citations.")
CONVERSATIONAL = frozenset({"thanks", "ack", "else"})  # answered by a model from the conversation, when it has one
_OPENINGS = {"thanks": "You're welcome!", "ack": "Glad that helps.", "else": "Happy to go on."}
OFFERED = 4  # funds offered at most


def offers(reading: Reading) -> bool:
    """Whether the reply offers what else the notes hold (it needs the funds they hold)."""
    return reading.small_talk in CONVERSATIONAL and bool(reading.before.question or reading.before.funds_seen)


def reply(reading: Reading, known_funds: Sequence[str], held: bool) -> str:
    """The offline reply to a turn that is not a question, knowing the conversation (`reading.before`)."""
    kind = reading.small_talk
    if kind == "bye":
        return GOODBYE_HELD if held else GOODBYE
    if kind == "name":
        return ABOUT_ME
    subject = reading.before
    if not offers(reading):
        return GREETING if kind == "hello" else f"{_OPENINGS[kind]} {GREETING.removeprefix('Hello! ')}"
    said = [_OPENINGS[kind]]
    if subject.funds_seen:
        said.append(f"So far we discussed {_joined(subject.funds_seen)}"
                    + (f", last: \"{subject.question}\"." if subject.question else "."))
    elif subject.question:
        said.append(f"So far we discussed \"{subject.question}\".")
    if others := [f for f in known_funds if f not in subject.funds_seen][:OFFERED]:
        said.append(f"The notes also cover {_joined(others)}: ask about their performance, positions, "
                    f"team or meetings.")
    else:
        said.append("Ask about another period, their positions, team or meetings.")
    return " ".join(said)


def _joined(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
