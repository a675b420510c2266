"""The database's clock: every expression and computation of lock time in one place.

Expiry is decided by the database's clock, never by this server's: these are
the expressions the SQL uses for "now", "expired before" and "now plus a
duration", and the one computation of how long a holder has left.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DurationField, Expression, Value
from django.db.models.functions import Now
from django.db.models.sql.compiler import SQLCompiler

from django_dlock.django_private import compile_expression


class DatabaseNow(Now):
    """``Now()`` whose SQLite text compares correctly with stored datetimes.

    SQLite keeps datetimes as text and Django writes them with six fractional
    digits, while ``STRFTIME('%f')`` gives three: "12:00:00.500" sorts before
    "12:00:00.500000", so a lock released at that instant would still look
    valid for the rest of the millisecond. Padding to six digits fixes the order.

    On MySQL, Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)``, in the session's
    time zone, while Django stores datetimes in UTC: ``UTC_TIMESTAMP(6)`` is
    right whatever the server's time zone.
    """

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[str | int, ...]]:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[str | int, ...]]:
        return self.as_sql(
            compiler,
            connection,
            template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW')",
            **extra_context,
        )


def now_plus(duration: timedelta) -> Expression:
    """The database's now plus ``duration``: an expiry ``duration`` from now."""
    return DatabaseNow() + Value(duration, output_field=DurationField())


def expired_before(older_than: float = 0) -> Expression:
    """The database's now minus ``older_than`` seconds: a lock whose ``expires_at``
    is at or before it expired at least that long ago."""
    if not older_than:
        return DatabaseNow()
    return DatabaseNow() - Value(timedelta(seconds=older_than), output_field=DurationField())


def time_left(expires_at: datetime, now: datetime) -> float:
    """Seconds from the database time ``now`` until ``expires_at`` (negative once past)."""
    return (expires_at - now).total_seconds()


def database_now(using: str) -> datetime:
    """The database's clock: one ``SELECT`` of ``DatabaseNow()``, as an aware datetime."""
    connection = connections[using]
    expression = DatabaseNow()
    sql, params = compile_expression(using, expression)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (value,) = cursor.fetchone()
    # SQLite answers with text: the backend's converters make it a datetime.
    for converter in connection.ops.get_db_converters(expression):
        value = converter(value, expression, connection)
    return value  # type: ignore[no-any-return]
