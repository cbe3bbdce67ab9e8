"""Per-user monthly message and token counters with configurable limits (004 usage tracking)."""
from __future__ import annotations

import datetime as dt

from ragmesh.errors import ResourceExhausted
from ragmesh.store import Store


def this_month() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m")


class UsageLimiter:
    def __init__(self, store: Store, max_messages: int = 0, max_tokens: int = 0) -> None:
        self.store = store
        self.max_messages = max_messages  # 0 = unlimited
        self.max_tokens = max_tokens

    def check(self, tenant: str, user_id: str) -> None:
        """Raises ResourceExhausted (gRPC RESOURCE_EXHAUSTED, HTTP 429) once a limit is reached."""
        if not (self.max_messages or self.max_tokens):
            return
        month = this_month()
        messages, tokens = self.store.usage(tenant, user_id, month)
        who = f"user {user_id or '(anonymous)'}"
        if self.max_messages and messages >= self.max_messages:
            raise ResourceExhausted(f"usage: {who} has sent {messages} of {self.max_messages} messages allowed "
                                    f"in {month}; the limit resets next month")
        if self.max_tokens and tokens >= self.max_tokens:
            raise ResourceExhausted(f"usage: {who} has used {tokens} of {self.max_tokens} tokens allowed "
                                    f"in {month}; the limit resets next month")

    def record(self, tenant: str, user_id: str, tokens: int) -> None:
        self.store.add_usage(tenant, user_id, this_month(), 1, tokens)
