"""The database's clock as a torture process reads it, beside the lock calls:
before an operator's force-release (the lock-delay of a hold it released runs
from a moment no earlier), and around a waiter's queuing (its ticket's time)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connections

# The lock tables' clock, as the library reads it (SQLite: milliseconds).
_NOW_SQL = {
    "postgresql": "SELECT clock_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "sqlite": "SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'now')",
}


def database_now() -> str:
    """The database's clock now, as an aware ISO string (UTC)."""
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute(_NOW_SQL[connection.vendor])
        value = cursor.fetchone()[0]
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return str(value.isoformat())
