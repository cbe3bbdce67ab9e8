"""Identity: API keys, JWTs (HS256, a public key, a JWKS endpoint), the Authenticator for users and
for internal services against a real SQLite store, and the settings a service must refuse to start
with (no pepper with a shared store, no service token or TLS on a non-loopback bind)."""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import hashlib
import hmac
import http.server
import json
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ragmesh import config, tls
from ragmesh.config import Settings
from ragmesh.errors import ConfigError, InvalidArgument, PermissionDenied, Unauthenticated
from ragmesh.identity import ADMIN, MAX_GROUPS, MAX_GROUPS_CHARS, MEMBER, SERVICE, Identity, keys
from ragmesh.identity.authenticator import Authenticator, bearer, pepper, service_token
from ragmesh.identity.tokens import JwtVerifier
from ragmesh.store.lazy import LazyStore

SECRET = "test-jwt-secret-0123456789abcdef0123456789"


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Loopback settings with nothing configured from the environment but what the test names."""
    base = dict(data_dir=tmp_path, host="127.0.0.1", mongodb_uri="", service_token="", api_key_pepper="",
                jwt_secret="", jwt_public_key="", jwt_jwks_url="", jwt_issuer="", jwt_audience="",
                jwt_tenant_claim="tenant", jwt_user_claim="sub", jwt_role_claim="role",
                tls_cert="", tls_key="", tls_ca="", allow_plaintext=False)
    return config.load().replace(**(base | overrides))


def claims(**over: object) -> dict:
    found = {"tenant": "acme", "sub": "alice", "role": "member", "exp": int(time.time()) + 300}
    found.update(over)
    return {k: v for k, v in found.items() if v is not None}


def fails(call, *args: object, match: str | None = None) -> Unauthenticated:
    with pytest.raises(Unauthenticated, match=match) as err:
        call(*args)
    return err.value


# -- API keys ----------------------------------------------------------------------------------
def test_a_new_key_is_shown_once_and_stored_only_as_a_keyed_hash() -> None:
    key, record = keys.new_key("pepper-1", "acme", "alice", MEMBER, label="laptop")
    parsed = keys.parse(key)
    assert parsed is not None
    key_id, secret = parsed
    assert key == f"rmk_{key_id}_{secret}" and len(key_id) == 16 and len(secret) == 43
    assert (record.key_id, record.tenant, record.user_id, record.role, record.label) == (
        key_id, "acme", "alice", MEMBER, "laptop")
    # The record holds no part of the secret, only HMAC-SHA256(pepper, secret).
    assert secret not in record.secret_hash and key not in json.dumps(dataclasses.asdict(record))
    assert all(secret[i:i + 8] not in json.dumps(dataclasses.asdict(record)) for i in range(0, 36, 4))
    assert record.secret_hash == keys.hash_secret("pepper-1", secret)
    assert record.secret_hash != keys.hash_secret("pepper-2", secret), "the pepper is part of the hash"
    assert len(record.secret_hash) == 64 and not record.revoked_at and not record.expires_at
    assert not record.expired()
    other, other_record = keys.new_key("pepper-1", "acme", "alice", MEMBER)
    assert other != key and other_record.key_id != key_id, "every key is random"


@pytest.mark.parametrize("bad", [
    "", "rmk_", "rmk_0123456789abcdef", "rmk_0123456789abcdef_short",
    "rmk_0123456789ABCDEF_" + "a" * 43,  # upper-case id
    "rmk_0123456789abcde_" + "a" * 43,  # 15-hex id
    "rmk_0123456789abcdef_" + "a" * 42 + "!",
    "rmk_0123456789abcdef_" + "a" * 44,
    "xyz_0123456789abcdef_" + "a" * 43,
    " rmk_0123456789abcdef_" + "a" * 43,
    "rmk_0123456789abcdef_" + "a" * 43 + "\n",
])
def test_parse_rejects_malformed_keys(bad: str) -> None:
    assert keys.parse(bad) is None


def test_parse_reads_a_well_formed_key() -> None:
    assert keys.parse("rmk_0123456789abcdef_" + "a" * 43) == ("0123456789abcdef", "a" * 43)


def test_expiry() -> None:
    _, record = keys.new_key("p", "acme", "alice", MEMBER, expires_days=2)
    expires = dt.datetime.fromisoformat(record.expires_at)
    now = dt.datetime.now(dt.timezone.utc)
    assert dt.timedelta(days=2) - dt.timedelta(seconds=5) < expires - now <= dt.timedelta(days=2)
    assert not record.expired()
    assert not record.expired(expires - dt.timedelta(seconds=1))
    assert record.expired(expires) and record.expired(expires + dt.timedelta(days=1))
    zulu = dataclasses.replace(record, expires_at="2020-01-01T00:00:00Z")
    assert zulu.expired()
    with pytest.raises(InvalidArgument):
        keys.new_key("p", "acme", "alice", MEMBER, expires_days=-1)


@pytest.mark.parametrize("bad", ["", "a b", "x" * 200, "x" * 129, "-lead", ".dot", "ten/ant", "t\n", "é"])
def test_check_name_rejects_bad_names(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        keys.check_name("tenant", bad)
    with pytest.raises(InvalidArgument):
        keys.new_key("p", bad, "alice", MEMBER)
    with pytest.raises(InvalidArgument):
        keys.new_key("p", "acme", bad, MEMBER)


@pytest.mark.parametrize("good", ["acme", "a", "x" * 128, "alice@example.com", "team_1.b-2"])
def test_check_name_accepts_good_names(good: str) -> None:
    assert keys.check_name("tenant", good) == good


def test_a_key_carries_its_holders_groups_sorted_once() -> None:
    _, record = keys.new_key("p", "acme", "alice", MEMBER, groups=["risk", "research", "risk"])
    assert record.groups == ("research", "risk")
    assert keys.new_key("p", "acme", "alice", MEMBER)[1].groups == (), "no groups unless named"
    assert len(keys.new_key("p", "acme", "alice", MEMBER, groups=[f"g{i}" for i in range(MAX_GROUPS)])[1].groups) \
        == MAX_GROUPS


def longest_groups() -> list[str]:
    """MAX_GROUPS names whose header is MAX_GROUPS_CHARS long: what one hop's metadata must carry."""
    room = MAX_GROUPS_CHARS - (MAX_GROUPS - 1)  # less the commas
    return [f"g{i:03d}".ljust(room // MAX_GROUPS + (i < room % MAX_GROUPS), "x") for i in range(MAX_GROUPS)]


def test_the_longest_groups_fit_a_hop() -> None:
    longest = longest_groups()
    assert len(",".join(longest)) == MAX_GROUPS_CHARS and len(longest) == MAX_GROUPS
    _, record = keys.new_key("p", "acme", "alice", MEMBER, groups=longest)
    sent = Identity("acme", "x" * 128, MEMBER, "key", record.groups).headers()
    assert sum(len(name) + len(value) for name, value in sent) < 4500, "well within gRPC's 8 KiB of metadata"
    with pytest.raises(InvalidArgument, match="characters in all"):
        keys.new_key("p", "acme", "alice", MEMBER, groups=[*longest[:-1], longest[-1] + "x"])


@pytest.mark.parametrize("bad", [["a b"], ["research", ""], ["ok", "-lead"], ["x" * 129], ["a,b"], ["t\n"], [7],
                                 "research", [f"g{i}" for i in range(MAX_GROUPS + 1)]])
def test_a_key_refuses_groups_a_token_could_not_carry(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="^groups: ") as refused:
        keys.new_key("p", "acme", "alice", MEMBER, groups=bad)
    assert refused.value.field == "groups"


def test_new_key_refuses_unknown_roles() -> None:
    for role in ("service", "root", ""):
        with pytest.raises(InvalidArgument):
            keys.new_key("p", "acme", "alice", role)


def test_bearer() -> None:
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    for bad in (None, "", "Bearer", "Bearer   ", "Basic abc", "abc"):
        fails(bearer, bad, match="missing credential")


# -- JWT: HS256 --------------------------------------------------------------------------------
def hs256(payload: dict, secret: str = SECRET, **headers: object) -> str:
    return jwt.encode(payload, secret, algorithm="HS256", headers=headers or None)


def test_hs256_valid_token_is_an_identity(tmp_path: Path) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET))
    assert verifier.configured
    assert verifier.verify(hs256(claims())) == Identity("acme", "alice", MEMBER, "jwt")
    assert verifier.verify(hs256(claims(role="admin"))) == Identity("acme", "alice", ADMIN, "jwt")
    assert verifier.verify(hs256(claims(role=None))).role == MEMBER, "no role claim: a member"


