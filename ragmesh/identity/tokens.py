"""Bearer JWTs from an identity provider, verified with a shared secret (HS256), a public key
(RS256/ES256) or the provider's JWKS, and mapped to tenant, user, role and groups by configured claims."""
from __future__ import annotations

from pathlib import Path

import jwt

from ragmesh.config import Settings
from ragmesh.errors import Unauthenticated
from ragmesh.identity import MEMBER, ROLES, Identity, groups_of
from ragmesh.identity.keys import valid_name

_ASYMMETRIC = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class JwtVerifier:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._jwks = jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=True) if settings.jwt_jwks_url else None
        public = settings.jwt_public_key
        if public and not public.lstrip().startswith("-----") and Path(public).is_file():
            public = Path(public).read_text()
        self._public = public

    @property
    def configured(self) -> bool:
        return bool(self.settings.jwt_secret or self._public or self._jwks)

    def _key_and_algorithms(self, token: str) -> tuple[object, list[str]]:
        if self._jwks is not None:
            try:
                return self._jwks.get_signing_key_from_jwt(token).key, _ASYMMETRIC
            except jwt.PyJWTError:  # no such key, an unreachable JWKS, or a token too malformed to name one
                raise Unauthenticated("token: no signing key for it at JWT_JWKS_URL") from None
        if self._public:
            return self._public, _ASYMMETRIC
        return self.settings.jwt_secret, ["HS256"]

    def verify(self, token: str) -> Identity:
        """The identity a valid token names; Unauthenticated for a bad signature, an expired or
        not-yet-valid token, a wrong issuer or audience, or missing or malformed claims. Every message
        is a plain sentence: nothing of the token's values or of the library's objects is echoed."""
        if not self.configured:
            raise Unauthenticated("JWTs are not accepted here (no JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL)")
        s = self.settings
        key, algorithms = self._key_and_algorithms(token)
        try:
            claims = jwt.decode(
                token, key, algorithms=algorithms, audience=s.jwt_audience or None, issuer=s.jwt_issuer or None,
                options={"require": ["exp"], "verify_aud": bool(s.jwt_audience)}, leeway=30,
            )
        except jwt.PyJWTError as exc:  # InvalidTokenError, and InvalidKeyError for a token of another key type
            raise Unauthenticated(f"token: {_refusal(exc)}") from None
        tenant, user = claims.get(s.jwt_tenant_claim), claims.get(s.jwt_user_claim)
        role = claims.get(s.jwt_role_claim) or MEMBER
        for name, value in ((s.jwt_tenant_claim, tenant), (s.jwt_user_claim, user)):
            if not valid_name(value):
                raise Unauthenticated(f"token: claim {name!r} must be one name of 1-128 letters, digits or . _ @ -, "
                                      f"starting with a letter or digit (it names the tenant or the user)")
        if role not in ROLES:
            raise Unauthenticated(f"token: claim {s.jwt_role_claim!r} must be {' or '.join(ROLES)}")
        try:
            groups = groups_of(claims.get(s.jwt_groups_claim, []))
        except ValueError as exc:
            raise Unauthenticated(f"token: claim {s.jwt_groups_claim!r} {exc}") from None
        return Identity(tenant, user, role, "jwt", groups)


def _refusal(exc: jwt.PyJWTError) -> str:
    """Why a token was refused, in words (PyJWT's own messages can show Python objects)."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the {exc.claim!r} claim is missing"
    for kind, reason in _REFUSALS:
        if isinstance(exc, kind):
            return reason
    return "not a valid token"


_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.ImmatureSignatureError, "not valid yet"),
    (jwt.InvalidAudienceError, "wrong audience (aud claim)"),
    (jwt.InvalidIssuerError, "wrong issuer (iss claim)"),
    (jwt.InvalidAlgorithmError, "signed with an algorithm this server does not accept"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidKeyError, "signed with another type of key than this server's"),
    (jwt.exceptions.InvalidSubjectError, "claim 'sub' must be one name (a string)"),
    (jwt.DecodeError, "malformed"),
)
