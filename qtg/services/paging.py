"""Keyset paging over (created_at, id): the service side of the API's cursors.

A list ordered by `created_at DESC, id DESC` resumes after the last row it
returned; the cursor is that row's key as text (the API wraps it opaquely,
qtg/api/routing.py). One definition for every list that pages this way.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from qtg.services.errors import InvalidInput


def encode_cursor(row: Mapping[str, Any]) -> str:
    return f"{row['created_at'].isoformat()}|{row['id']}"


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, row_id = cursor.split("|", 1)
        return datetime.fromisoformat(created_at), uuid.UUID(row_id)
    except ValueError:
        raise InvalidInput(
            "cursor is not a cursor this API returned", detail={"field": "cursor"}
        ) from None