def test_hs256_refusals(tmp_path: Path) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET))
    fails(verifier.verify, hs256(claims(exp=int(time.time()) - 120)), match="expired")
    fails(verifier.verify, hs256(claims(exp=None)), match="exp")
    fails(verifier.verify, hs256(claims(), secret="another-secret-of-the-same-length-000000"))
    fails(verifier.verify, hs256(claims(nbf=int(time.time()) + 600)))
    fails(verifier.verify, hs256(claims(tenant=None)), match="tenant")
    fails(verifier.verify, hs256(claims(tenant="")), match="tenant")
    fails(verifier.verify, hs256(claims(tenant=["acme"])), match="tenant")
    fails(verifier.verify, hs256(claims(sub=None)), match="sub")
    fails(verifier.verify, hs256(claims(role="service")), match="role")
    fails(verifier.verify, hs256(claims(role="root")), match="role")
    fails(verifier.verify, "not.a.jwt")
    token = hs256(claims())
    header, body, signature = token.split(".")
    tampered = json.loads(base64.urlsafe_b64decode(body + "=="))
    tampered["tenant"] = "umbra"
    forged = base64.urlsafe_b64encode(json.dumps(tampered).encode()).rstrip(b"=").decode()
    fails(verifier.verify, f"{header}.{forged}.{signature}")


