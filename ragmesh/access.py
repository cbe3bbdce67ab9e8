"""Who may read a document inside its tenant: its uploader, named users, groups the credential
carries, and/or the whole tenant.

A document's `Access` travels with it and with each of its chunks as one reserved metadata value
(`ACCESS_KEY`, a space-separated token list), so every store and search backend keeps it without a
schema of its own, and a filter matches it the same way everywhere: a reader's *principals*
(`tenant`, `user:<name>`, `group:<name>` for each of the credential's groups) must share a token
with the value. The owner is a reader (`user:<owner>` is always in the value) and is named again as
`owner:<name>`, a token no principal has, so ownership never grants more than reading by itself.

A chunk or document without the key was written before access lists existed: it stays readable by
the whole tenant (`LEGACY`), so an upgrade changes nobody's view and re-embeds nothing.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ragmesh.errors import InvalidArgument
from ragmesh.validation import valid_name

if TYPE_CHECKING:  # only the type: the store and the identity package stay below this module's users
    from ragmesh.identity import Identity

ACCESS_KEY = "__access__"  # metadata key of a document's and each of its chunks' encoded Access
TENANT = "tenant"
USER = "user:"
GROUP = "group:"
OWNER = "owner:"
# Named users and groups a document is shared with: with the owner, the tenant and a chunk's own
# metadata (at most 160 pairs) they fit the Milvus backend's 256-pair filter array. Share with
# more people through a group.
MAX_USERS = 64
MAX_GROUPS = 24


@dataclass(frozen=True)
class Access:
    """Who may read a document. `owner` is its uploader, who may also change its access, replace it
    and delete it (as the tenant's admins may); `tenant` opens it to every user of the tenant."""

    owner: str = ""
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    tenant: bool = False

    @classmethod
    def of(cls, owner: str = "", users: Iterable[str] = (), groups: Iterable[str] = (), tenant: bool = False,
           field: str = "access") -> "Access":
        """A checked, canonical Access: names that pass the identity rule, repeats dropped, sorted."""
        users, groups = sorted(set(users)), sorted(set(groups))
        if len(users) > MAX_USERS:
            raise InvalidArgument(f"{field}.users", f"names {len(users):,} users; the limit is {MAX_USERS}")
        if len(groups) > MAX_GROUPS:
            raise InvalidArgument(f"{field}.groups", f"names {len(groups):,} groups; the limit is {MAX_GROUPS}")
        for part, names in (("users", users), ("groups", groups)):
            for i, name in enumerate(names):
                if not valid_name(name):
                    raise InvalidArgument(f"{field}.{part}[{i}]", "must be 1-128 letters, digits or . _ @ -, "
                                                                  "starting with a letter or digit")
        if owner and not valid_name(owner):
            raise InvalidArgument(f"{field}.owner", "must be 1-128 letters, digits or . _ @ -, starting with a "
                                                    "letter or digit")
        return cls(owner, tuple(users), tuple(groups), bool(tenant))

    def encode(self) -> str:
        """The metadata value: sorted tokens, the owner both as a reader and as `owner:`."""
        tokens = {USER + u for u in self.users} | {GROUP + g for g in self.groups}
        if self.owner:
            tokens |= {USER + self.owner, OWNER + self.owner}
        if self.tenant:
            tokens.add(TENANT)
        return " ".join(sorted(tokens))

    def with_owner(self, owner: str) -> "Access":
        return Access(owner, self.users, self.groups, self.tenant)

    def shared_beyond_owner(self) -> bool:
        return self.tenant or bool(self.groups) or any(u != self.owner for u in self.users)


LEGACY = Access(tenant=True)  # what a document written before access lists is: the whole tenant's


@lru_cache(maxsize=65_536)
def decode(value: str) -> Access:
    """The Access an encoded value names (memoised: a collection repeats a few values many times)."""
    owner, users, groups, tenant = "", [], [], False
    for token in value.split():
        if token == TENANT:
            tenant = True
        elif token.startswith(OWNER):
            owner = token[len(OWNER):]
        elif token.startswith(USER):
            users.append(token[len(USER):])
        elif token.startswith(GROUP):
            groups.append(token[len(GROUP):])
    return Access(owner, tuple(u for u in users if u != owner), tuple(groups), tenant)


def of_metadata(metadata: Mapping[str, str]) -> Access:
    """A document's or chunk's Access (LEGACY when it has none)."""
    value = metadata.get(ACCESS_KEY)
    return LEGACY if value is None else decode(value)


@lru_cache(maxsize=65_536)
def tokens(value: str | None) -> frozenset[str]:
    """The reader tokens of an encoded value (None: written before access lists, the tenant's)."""
    if value is None:
        return frozenset((TENANT,))
    return frozenset(t for t in value.split() if not t.startswith(OWNER))


Principals = frozenset[str]


def principals(who: "Identity") -> Principals | None:
    """What the caller reads by: the tenant, its user, its credential's groups. None: the platform
    itself (the service credential acting for no user), which reads every document of the tenant
    (warm-up, replication, platform figures)."""
    if who.is_service and not who.user:
        return None
    return frozenset((TENANT, USER + who.user, *(GROUP + g for g in who.groups)))


def admits(value: str | None, readers: Principals | None) -> bool:
    """Whether a chunk or document whose ACCESS_KEY value is `value` may be read by `readers`."""
    return readers is None or not readers.isdisjoint(tokens(value))


def readable(metadata: Mapping[str, str], readers: Principals | None) -> bool:
    return admits(metadata.get(ACCESS_KEY), readers)


def shown(metadata: Mapping[str, str]) -> dict[str, str]:
    """Metadata as callers see it: without the encoded access (they get it as a field of its own)."""
    return {k: v for k, v in metadata.items() if k != ACCESS_KEY} if ACCESS_KEY in metadata else dict(metadata)


def privileged(who: "Identity") -> bool:
    """The tenant's admins, and the platform itself: the service credential with no user's role. A
    call the gateway relays for a user carries that user's role, and is judged as that user."""
    return who.is_admin or (who.is_service and who.role == "service")


def may_manage(who: "Identity", access: Access) -> bool:
    """Whether the caller may change the document's access, replace or delete it: its uploader, the
    tenant's admins, and the platform."""
    return privileged(who) or (bool(access.owner) and access.owner == who.user)
