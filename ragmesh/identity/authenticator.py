"""Credential in, Identity out: the check every entry point (gRPC interceptor, HTTP bridge) makes."""
from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Literal

from ragmesh.config import Settings, is_loopback
from ragmesh.errors import ConfigError, PermissionDenied, Unauthenticated
from ragmesh.identity import Identity, keys
from ragmesh.identity.secrets import read_or_create
from ragmesh.identity.throttle import FailureThrottle
from ragmesh.identity.tokens import JwtVerifier
from ragmesh.store import quick_read
from ragmesh.store.lazy import LazyStore

Audience = Literal["users", "internal"]


def service_token(settings: Settings) -> str:
    """SERVICE_TOKEN, or on a loopback bind one made once under DATA_DIR/secrets."""
    return _secret(settings, settings.service_token, "SERVICE_TOKEN", "service_token")


def pepper(settings: Settings) -> str:
    """API_KEY_PEPPER, or on a loopback SQLite setup one made once under DATA_DIR/secrets."""
    if not settings.api_key_pepper and settings.mongodb_uri:
        raise ConfigError("API_KEY_PEPPER must be set with MONGODB_URI: every process that checks keys in the "
                          "shared store must hash them with the same pepper")
    return _secret(settings, settings.api_key_pepper, "API_KEY_PEPPER", "pepper")


def _secret(settings: Settings, value: str, variable: str, name: str) -> str:
    if value:
        return value
    if not is_loopback(settings.host):
        raise ConfigError(f"{variable} must be set when binding {settings.host} (a secret made on this machine "
                          f"cannot be shared with the others)")
    return read_or_create(settings.data_dir, name)


def bearer(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` value; Unauthenticated when there is none."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing credential: send 'authorization: Bearer <API key or token>'")
    return token.strip()


class Authenticator:
    """`users` (the gateway) accepts API keys and JWTs. `internal` (embedder, retriever, generator)
    accepts the service credential, which names the tenant and user it acts for in metadata, or an
    operator's admin key or token."""

    def __init__(self, settings: Settings, store: LazyStore, audience: Audience) -> None:
        self.store = store
        self.audience = audience
        self.pepper = pepper(settings)
        self.service_token = service_token(settings) if audience == "internal" else ""
        self.jwt = JwtVerifier(settings)
        self.failures = FailureThrottle(settings.auth_failures_per_minute)

    async def authenticate(self, metadata: Mapping[str, str], certified_peer: bool = False, peer: str = "") -> Identity:
        """`certified_peer`: the connection presented a client certificate TLS_CA signed (mTLS). `peer`: the
        client's address; one with too many failed credentials is refused before its credential is checked."""
        self.failures.check(peer)
        try:
            return await self._authenticate(metadata, certified_peer)
        except Unauthenticated:
            self.failures.failed(peer)
            raise

    async def _authenticate(self, metadata: Mapping[str, str], certified_peer: bool) -> Identity:
        if self.audience == "internal" and certified_peer and not metadata.get("authorization"):
            return Identity.on_behalf_of(metadata, "certificate")
        token = bearer(metadata.get("authorization"))
        if self.audience == "internal":
            if hmac.compare_digest(token.encode(), self.service_token.encode()):
                return Identity.on_behalf_of(metadata, "service_token")
            identity = await self.user(token)
            if not identity.is_admin:
                raise PermissionDenied("internal services take the service credential or an admin key")
            return identity
        return await self.user(token)

    async def user(self, token: str) -> Identity:
        if keys.looks_like_key(token):
            return await quick_read(self.store, self._key, token)
        if token.count(".") == 2:
            return self.jwt.verify(token)
        raise Unauthenticated("credential is neither an API key nor a JWT")

    def _key(self, key: str) -> Identity:
        parsed = keys.parse(key)
        self.store.connect()  # idempotent; the embedder and generator open it on their first key
        record = self.store.api_key(parsed[0]) if parsed else None
        # One message for unknown, wrong, revoked and expired: nothing to probe.
        if (record is None or record.revoked_at or record.expired()
                or not hmac.compare_digest(record.secret_hash, keys.hash_secret(self.pepper, parsed[1]))):
            raise Unauthenticated("invalid API key (unknown, revoked or expired)")
        return Identity(record.tenant, record.user_id, record.role, "key", record.groups)

