"""Identity: the one place that turns a credential into a tenant, a user and a role.

Every service asks it. The gateway authenticates users (API keys, JWTs); the internal services
(embedder, retriever, generator) accept the gateway's service credential (a shared token or a
client certificate signed by TLS_CA), which says on whose behalf it calls, or an operator's
admin key. A request field never decides the tenant: the identity does.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from ragmesh.errors import PermissionDenied
from ragmesh.request_context import identity_var
from ragmesh.validation import valid_name

ADMIN = "admin"
MEMBER = "member"
SERVICE = "service"
ROLES = (ADMIN, MEMBER)

# Metadata the gateway sets on calls to internal services, after it authenticated the user.
TENANT_HEADER = "x-ragmesh-tenant"
USER_HEADER = "x-ragmesh-user"
ROLE_HEADER = "x-ragmesh-role"
GROUPS_HEADER = "x-ragmesh-groups"  # comma-separated: group names never hold a comma
# Groups one credential carries: each is a principal every read filters by, and all of them travel in
# one header on every hop, which must fit gRPC's 8 KiB of metadata with the rest of the call's.
MAX_GROUPS = 100
MAX_GROUPS_CHARS = 4096  # the header's length: the names and their commas


def groups_of(value: object) -> tuple[str, ...]:
    """A credential's groups, sorted without repeats, from a list of names that pass the tenant and
    user rule. ValueError says what is wrong in words that echo none of the value (a token's claims
    are the caller's to choose)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError("must be a list of group names")
    if len(value) > MAX_GROUPS:
        raise ValueError(f"names {len(value):,} groups; a credential carries at most {MAX_GROUPS}")
    for position, name in enumerate(value, 1):
        if not valid_name(name):
            raise ValueError(f"group {position} is not one name of 1-128 letters, digits or . _ @ -, starting "
                             f"with a letter or digit")
    groups = tuple(sorted(set(value)))
    if (length := len(",".join(groups))) > MAX_GROUPS_CHARS:
        raise ValueError(f"names groups of {length:,} characters in all; a credential carries at most "
                         f"{MAX_GROUPS_CHARS:,}")
    return groups


@dataclass(frozen=True)
class Identity:
    """Who is calling. `via` says how that was proven: key | jwt | service_token | certificate.
    `groups` come from the credential too (a JWT claim, a key's record), never from a request."""

    tenant: str
    user: str
    role: str
    via: str
    groups: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    @property
    def is_service(self) -> bool:
        """The platform itself (the gateway, or an operator holding the service credential)."""
        return self.via in ("service_token", "certificate")

    def require_tenant(self) -> str:
        """The tenant the call acts in; a service call that names none is refused (fail closed)."""
        if not self.tenant:
            raise PermissionDenied("this call needs a tenant, and the credential names none")
        return self.tenant

    def require_admin(self, what: str) -> None:
        if not (self.is_admin or self.is_service):
            raise PermissionDenied(f"{what} needs an admin key; this key's role is {self.role}")

    def require_service(self, what: str) -> None:
        if not self.is_service:
            raise PermissionDenied(f"{what} is a platform operation: it needs the service credential")

    def acting_for(self, tenant: str, user: str) -> "Identity":
        """The identity a request acts as when it names a tenant or user: a key or JWT, admin or member,
        only as its own user (a colleague's conversations, corrections and memory are theirs alone), the
        platform for any user of the tenant it acts in, nobody for another tenant."""
        if tenant and tenant != self.tenant:
            raise PermissionDenied(f"tenant: this credential is for tenant {self.tenant!r}, not {tenant!r}")
        if user and user != self.user:
            if not self.is_service:
                raise PermissionDenied("user_id: a key acts only as its own user, an admin's too: another "
                                       "user's conversations are theirs alone")
            return Identity(self.tenant, user, MEMBER, self.via)
        return self

    def headers(self) -> tuple[tuple[str, str], ...]:
        """Metadata a service credential sends so the next hop knows on whose behalf it calls.
        Percent-encoded UTF-8: gRPC metadata values carry printable ASCII only, names may not."""
        return ((TENANT_HEADER, quote(self.tenant, safe="")), (USER_HEADER, quote(self.user, safe="")),
                (ROLE_HEADER, self.role), (GROUPS_HEADER, ",".join(self.groups)))

    @classmethod
    def on_behalf_of(cls, metadata: Mapping[str, str], via: str) -> "Identity":
        """The identity `headers()` sent, read back at the next hop (absent role: the platform itself)."""
        groups = tuple(g for g in metadata.get(GROUPS_HEADER, "").split(",") if g)
        return cls(unquote(metadata.get(TENANT_HEADER, "")), unquote(metadata.get(USER_HEADER, "")),
                   metadata.get(ROLE_HEADER, "") or SERVICE, via, groups)


def current() -> Identity:
    """The caller of the call being served (ragmesh.request_context); only reachable in a handler the
    interceptor authenticated."""
    identity = identity_var.get()
    if identity is None:  # a programming error: every entry point authenticates first
        raise PermissionDenied("no identity for this call")
    return identity
