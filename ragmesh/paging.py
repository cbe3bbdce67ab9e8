"""One way to page a list, on every edge: `limit` items after skipping `offset` (checked by
ragmesh.validation.check_page), and a full page says where the next one starts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_PAGE = 50  # items of a page when the request names no limit


@dataclass(frozen=True)
class Page(Generic[T]):
    """A page of a list, newest first, and where the next one starts (None: this was the last)."""

    items: list[T]
    next_offset: int | None


def page(items: list[T], limit: int, offset: int) -> Page[T]:
    """A full page may have a next one; a short one is the last."""
    return Page(items, offset + len(items) if len(items) == limit else None)
