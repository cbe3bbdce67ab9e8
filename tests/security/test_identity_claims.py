"""JWT claims, tried as an attacker would who can get a token signed (an identity provider that lets
users edit a profile attribute mapped to the tenant claim): a tenant of `acme/documents`, one with a
newline, a list, a 500-character name used to be accepted, while an API key's fields are checked.
Now claims pass the key fields' rule, and no refusal shows a Python object (an ES256 token against
an RSA key used to answer "Expected one of <generator object ...>")."""
from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ragmesh.errors import Unauthenticated
from ragmesh.identity.tokens import JwtVerifier
from tests.fakes.serving import settings

SECRET = "a-shared-secret-of-at-least-32-bytes!"


def token(**claims: object) -> str:
    return jwt.encode({"tenant": "acme", "sub": "alice", "exp": int(time.time()) + 60} | claims, SECRET,
                      algorithm="HS256")


@pytest.mark.parametrize("claim, value", [
    ("tenant", "acme/documents"), ("tenant", "acme\n"), ("tenant", "acme\nlevel=admin"), ("tenant", "x" * 129),
    ("tenant", ["acme", "umbra"]), ("tenant", {"name": "acme"}), ("tenant", 42), ("tenant", ".hidden"),
    ("sub", "alice bob"), ("sub", "alice\r\n"), ("sub", "../alice"), ("sub", ["alice"]),
])
def test_a_tenant_or_user_claim_a_key_could_not_carry_is_refused(claim: str, value: object) -> None:
    verifier = JwtVerifier(settings(jwt_secret=SECRET))
    with pytest.raises(Unauthenticated) as refused:
        verifier.verify(token(**{claim: value}))
    message = str(refused.value)
    assert repr(value) not in message and f"claim {claim!r}" in message, message


def test_a_valid_token_still_names_its_tenant_and_user() -> None:
    identity = JwtVerifier(settings(jwt_secret=SECRET)).verify(token(tenant="acme-2.eu", sub="alice@acme.io"))
    assert (identity.tenant, identity.user) == ("acme-2.eu", "alice@acme.io")


def refusal(verifier: JwtVerifier, presented: str) -> str:
    with pytest.raises(Unauthenticated) as refused:
        verifier.verify(presented)
    return str(refused.value)


def plain(message: str) -> bool:
    """A sentence, not an object: no reprs, no addresses."""
    return "<" not in message and "object at 0x" not in message and "Expected one of" not in message


def test_every_token_refusal_is_a_plain_sentence(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    public = JwtVerifier(settings(jwt_public_key=pem))
    es256 = jwt.encode({"tenant": "acme", "sub": "alice", "exp": int(time.time()) + 60},
                       ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
    message = refusal(public, es256)
    assert plain(message) and message == "token: signed with another type of key than this server's", message
    shared = JwtVerifier(settings(jwt_secret=SECRET))
    for presented in (es256, "not.a.jwt", token(exp=int(time.time()) - 600), token(role=["admin"]),
                      jwt.encode({"tenant": "acme", "sub": "a"}, SECRET, algorithm="HS256")):
        assert plain(refusal(shared, presented)), refusal(shared, presented)
    assert refusal(shared, token(role=["admin"])) == "token: claim 'role' must be admin or member"


def test_the_groups_claim_names_the_groups_sorted_once() -> None:
    verifier = JwtVerifier(settings(jwt_secret=SECRET))
    named = verifier.verify(token(groups=["risk", "research", "risk", "a@b.io"]))
    assert named.groups == ("a@b.io", "research", "risk")
    assert verifier.verify(token()).groups == (), "no claim: no groups"
    assert verifier.verify(token(groups=[f"g{i}" for i in range(100)])).groups[-1] == "g99"


@pytest.mark.parametrize("value", [
    "research", "research,risk", None, 7, {"research": True}, ["research", 7], [["research"]], [None],
    ["research", "risk/board"], ["admins\nrole=admin"], [""], ["-x"], ["a,b"], ["x" * 129],
    [f"g{i}" for i in range(101)], [f"g{i:03d}".ljust(128, "x") for i in range(100)],
])
def test_a_groups_claim_a_key_could_not_carry_is_refused(value: object) -> None:
    """A provider that lets users edit the attribute mapped to groups must not let them name a list
    the retriever cannot filter by, a comma that splits into two groups at the next hop, or a thousand."""
    verifier = JwtVerifier(settings(jwt_secret=SECRET))
    message = refusal(verifier, token(groups=value))
    assert message.startswith("token: claim 'groups' ") and plain(message), message
    assert repr(value) not in message and "risk/board" not in message and "admins" not in message, message
