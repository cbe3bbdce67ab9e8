"""API keys: random, shown once, stored only as an HMAC-SHA256 of the secret under a server-side
pepper. A key reads `rmk_<id>_<secret>`: the id finds the record (and names the key in `keys list`
and `keys revoke`), the secret proves possession. The secret has 256 bits of entropy, so a fast
keyed hash is enough (a slow password hash such as argon2 guards low-entropy secrets, and would
cost every request milliseconds)."""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence

from ragmesh.errors import InvalidArgument
from ragmesh.identity import ROLES, groups_of
from ragmesh.store.records import ApiKeyRecord
from ragmesh.validation import valid_name

PREFIX = "rmk"
_KEY = re.compile(rf"^{PREFIX}_([0-9a-f]{{16}})_([A-Za-z0-9_-]{{43}})$")

def check_name(field: str, value: str) -> str:
    """Tenants and users are short printable names: they end up in logs, filters and headers."""
    if not valid_name(value):
        raise InvalidArgument(field, f"must be 1-128 letters, digits or . _ @ -, starting with a letter or digit; "
                                     f"got {value!r}")
    return value


def hash_secret(pepper: str, secret: str) -> str:
    return hmac.new(pepper.encode(), secret.encode(), hashlib.sha256).hexdigest()


def new_key(pepper: str, tenant: str, user_id: str, role: str, *, expires_days: float = 0,
            label: str = "", groups: Sequence[str] = ()) -> tuple[str, ApiKeyRecord]:
    """(the key to show once, the record to store). `groups`: the groups the key's holder is in."""
    check_name("tenant", tenant)
    check_name("user", user_id)
    if role not in ROLES:
        raise InvalidArgument("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    try:
        groups = groups_of(groups)
    except ValueError as exc:
        raise InvalidArgument("groups", str(exc)) from None
    if expires_days < 0:
        raise InvalidArgument("expires_days", "must not be negative")
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    expires = (now + dt.timedelta(days=expires_days)).isoformat() if expires_days else ""
    record = ApiKeyRecord(key_id, tenant, user_id, role, hash_secret(pepper, secret),
                          created_at=now.isoformat(), expires_at=expires, label=label, groups=groups)
    return f"{PREFIX}_{key_id}_{secret}", record


def parse(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None."""
    found = _KEY.fullmatch(key)
    return (found.group(1), found.group(2)) if found else None


def looks_like_key(token: str) -> bool:
    return token.startswith(f"{PREFIX}_")
