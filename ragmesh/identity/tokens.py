"""Bearer JWTs from an identity provider, verified with a shared secret (HS256), a public key
(RS256/ES256) or the provider's JWKS, and mapped to tenant, user and role by configured claims."""
from __future__ import annotations

from pathlib import Path

import jwt

from ragmesh.config import Settings
from ragmesh.errors import Unauthenticated
from ragmesh.identity import MEMBER, ROLES, Identity

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
            except jwt.PyJWTError as exc:  # no such key, or a token too malformed to name one
                raise Unauthenticated(f"token: no signing key for it ({exc})") from None
        if self._public:
            return self._public, _ASYMMETRIC
        return self.settings.jwt_secret, ["HS256"]

    def verify(self, token: str) -> Identity:
        """The identity a valid token names; Unauthenticated for a bad signature, an expired or
        not-yet-valid token, a wrong issuer or audience, or missing claims."""
        if not self.configured:
            raise Unauthenticated("JWTs are not accepted here (no JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL)")
        s = self.settings
        key, algorithms = self._key_and_algorithms(token)
        try:
            claims = jwt.decode(
                token, key, algorithms=algorithms, audience=s.jwt_audience or None, issuer=s.jwt_issuer or None,
                options={"require": ["exp"], "verify_aud": bool(s.jwt_audience)}, leeway=30,
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token: expired") from None
        except jwt.PyJWTError as exc:  # InvalidTokenError, and InvalidKeyError for a token of another key type
            raise Unauthenticated(f"token: {exc}") from None
        tenant, user = claims.get(s.jwt_tenant_claim), claims.get(s.jwt_user_claim)
        role = claims.get(s.jwt_role_claim) or MEMBER
        if not isinstance(tenant, str) or not tenant or not isinstance(user, str) or not user:
            raise Unauthenticated(f"token: claims {s.jwt_tenant_claim!r} and {s.jwt_user_claim!r} must name the "
                                  f"tenant and the user")
        if role not in ROLES:
            raise Unauthenticated(f"token: role {role!r} is not one of {', '.join(ROLES)}")
        return Identity(tenant, user, role, "jwt")
