"""Pages of the lock list: by cursor, ordered by resource."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import pagination, serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from django_dlock.validators import MAX_LENGTH

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class LockCursorPagination(pagination.CursorPagination):
    """Pages of locks ordered by resource: stable while locks come and go, and no
    ``COUNT(*)`` over a large table.

    ``page_size`` follows the rule of every other input of the API, ttl
    included: a value outside 1..1000 is a 400 naming it. (DRF's own
    paginators cap a large one at ``max_page_size`` and ignore one they
    cannot read; either would hide a client's mistake.)
    """

    ordering = "resource"
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        # Digits only: int() would also take " 5", "+5" and "5_0" (and refuse
        # more than 4300 digits).
        if not re.fullmatch(r"[0-9]{1,9}", raw) or not 1 <= int(raw) <= self.max_page_size:
            raise serializers.ValidationError(
                {
                    self.page_size_query_param: [
                        f"A page size must be a whole number from 1 to {self.max_page_size}."
                    ]
                }
            )
        return int(raw)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        # DRF's: next and previous are always sent (null at either end), so
        # required; its example for next ends in a stray quote.
        url = "https://example.com/api/locks?cursor="
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {
                "next": {
                    **link,
                    "description": "The next page; null on the last. Follow it as it is.",
                    "example": f"{url}cD1qb2IlM0E0Mg%3D%3D",
                },
                "previous": {
                    **link,
                    "description": "The page before; null on the first.",
                    "example": f"{url}cj0xJnA9am9iJTNBNDM%3D",
                },
                "results": schema,
            },
        }

    def decode_cursor(self, request: Request) -> Any:
        invalid = serializers.ValidationError({self.cursor_query_param: ["Invalid cursor."]})
        try:
            cursor = super().decode_cursor(request)
        except NotFound:  # DRF answers a bad cursor with 404; it is bad input
            raise invalid from None
        # The position is a resource (the list is ordered by it); a forged one
        # could carry what the database cannot compare with (NUL on PostgreSQL,
        # a lone surrogate). Only that is checked: a name stored before today's
        # rules must still work as a position.
        position = None if cursor is None else cursor.position
        if position is not None and not (isinstance(position, str) and _comparable(position)):
            raise invalid
        return cursor


def _comparable(position: str) -> bool:
    if "\x00" in position or len(position) > MAX_LENGTH:
        return False
    try:
        position.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
