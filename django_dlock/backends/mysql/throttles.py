"""A throttle's use on MariaDB: one ``INSERT ... ON DUPLICATE KEY UPDATE``.

The clock is ``SYSDATE(6)``, read in the first assignment, which runs once the
key's row is locked (``UTC_TIMESTAMP(6)`` is the statement's start, earlier
than a use that committed while this one waited), as microseconds since 1970
(``UNIX_TIMESTAMP`` answers an exact decimal in any session time zone). The
assignments run left to right, each reading the columns as the ones before
left them, so the first decides (``rules.throttle``) on the row as it was and
keeps the decision and the now in session variables for the others.

MariaDB 10.5+ answers with ``INSERT ... RETURNING``: one round trip. Where
there is no ``RETURNING`` (MySQL 8, MariaDB before 10.5; untested), the
``INSERT`` and a ``SELECT`` of the row run in one transaction instead.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_dlock.backends.mysql.prepared import PreparedStatements, Statement
from django_dlock.backends.throttles import ThrottleAnswer, ThrottleUses
from django_dlock.backends.transactions import TransactionHooks
from django_dlock.rules.throttle import WIDTH, granted_sql, kept_sql

__all__ = ["MySQLDialect", "MySQLThrottleUses"]

_NOW_US = "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)"


def _datetime(us: str) -> str:
    """Microseconds since 1970 as a DATETIME(6) in UTC, as Django stores them."""
    return f"TIMESTAMPADD(MICROSECOND, {us}, '1970-01-01')"


class MySQLDialect:
    def count(self, ring: str) -> str:
        return f"(CHAR_LENGTH({ring}) DIV {WIDTH})"

    def entry(self, ring: str, index: str) -> str:
        return f"CAST(SUBSTRING({ring}, {index} * {WIDTH} + 1, {WIDTH}) AS SIGNED)"

    def tail(self, ring: str, index: str) -> str:
        return f"SUBSTRING({ring}, {index} * {WIDTH} + 1)"

    def append(self, ring: str, now_us: str) -> str:
        return f"CONCAT({ring}, LPAD({now_us}, {WIDTH}, '0'))"

    def greatest(self, first: str, second: str) -> str:
        return f"GREATEST({first}, {second})"

    def least(self, first: str, second: str) -> str:
        return f"LEAST({first}, {second})"


class MySQLThrottleUses(ThrottleUses):
    def __init__(self, using: str, hooks: TransactionHooks) -> None:
        super().__init__(using, hooks)
        self._prepared = PreparedStatements()
        self._statements: dict[str, Statement] = {}

    def statement(self, limit: int, period_us: int) -> str:
        c, d = self.c, MySQLDialect()
        period_us = int(period_us)
        granted = granted_sql(d, c["ring"], "@dlock_us", limit, period_us)
        columns = ", ".join(
            c[name] for name in ("key", "slot", "used_at", "free_at", "refused_at", "rate", "ring")
        )
        yes = "@dlock_granted = 1"
        first = d.append("''", "@dlock_us")
        kept = kept_sql(d, c["ring"], "@dlock_us", limit, period_us)
        sql = (
            f"INSERT INTO {self.table} ({columns}) "  # noqa: S608
            # The values are read left to right: the now once, first. (Not
            # INSERT ... SELECT from a derived table: MariaDB would make a
            # temporary table for it at each use.)
            f"VALUES (%(key)s, 0, {_datetime(f'(@dlock_us := {_NOW_US})')}, "
            f"{_datetime(f'@dlock_us + {period_us}')}, NULL, %(rate)s, {first}) "
            f"ON DUPLICATE KEY UPDATE "
            # "> 0" needs the value: the now is read, then the decision made.
            f"{c['refused_at']} = IF((@dlock_us := {_NOW_US}) > 0 "
            f"AND (@dlock_granted := {granted}) = 1, NULL, {_datetime('@dlock_us')}), "
            f"{c['used_at']} = IF({yes}, {_datetime('@dlock_us')}, {c['used_at']}), "
            f"{c['free_at']} = IF({yes}, {_datetime(f'@dlock_us + {period_us}')}, "
            f"{c['free_at']}), "
            f"{c['rate']} = IF({yes}, %(rate)s, {c['rate']}), "
            f"{c['ring']} = IF({yes}, {kept}, {c['ring']})"
        )
        if self._returning:
            return f"{sql} RETURNING {self._answer}"
        return sql

    @property
    def _answer(self) -> str:
        c = self.c
        return f"{c['ring']}, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {c['refused_at']})"

    @property
    def _returning(self) -> bool:
        connection: Any = self.connection  # Django's MySQL DatabaseWrapper
        return bool(connection.mysql_is_mariadb and connection.mysql_version >= (10, 5))

    def _run(self, sql: str, params: dict[str, Any]) -> ThrottleAnswer:
        connection = self.connection
        if not self._returning:
            c = self.c
            read = (
                f"SELECT {self._answer} FROM {self.table} "  # noqa: S608
                f"WHERE {c['key']} = %s AND {c['slot']} = 0"
            )
            with transaction.atomic(using=self.using), connection.cursor() as cursor:
                cursor.execute(sql, params)
                cursor.execute(read, [params["key"]])
                return self.answer(cursor.fetchone())
        if connection.execute_wrappers or connection.queries_logged:
            return super()._run(sql, params)
        # Where nobody watches Django's cursor, prepared on the server from the
        # session's third use of the rate, as ``one_row``'s statements run
        # (``prepared``): parsing it costs MariaDB more than running it. Errors
        # are still Django's, and mark the connection as its cursor would.
        statement = self._statements.get(sql)
        if statement is None:
            name = f"dlock_throttle_{len(self._statements)}"
            statement = self._statements.setdefault(sql, Statement(name, sql))
        connection.ensure_connection()
        with connection.wrap_database_errors:
            row = self._prepared.fetch_one(connection.connection, statement, params)
        return self.answer(row)