def test_alg_none_is_refused(tmp_path: Path) -> None:
    unsigned = jwt.encode(claims(role="admin"), None, algorithm="none")
    assert unsigned.endswith(".")
    fails(JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET)).verify, unsigned)
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    fails(JwtVerifier(make_settings(tmp_path, jwt_public_key=pem)).verify, unsigned)


def test_issuer_and_audience_are_checked_when_configured(tmp_path: Path) -> None:
    strict = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET, jwt_issuer="https://idp.example",
                                       jwt_audience="ragmesh"))
    good = claims(iss="https://idp.example", aud="ragmesh")
    assert strict.verify(hs256(good)).tenant == "acme"
    assert strict.verify(hs256(good | {"aud": ["other", "ragmesh"]})).user == "alice"
    fails(strict.verify, hs256(good | {"iss": "https://evil.example"}), match="(?i)issuer")
    fails(strict.verify, hs256(claims(aud="ragmesh")), match="iss")
    fails(strict.verify, hs256(good | {"aud": "other"}), match="(?i)audience")
    fails(strict.verify, hs256(claims(iss="https://idp.example")), match="aud")
    # Unconfigured: neither is checked.
    lax = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET))
    assert lax.verify(hs256(good | {"iss": "https://evil.example", "aud": "other"})).tenant == "acme"


def test_custom_claims(tmp_path: Path) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET, jwt_tenant_claim="org",
                                         jwt_user_claim="email", jwt_role_claim="ragmesh_role",
                                         jwt_groups_claim="teams"))
    token = hs256({"org": "acme", "email": "a@acme.io", "ragmesh_role": "admin", "teams": ["risk"],
                   "exp": int(time.time()) + 60})
    assert verifier.verify(token) == Identity("acme", "a@acme.io", ADMIN, "jwt", ("risk",))
    fails(verifier.verify, hs256(claims()), match="org")
    other = hs256({"org": "acme", "email": "a@acme.io", "groups": ["risk"], "exp": int(time.time()) + 60})
    assert verifier.verify(other).groups == (), "only the configured claim names groups"
    fails(verifier.verify, hs256({"org": "acme", "email": "a", "teams": "risk", "exp": int(time.time()) + 60}),
          match="'teams'")


def test_the_groups_claim_names_the_identitys_groups(tmp_path: Path) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_secret=SECRET))
    assert verifier.verify(hs256(claims(groups=["risk", "research", "risk"]))).groups == ("research", "risk")
    assert verifier.verify(hs256(claims(groups=[]))).groups == ()
    assert verifier.verify(hs256(claims())).groups == (), "no claim: no groups"


