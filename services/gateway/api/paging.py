"""The page of a list (conversations, documents) as its query parameters declare it: the same bounds
ragmesh.validation.check_page holds the gRPC edge to."""
from __future__ import annotations

from typing import Annotated

from fastapi import Query

from ragmesh.validation import MAX_OFFSET, MAX_PAGE

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1..{MAX_PAGE})")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Skip this many (the previous page's next_offset)")]
