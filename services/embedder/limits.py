"""How much one Embed call may ask for. The model reads a bounded number of tokens a text, but its
tokenizer reads all of it, and one call at a time runs on the model: a 20 MB text held everyone's
questions for half a minute, and 2,048 short texts take a model call of 20 s. So a call is bounded in
texts and a text and a call in characters, with defaults at or above what the platform's own callers
send (ingest: EMBED_BATCH_SIZE chunks of at most EMBED_MAX_CHARS; the retriever: a query of 4,000
characters and up to 8 variants; the gateway: a question of 2,000 and 12 of its user's corrections of
6,000)."""
from __future__ import annotations

from dataclasses import dataclass

from ragmesh.config import Settings
from ragmesh.errors import InvalidArgument

TEXT_CHARS = 8_000
CALL_CHARS = 128 * 1024
MAX_TEXTS = 64  # or EMBED_BATCH_SIZE if larger: one ingest call


@dataclass(frozen=True)
class EmbedLimits:
    text_chars: int = TEXT_CHARS
    call_chars: int = CALL_CHARS
    texts: int = MAX_TEXTS

    @classmethod
    def from_settings(cls, s: Settings) -> "EmbedLimits":
        """EMBED_TEXT_MAX_CHARS and EMBED_CALL_MAX_CHARS, or defaults that follow EMBED_MAX_CHARS and
        EMBED_BATCH_SIZE (so raising those for Gemini's longer inputs raises these too)."""
        text = s.embed_text_max_chars or max(TEXT_CHARS, s.embed_max_chars)
        call = s.embed_call_max_chars or max(CALL_CHARS, s.embed_batch_size * s.embed_max_chars)
        if text < 1 or call < text:
            raise ValueError(f"EMBED_TEXT_MAX_CHARS ({text}) must be at least 1 and at most "
                             f"EMBED_CALL_MAX_CHARS ({call})")
        return cls(text, call, max(MAX_TEXTS, s.embed_batch_size))

    def check(self, texts: list[str]) -> None:
        """InvalidArgument naming the field and the limit for a call over any of them."""
        if len(texts) > self.texts:
            raise InvalidArgument("texts", f"at most {self.texts} texts a call (EMBED_BATCH_SIZE), got {len(texts)}")
        total = 0
        for i, text in enumerate(texts):
            if len(text) > self.text_chars:
                raise InvalidArgument(f"texts[{i}]", f"is {len(text):,} characters; the limit is {self.text_chars:,} "
                                                     f"a text (EMBED_TEXT_MAX_CHARS)")
            total += len(text)
        if total > self.call_chars:
            raise InvalidArgument("texts", f"are {total:,} characters in all; the limit is {self.call_chars:,} a call "
                                           f"(EMBED_CALL_MAX_CHARS)")