def test_no_jwt_configuration_accepts_no_jwt(tmp_path: Path) -> None:
    verifier = JwtVerifier(make_settings(tmp_path))
    assert not verifier.configured
    fails(verifier.verify, hs256(claims()), match="not accepted")


# -- JWT: public key and JWKS ------------------------------------------------------------------
@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def public_pem(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def test_rs256_with_a_public_key_as_text_or_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    pem = public_pem(rsa_key)
    path = tmp_path / "jwt.pub"
    path.write_text(pem)
    token = jwt.encode(claims(role="admin"), rsa_key, algorithm="RS256")
    for configured in (pem, str(path)):
        verifier = JwtVerifier(make_settings(tmp_path, jwt_public_key=configured))
        assert verifier.verify(token) == Identity("acme", "alice", ADMIN, "jwt")
        fails(verifier.verify, jwt.encode(claims(), rsa.generate_private_key(public_exponent=65537, key_size=2048),
                                          algorithm="RS256"))
        fails(verifier.verify, jwt.encode(claims(exp=int(time.time()) - 120), rsa_key, algorithm="RS256"),
              match="expired")
        # Algorithm confusion: an HS256 token whose HMAC key is the public key itself.
        header = _b64(b'{"alg":"HS256","typ":"JWT"}')
        body = _b64(json.dumps(claims(role="admin")).encode())
        signature = _b64(hmac.new(pem.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest())
        fails(verifier.verify, f"{header}.{body}.{signature}")


def test_a_token_for_another_key_type_is_unauthenticated_not_a_crash(tmp_path: Path,
                                                                     rsa_key: rsa.RSAPrivateKey) -> None:
    """An ES256 token against an RSA public key: PyJWT raises InvalidKeyError, which is no
    InvalidTokenError; it must still come out as Unauthenticated (401), not an internal error."""
    verifier = JwtVerifier(make_settings(tmp_path, jwt_public_key=public_pem(rsa_key)))
    other = jwt.encode(claims(role="admin"), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
    fails(verifier.verify, other)


class Jwks:
    """A JWKS endpoint on 127.0.0.1, counting how often it is fetched."""

    def __init__(self, jwks: dict) -> None:
        self.jwks = jwks
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.hits += 1
                body = json.dumps(outer.jwks).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks(rsa_key: rsa.RSAPrivateKey) -> Iterator[Jwks]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    server = Jwks({"keys": [jwk | {"kid": "k1", "use": "sig", "alg": "RS256"}]})
    yield server
    server.close()


def test_jwks(tmp_path: Path, jwks: Jwks, rsa_key: rsa.RSAPrivateKey) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_jwks_url=jwks.url, jwt_audience="ragmesh"))
    token = jwt.encode(claims(aud="ragmesh"), rsa_key, algorithm="RS256", headers={"kid": "k1"})
    assert verifier.verify(token) == Identity("acme", "alice", MEMBER, "jwt")
    assert jwks.hits >= 1
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    # The right kid, the wrong key: a bad signature.
    fails(verifier.verify, jwt.encode(claims(aud="ragmesh"), stranger, algorithm="RS256", headers={"kid": "k1"}))
    # A kid the endpoint does not publish.
    fails(verifier.verify, jwt.encode(claims(aud="ragmesh"), stranger, algorithm="RS256", headers={"kid": "k2"}),
          match="signing key")
    fails(verifier.verify, jwt.encode(claims(aud="other"), rsa_key, algorithm="RS256", headers={"kid": "k1"}))
    fails(verifier.verify, jwt.encode(claims(aud="ragmesh"), None, algorithm="none", headers={"kid": "k1"}))
    fails(verifier.verify, hs256(claims(aud="ragmesh"), kid="k1"))


def test_jwks_malformed_token_is_unauthenticated_not_a_crash(tmp_path: Path, jwks: Jwks) -> None:
    verifier = JwtVerifier(make_settings(tmp_path, jwt_jwks_url=jwks.url))
    fails(verifier.verify, "not.a.jwt")
    fails(verifier.verify, "eyJhbGciOiJSUzI1NiJ9.e30.")


def test_jwks_unreachable_is_unauthenticated(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    server = Jwks({"keys": []})
    url = server.url
    server.close()
    verifier = JwtVerifier(make_settings(tmp_path, jwt_jwks_url=url))
    fails(verifier.verify, jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "k1"}))


