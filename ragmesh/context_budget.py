"""How much retrieved context a generation model takes: characters of context in its prompt and the
number of hits worth retrieving for it. Each generator backend declares one (a model from its context
window in tokens, the offline answerer today's small figures); the gateway asks the generator for it
and sizes the planner's hit count and the context to it, so a model with a large window gets the
notes and complete factsheets a broad question needs instead of a handful of passages."""
from __future__ import annotations

from dataclasses import dataclass

# What an answerer that declares no window (the offline extractive one, or a generator too old to say) gets:
OFFLINE_CHARS = 4_000  # characters of context, as CONTEXT_CHAR_BUDGET's default
OFFLINE_HARD_CAP = 12_000  # the most CONTEXT_CHAR_BUDGET may give it
CHARS_PER_TOKEN = 4  # English text, as the providers' tokenizers count it (an estimate, on the safe side)
# Tokens a prompt needs besides the context: instructions, the conversation (HISTORY_CHAR_BUDGET's
# 6,000 characters) and room for the answer and its thinking.
OTHER_TOKENS = 4_096
CONTEXT_SHARE = 0.75  # of the window left after OTHER_TOKENS, what the context may fill
CHARS_PER_HIT = 800  # a rendered block's characters on average (a note's part with its header lines)
MAX_HITS = 100  # the most hits a context holds, however large the window (the fund-research design's)


@dataclass(frozen=True)
class ContextBudget:
    """`chars`: characters of retrieved context in the prompt; `hits`: how many hits to retrieve for it (0: the
    route's own count); `window_tokens`: the model's context window it was derived from (0: none declared,
    an answerer that quotes the hits, not a model reading the prompt); `complete_records`: whether complete
    records (a factsheet's whole JSON) get room reserved before the notes compete for it (a model reads
    them; the offline answerer quotes the hits' own text, so for it they only fill room left over)."""

    chars: int
    hits: int = 0
    window_tokens: int = 0
    complete_records: bool = False

    def capped(self, max_chars: int) -> ContextBudget:
        """At most `max_chars` characters (an operator's cap), with the hit count that fills them."""
        if self.chars <= max_chars:
            return self
        return ContextBudget(max_chars, min(self.hits, hits_for(max_chars)) if self.hits else 0,
                             self.window_tokens, self.complete_records)


OFFLINE = ContextBudget(OFFLINE_CHARS)


def hits_for(chars: int) -> int:
    """The hits that fill `chars` characters of context, at most MAX_HITS."""
    return max(1, min(MAX_HITS, chars // CHARS_PER_HIT))


def for_window(window_tokens: int) -> ContextBudget:
    """A model's budget from its context window: CONTEXT_SHARE of what the rest of the prompt leaves, never
    less than the offline answerer's (a window too small for that is one the operator misdeclared). No window
    (0): the offline answerer's budget."""
    if window_tokens <= 0:
        return OFFLINE
    chars = max(OFFLINE_CHARS, int((window_tokens - OTHER_TOKENS) * CONTEXT_SHARE) * CHARS_PER_TOKEN)
    return ContextBudget(chars, hits_for(chars), window_tokens, complete_records=True)
