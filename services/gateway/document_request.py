"""Who may read a document, as a client sends it, declared once for both edges: the `access` of an
upload (HTTP `POST /api/documents`, each Document of `Gateway.Ingest`), a document's new access
(`PUT /api/documents/{collection}/{doc_id}/access`, `Gateway.SetDocumentAccess`) and a collection's
rules (`PUT /api/collections/{collection}/access`, `Gateway.SetCollectionAccess`).

The uploader is the owner: an upload never names one; only a change of access may (admins re-assign,
the retriever decides who may). Groups and users are names, never a way to add a group to the caller:
those come from its credential."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, ValidationError

from ragmesh.access import MAX_GROUPS, MAX_USERS, Access
from ragmesh.validation import PRINCIPAL_NAME, invalid_argument
from services.gateway.request import Declared

PrincipalName = Annotated[str, Field(pattern=PRINCIPAL_NAME, max_length=128)]


class AccessRequest(Declared):
    """Who may read a document besides its uploader: named users, named groups, and/or the whole
    tenant (only admins set `tenant`). `{}` is the uploader alone."""

    model_config = ConfigDict(strict=True, extra="forbid")

    users: list[PrincipalName] = Field(default_factory=list, max_length=MAX_USERS, description=(
        f"Users of the tenant who may read it (at most {MAX_USERS}; share with more through a group)"))
    groups: list[PrincipalName] = Field(default_factory=list, max_length=MAX_GROUPS, description=(
        f"Groups (as credentials carry them: a JWT claim, a key's groups) whose users may read it (at most "
        f"{MAX_GROUPS})"))
    tenant: bool = Field(False, description="Every user of the tenant may read it (admin keys only: 403 otherwise)")

    def to_access(self) -> Access:
        return Access.of("", self.users, self.groups, self.tenant)

    @classmethod
    def checked_at(cls, field: str, sent: Mapping[str, Any]) -> Self:
        """The object `sent` where the request has it (`field`, such as "access" or
        "documents[0].access"), refused naming the field under it."""
        try:
            return cls.model_validate(sent)
        except ValidationError as exc:
            raise invalid_argument([{**e, "loc": (*field.split("."), *e["loc"])} for e in exc.errors()]) from None


class AccessChange(AccessRequest):
    """A document's new access: it replaces the old one whole."""

    owner: PrincipalName | None = Field(None, description=(
        "Re-assign the document to this user of the tenant (admin keys only); absent or null: unchanged"))

    def to_access(self) -> Access:
        return Access.of(self.owner or "", self.users, self.groups, self.tenant)


class CollectionAccessRequest(Declared):
    """A collection's rules in the caller's tenant (admin keys): whether members may upload into it,
    and the access a document gets when its upload names none (its uploader always reads it)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    members_upload: bool = Field(description="Members may upload documents into it (admins always may)")
    default_access: AccessRequest = Field(description="A document's access when its upload names none")