# -- Authenticator -----------------------------------------------------------------------------
class Keys:
    """A real SQLite store under tmp_path behind the LazyStore the services use, and keys in it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = LazyStore(settings)
        self.store.connect()
        self.pepper = pepper(settings)

    def make(self, tenant: str, user: str, role: str = MEMBER, groups: tuple[str, ...] = (),
             **record_overrides: str) -> str:
        key, record = keys.new_key(self.pepper, tenant, user, role, groups=groups)
        self.store.add_api_key(dataclasses.replace(record, **record_overrides))
        return key

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, jwt_secret=SECRET)


@pytest.fixture
def made(settings: Settings) -> Iterator[Keys]:
    found = Keys(settings)
    yield found
    found.close()


def auth(authenticator: Authenticator, metadata: dict, certified: bool = False) -> Identity:
    return asyncio.run(authenticator.authenticate(metadata, certified))


def header(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_users_accept_valid_keys_and_jwts(settings: Settings, made: Keys) -> None:
    users = Authenticator(settings, LazyStore(settings), "users")  # its own, not yet connected, store
    alice = made.make("acme", "alice")
    root = made.make("acme", "root", ADMIN)
    assert auth(users, header(alice)) == Identity("acme", "alice", MEMBER, "key")
    assert auth(users, header(root)) == Identity("acme", "root", ADMIN, "key")
    assert auth(users, header(hs256(claims(tenant="umbra", sub="bob")))) == Identity("umbra", "bob", MEMBER, "jwt")
    # Tenant headers from a user are ignored: the key decides.
    assert auth(users, header(alice) | {"x-ragmesh-tenant": "umbra", "x-ragmesh-user": "x"}).tenant == "acme"


def test_groups_come_from_the_key_record_or_the_token_never_from_headers(settings: Settings, made: Keys) -> None:
    users = Authenticator(settings, made.store, "users")
    researcher = made.make("acme", "alice", groups=("research", "risk"))
    plain = made.make("acme", "bob")
    assert auth(users, header(researcher)) == Identity("acme", "alice", MEMBER, "key", ("research", "risk"))
    assert auth(users, header(plain)).groups == ()
    assert auth(users, header(hs256(claims(groups=["hr"])))).groups == ("hr",)
    smuggled = {"x-ragmesh-groups": "hr,board", "x-ragmesh-user": "carol"}
    assert auth(users, header(plain) | smuggled) == Identity("acme", "bob", MEMBER, "key")
    assert auth(users, header(hs256(claims())) | smuggled).groups == ()
    # An admin key at an internal service: its own groups, not the metadata's.
    internal = Authenticator(settings, made.store, "internal")
    admin = made.make("acme", "root", ADMIN, groups=("ops",))
    assert auth(internal, header(admin) | smuggled).groups == ("ops",)
    # The service credential says on whose behalf it calls, groups included.
    on_behalf = auth(internal, header(service_token(settings)) | {"x-ragmesh-tenant": "acme",
                                                                  "x-ragmesh-user": "alice",
                                                                  "x-ragmesh-role": MEMBER,
                                                                  "x-ragmesh-groups": "research,risk"})
    assert on_behalf.groups == ("research", "risk")


def test_users_refuse_revoked_expired_wrong_and_missing_credentials(settings: Settings, made: Keys) -> None:
    users = Authenticator(settings, made.store, "users")
    revoked = made.make("acme", "alice")
    assert auth(users, header(revoked)).user == "alice"
    assert made.store.revoke_api_key(keys.parse(revoked)[0])
    expired = made.make("acme", "bob", expires_at="2020-01-01T00:00:00+00:00")
    live = made.make("acme", "carol")
    live_id = keys.parse(live)[0]
    wrong_secret = f"rmk_{live_id}_{'A' * 43}"
    unknown_id = f"rmk_{'0' * 16}_{keys.parse(live)[1]}"
    other_pepper, record = keys.new_key("another-pepper", "acme", "dave", ADMIN)
    made.store.add_api_key(record)
    for token in (revoked, expired, wrong_secret, unknown_id, other_pepper):
        with pytest.raises(Unauthenticated, match="invalid API key"):
            auth(users, header(token))
    for token in ("rmk_garbage", live + "x", "garbage", "a.b", hs256(claims(), secret="x" * 40)):
        with pytest.raises(Unauthenticated):
            auth(users, header(token))
    for metadata in ({}, {"authorization": ""}, {"authorization": live}, {"authorization": f"Basic {live}"}):
        with pytest.raises(Unauthenticated, match="missing credential"):
            auth(users, metadata)
    assert auth(users, header(live)).user == "carol", "the live key still works"


def test_users_refuse_the_service_token(settings: Settings, made: Keys) -> None:
    users = Authenticator(settings, made.store, "users")
    token = service_token(settings)
    with pytest.raises(Unauthenticated):
        auth(users, header(token) | {"x-ragmesh-tenant": "acme", "x-ragmesh-user": "alice"})
    # ...and a certificate means nothing to the gateway's users audience.
    with pytest.raises(Unauthenticated):
        auth(users, {"x-ragmesh-tenant": "acme"}, certified=True)


def test_internal_accepts_the_service_token_for_the_named_tenant(settings: Settings, made: Keys) -> None:
    internal = Authenticator(settings, made.store, "internal")
    token = service_token(settings)
    found = auth(internal, header(token) | {"x-ragmesh-tenant": "acme", "x-ragmesh-user": "alice"})
    assert found == Identity("acme", "alice", SERVICE, "service_token") and found.is_service
    assert auth(internal, header(token) | {"x-ragmesh-tenant": "acme", "x-ragmesh-user": "alice",
                                           "x-ragmesh-role": MEMBER}).role == MEMBER
    nameless = auth(internal, header(token))
    assert nameless.tenant == "" and nameless.is_service
    with pytest.raises(PermissionDenied):
        nameless.require_tenant()
    with pytest.raises(Unauthenticated):
        auth(internal, header(token[:-1] + ("A" if token[-1] != "A" else "B")))
    with pytest.raises(Unauthenticated, match="missing credential"):
        auth(internal, {"x-ragmesh-tenant": "acme"})


def test_internal_accepts_admin_keys_and_refuses_members(settings: Settings, made: Keys) -> None:
    internal = Authenticator(settings, made.store, "internal")
    admin = made.make("acme", "root", ADMIN)
    member = made.make("acme", "alice")
    # An admin key acts in its own tenant, whatever the metadata says.
    found = auth(internal, header(admin) | {"x-ragmesh-tenant": "umbra"})
    assert found == Identity("acme", "root", ADMIN, "key") and not found.is_service
    with pytest.raises(PermissionDenied):
        auth(internal, header(member))
    with pytest.raises(PermissionDenied):
        auth(internal, header(hs256(claims())))
    assert auth(internal, header(hs256(claims(role="admin")))) == Identity("acme", "alice", ADMIN, "jwt")
    revoked = made.make("acme", "old-root", ADMIN, revoked_at="2024-01-01T00:00:00Z")
    with pytest.raises(Unauthenticated):
        auth(internal, header(revoked))


def test_internal_takes_a_verified_certificate_as_the_service(settings: Settings, made: Keys) -> None:
    internal = Authenticator(settings, made.store, "internal")
    found = auth(internal, {"x-ragmesh-tenant": "acme", "x-ragmesh-user": "alice"}, certified=True)
    assert found == Identity("acme", "alice", SERVICE, "certificate") and found.is_service
    with pytest.raises(Unauthenticated, match="missing credential"):
        auth(internal, {"x-ragmesh-tenant": "acme"}, certified=False)
    # A certified peer that also sends a credential is judged by the credential.
    member = made.make("acme", "alice")
    with pytest.raises(PermissionDenied):
        auth(internal, header(member), certified=True)
    with pytest.raises(Unauthenticated):
        auth(internal, header("garbage"), certified=True)


# -- settings a service refuses ----------------------------------------------------------------
def test_secrets_are_made_once_on_loopback(tmp_path: Path) -> None:
    s = make_settings(tmp_path)
    token, pep = service_token(s), pepper(s)
    assert len(token) >= 40 and len(pep) >= 40 and token != pep
    assert service_token(s) == token and pepper(make_settings(tmp_path)) == pep, "made once, then read"
    for name in ("service_token", "pepper"):
        mode = stat.S_IMODE((tmp_path / "secrets" / name).stat().st_mode)
        assert mode == 0o600, oct(mode)
    assert service_token(make_settings(tmp_path, service_token="from-env")) == "from-env"
    assert pepper(make_settings(tmp_path, api_key_pepper="pep-env")) == "pep-env"


def test_a_shared_store_needs_an_explicit_pepper(tmp_path: Path) -> None:
    s = make_settings(tmp_path, mongodb_uri="mongodb://db.example:27017")
    with pytest.raises(ConfigError, match="API_KEY_PEPPER"):
        pepper(s)
    with pytest.raises(ConfigError, match="API_KEY_PEPPER"):
        Authenticator(s, LazyStore(s), "users")
    assert pepper(s.replace(api_key_pepper="shared")) == "shared"
    assert not (tmp_path / "secrets" / "pepper").exists()


def test_a_public_bind_needs_an_explicit_service_token_and_pepper(tmp_path: Path) -> None:
    s = make_settings(tmp_path, host="0.0.0.0")
    with pytest.raises(ConfigError, match="SERVICE_TOKEN"):
        service_token(s)
    with pytest.raises(ConfigError, match="API_KEY_PEPPER"):
        pepper(s)
    with pytest.raises(ConfigError, match="SERVICE_TOKEN"):
        Authenticator(s.replace(api_key_pepper="p"), LazyStore(s), "internal")
    # The gateway's users audience needs no service token to authenticate users.
    Authenticator(s.replace(api_key_pepper="p"), LazyStore(s), "users")
    assert service_token(s.replace(service_token="tok")) == "tok"
    assert not (tmp_path / "secrets" / "service_token").exists()


def test_tls_check(tmp_path: Path) -> None:
    public = make_settings(tmp_path, host="0.0.0.0")
    with pytest.raises(ValueError, match="TLS_CERT") as err:
        tls.check(public)
    assert "0.0.0.0" in str(err.value)
    tls.check(public.replace(allow_plaintext=True))
    tls.check(public.replace(tls_cert="c.pem", tls_key="k.pem"))
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        tls.check(make_settings(tmp_path, host=host))
    with pytest.raises(ValueError, match="TLS_CERT"):
        tls.check(make_settings(tmp_path, host="10.0.0.5"))
    with pytest.raises(ValueError, match="together"):
        tls.check(make_settings(tmp_path, tls_cert="c.pem"))
    with pytest.raises(ValueError, match="TLS_CA"):
        tls.check(make_settings(tmp_path, tls_ca="ca.pem"))
    with pytest.raises(ValueError, match="TLS_KEY=.*cannot read"):
        tls.server_credentials(make_settings(tmp_path, tls_cert=str(tmp_path / "c.pem"),
                                             tls_key=str(tmp_path / "missing.pem")), True)
    assert tls.server_credentials(make_settings(tmp_path), True) is None
    assert tls.channel_credentials(make_settings(tmp_path)) is None


@pytest.mark.parametrize("user", ["alice", "zoë", "李雷", "a%20b", "o'brien/x y", ""])
def test_the_identity_crosses_a_hop_intact_in_ascii_metadata(user: str) -> None:
    """gRPC metadata values are printable ASCII; tenant and user names need not be."""
    sent = Identity("acmé", user, "member", "key").headers()
    assert all(value.isascii() and value.isprintable() for _, value in sent)
    got = Identity.on_behalf_of(dict(sent), "service_token")
    assert (got.tenant, got.user, got.role, got.via) == ("acmé", user, "member", "service_token")


def test_groups_cross_a_hop_intact() -> None:
    sent = Identity("acme", "alice", MEMBER, "jwt", ("a.b", "research", "x@y", "z_1-2")).headers()
    assert Identity.on_behalf_of(dict(sent), "certificate").groups == ("a.b", "research", "x@y", "z_1-2")
    assert Identity.on_behalf_of(dict(Identity("acme", "bob", MEMBER, "key").headers()), "certificate").groups == ()
