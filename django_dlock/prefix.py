"""Case-sensitive "resource starts with" on every database.

Django's ``startswith`` is ``LIKE``, which SQLite compares case-insensitively
for ASCII letters (``LIKE 'JOB%'`` matches ``job:42``). This module's lookup
keeps ``LIKE`` where it is case-sensitive and, on SQLite, compares a range
instead: the resources that start with ``p`` are exactly those with
``p <= resource < successor(p)`` in code point order, which is the order of
SQLite's default BINARY collation (``memcmp`` of UTF-8). The range can use the
unique index on ``resource``.

- PostgreSQL: ``LIKE`` is case-sensitive whatever the collation (a range would
  not be exact under a linguistic collation, where "job:x" sorts after "job;").
- MariaDB/MySQL: Django's ``startswith`` is ``LIKE BINARY``, case-sensitive
  even under the default case-insensitive collations.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Q
from django.db.models.lookups import StartsWith

# The code points that have no UTF-8 form (surrogates): a successor never lands in them.
_SURROGATES = range(0xD800, 0xE000)


def successor(prefix: str) -> str | None:
    """The smallest string greater, in code point order, than every string that
    starts with ``prefix``; ``None`` when there is none (only U+10FFFF)."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


class CaseSensitiveStartsWith(StartsWith):
    """``lhs`` starts with the string ``rhs``, case-sensitively on every database."""

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs_sql, lhs_params = self.process_lhs(compiler, connection)
        prefix = str(self.rhs)
        upper = successor(prefix)
        if upper is None:
            return f"{lhs_sql} >= %s", [*lhs_params, prefix]
        return (
            f"({lhs_sql} >= %s AND {lhs_sql} < %s)",
            [*lhs_params, prefix, *lhs_params, upper],
        )


def resource_prefix_q(prefix: str, field: str = "resource") -> Q:
    """A filter for rows whose ``field`` starts with ``prefix`` (case-sensitive
    on every database); the empty prefix matches every row."""
    return Q(CaseSensitiveStartsWith(F(field), prefix))
