"""`ragmesh keys` as a subprocess on the stack's own store and pepper (its DATA_DIR): a created key
is printed once, listed without its secret (with its groups), accepted by the retriever for its role,
and refused as soon as it is revoked."""
from __future__ import annotations

import datetime as dt
import re

import grpc
import pytest

from ragmesh.identity import keys
from ragmesh.identity.authenticator import pepper
from ragmesh.store.lazy import LazyStore
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.integration.test_ingest_cli import ragmesh
from tests.stack import Stack

KEY = re.compile(r"rmk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}")


def create(stack: Stack, *args: str) -> tuple[str, str]:
    """(key, key id) of `ragmesh keys create ARGS`, checking the key is alone on the last line."""
    made = ragmesh(stack, "keys", "create", *args)
    assert made.returncode == 0, made.stderr
    key = made.stdout.splitlines()[-1]
    assert KEY.fullmatch(key), made.stdout
    key_id = key.split("_")[1]
    assert key_id in made.stdout + made.stderr  # the description names the key's id
    return key, key_id


def listed(stack: Stack, *args: str) -> dict[str, dict[str, str]]:
    """The rows of `ragmesh keys list ARGS` by key id, each {column: value}, cut where the header's
    columns start (a table for people: its cells may hold spaces)."""
    shown = ragmesh(stack, "keys", "list", *args)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \(UTC\))?", header)]
    names = [header[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    assert names == ["ID", "TENANT", "USER", "ROLE", "GROUPS", "CREATED (UTC)", "EXPIRES (UTC)", "STATUS", "LABEL"]
    table = [{n: row[a:b].strip() for n, a, b in zip(names, starts, starts[1:] + [None])} for row in rows]
    return {row["ID"]: row for row in table}


def search(stack: Stack, key: str) -> retriever_pb2.SearchResponse:
    with channel(stack.address("retriever"), bearer(key)) as chan:
        return retriever_pb2_grpc.RetrieverStub(chan).Search(
            retriever_pb2.SearchRequest(query="vacation policy", top_k=5), timeout=10)


def refusal(stack: Stack, key: str) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        search(stack, key)
    return caught.value.code()


def test_create_list_use_and_revoke(stack: Stack) -> None:
    key, key_id = create(stack, "--tenant", "demo", "--user", "keys-cli", "--role", "admin", "--label", "ci")
    row = listed(stack)[key_id]
    assert (row["TENANT"], row["USER"], row["ROLE"], row["GROUPS"], row["STATUS"], row["LABEL"]) == (
        "demo", "keys-cli", "admin", "-", "live", "ci")
    assert row["EXPIRES (UTC)"] == "never"
    shown = ragmesh(stack, "keys", "list").stdout
    secret = key.split("_", 2)[2]
    assert key not in shown and secret not in shown
    assert keys.hash_secret(pepper(stack.settings), secret) not in shown

    assert search(stack, key).hits  # an admin key of DEMO searches DEMO's corpus

    member, member_id = create(stack, "--tenant", "demo", "--user", "reader")  # member by default
    assert listed(stack, "--tenant", "demo")[member_id]["ROLE"] == "member"
    assert refusal(stack, member) == grpc.StatusCode.PERMISSION_DENIED

    revoked = ragmesh(stack, "keys", "revoke", key_id)
    assert revoked.returncode == 0 and key_id in revoked.stdout, revoked.stderr
    assert refusal(stack, key) == grpc.StatusCode.UNAUTHENTICATED
    assert listed(stack)[key_id]["STATUS"] == "revoked"
    again = ragmesh(stack, "keys", "revoke", key_id)
    assert again.returncode == 1 and "no live key" in again.stderr
    unknown = ragmesh(stack, "keys", "revoke", "0123456789abcdef")
    assert unknown.returncode == 1 and "no live key" in unknown.stderr


def test_expiry_and_tenant_filter_show_in_list(stack: Stack) -> None:
    before = dt.datetime.now(dt.timezone.utc)
    _, key_id = create(stack, "--tenant", "acme", "--user", "temp", "--expires-days", "30")
    after = dt.datetime.now(dt.timezone.utc)
    acme = listed(stack, "--tenant", "acme")
    row = acme[key_id]
    assert (row["TENANT"], row["USER"], row["ROLE"], row["STATUS"]) == ("acme", "temp", "member", "live")
    expires = dt.datetime.strptime(row["EXPIRES (UTC)"], "%Y-%m-%d %H:%M").replace(tzinfo=dt.timezone.utc)
    assert before + dt.timedelta(days=30, minutes=-1) <= expires <= after + dt.timedelta(days=30)
    assert {r["TENANT"] for r in acme.values()} == {"acme"}
    _, forever = create(stack, "--tenant", "acme", "--user", "always")
    assert listed(stack, "--tenant", "acme")[forever]["EXPIRES (UTC)"] == "never"
    assert key_id not in listed(stack, "--tenant", "demo")


def test_groups_are_the_keys_own_listed_and_sent_on(stack: Stack) -> None:
    key, key_id = create(stack, "--tenant", "demo", "--user", "grouped", "--role", "admin",
                         "--groups", " risk,research , risk", "--groups", "risk")
    assert listed(stack, "--tenant", "demo")[key_id]["GROUPS"] == "research,risk"
    _, none_id = create(stack, "--tenant", "demo", "--user", "ungrouped", "--groups", "")
    assert listed(stack, "--tenant", "demo")[none_id]["GROUPS"] == "-"
    record = LazyStore(stack.settings)
    record.connect()
    try:
        assert record.api_key(key_id).groups == ("research", "risk")
    finally:
        record.close()
    assert search(stack, key).hits, "a key with groups authenticates like any other"


def test_bad_names_roles_and_settings_exit_2(stack: Stack) -> None:
    count = len(listed(stack))
    role = ragmesh(stack, "keys", "create", "--tenant", "demo", "--user", "x", "--role", "owner")
    assert role.returncode == 2 and "--role" in role.stderr and "owner" in role.stderr
    tenant = ragmesh(stack, "keys", "create", "--tenant", "no spaces", "--user", "x")
    assert tenant.returncode == 2 and "tenant: must be" in tenant.stderr
    user = ragmesh(stack, "keys", "create", "--tenant", "demo", "--user", "")
    assert user.returncode == 2 and "user: must be" in user.stderr
    negative = ragmesh(stack, "keys", "create", "--tenant", "demo", "--user", "x", "--expires-days", "-1")
    assert negative.returncode == 2 and "expires_days" in negative.stderr
    too_many = ",".join(f"g{i}" for i in range(101))
    groups = [ragmesh(stack, "keys", "create", "--tenant", "demo", "--user", "x", "--groups", bad)
              for bad in ("research,risk/board", "a b", "-lead", too_many)]
    for refused in groups:
        assert refused.returncode == 2 and "groups: " in refused.stderr, refused.stderr
    # A shared store needs the pepper every service uses: refused before the store is touched.
    shared = ragmesh(stack, "keys", "create", "--tenant", "demo", "--user", "x", MONGODB_URI="mongodb://127.0.0.1:1")
    assert shared.returncode == 2 and "API_KEY_PEPPER" in shared.stderr
    assert not any(KEY.search(r.stdout) for r in (role, tenant, user, negative, shared, *groups))
    assert len(listed(stack)) == count
