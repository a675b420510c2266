"""A throttle's use on PostgreSQL: one ``INSERT ... ON CONFLICT DO UPDATE``.

The clock is ``clock_timestamp()``, read in the ``DO UPDATE``'s sub-select,
which runs once the key's row is locked: ``now()`` (the statement's start)
could be earlier than the time of a use that committed while this one waited.
The sub-select reads it once, in a subquery of its own, and decides there
(``rules.throttle``); the ``SET`` writes every column from that one row.
"""

from __future__ import annotations

from typing import Any

from django_dlock.backends.postgresql.features import PostgreSQLFeatures
from django_dlock.backends.postgresql.prepared import PreparedStatements, Statement
from django_dlock.backends.throttles import ThrottleAnswer, ThrottleUses
from django_dlock.backends.transactions import TransactionHooks
from django_dlock.django_private import atomic_depth
from django_dlock.rules.throttle import WIDTH, granted_sql, kept_sql

__all__ = ["PostgreSQLDialect", "PostgreSQLThrottleUses"]

# The database's now, read once, and as microseconds since 1970 (extract()
# answers an exact numeric).
_NOW = (
    "(SELECT c.now, (extract(epoch FROM c.now) * 1000000)::bigint AS us "
    "FROM (SELECT clock_timestamp() AS now) c)"
)


class PostgreSQLDialect:
    def count(self, ring: str) -> str:
        return f"(length({ring}) / {WIDTH})"

    def entry(self, ring: str, index: str) -> str:
        return f"substr({ring}, {index} * {WIDTH} + 1, {WIDTH})::bigint"

    def tail(self, ring: str, index: str) -> str:
        return f"substr({ring}, {index} * {WIDTH} + 1)"

    def append(self, ring: str, now_us: str) -> str:
        return f"({ring} || lpad(({now_us})::text, {WIDTH}, '0'))"

    def greatest(self, first: str, second: str) -> str:
        return f"GREATEST({first}, {second})"

    def least(self, first: str, second: str) -> str:
        return f"LEAST({first}, {second})"


class PostgreSQLThrottleUses(ThrottleUses):
    """Runs prepared (``prepared``): parsing and planning the statement costs
    the server several times what running it does."""

    def __init__(self, using: str, hooks: TransactionHooks) -> None:
        super().__init__(using, hooks)
        self._prepared = PreparedStatements(using)
        self._statements: dict[str, Statement] = {}
        # The PREPARE is built for psycopg 3's client-side binding, as the lock
        # operations' (PostgreSQLFeatures.one_statement): with server-side
        # binding, or psycopg 2, the statement runs as it is, unprepared.
        self._prepares = PostgreSQLFeatures(using).one_statement

    def _run(self, sql: str, params: dict[str, Any]) -> ThrottleAnswer:
        # As the lock operations run theirs (PostgreSQLBackend._one_row):
        # Django's cursor where the query log or an execute wrapper watches,
        # plain SQL inside Django's TestCase transaction.
        connection = self.connection
        statement = self._statements.get(sql)
        if statement is None:
            name = f"throttle_{len(self._statements)}"
            statement = self._statements.setdefault(sql, Statement(name, sql))
        in_test_transaction = atomic_depth(connection) > 0
        plain = in_test_transaction or not self._prepares
        if plain or connection.execute_wrappers or connection.queries_logged:
            with connection.cursor() as cursor:
                if plain:
                    cursor.execute(sql, params)
                else:
                    self._prepared.execute(cursor, connection.connection, statement, params)
                return self.answer(cursor.fetchone())
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors, raw.cursor() as cursor:
            self._prepared.execute(cursor, raw, statement, params)
            return self.answer(cursor.fetchone())

    def statement(self, limit: int, period_us: int) -> str:
        c, d = self.c, PostgreSQLDialect()
        period = f"{int(period_us)} * interval '1 microsecond'"
        ring = f"s.{c['ring']}"
        granted = granted_sql(d, ring, "n.us", limit, period_us)
        kept = kept_sql(d, ring, "d.us", limit, period_us)
        first = d.append("''", "n.us")
        columns = ", ".join(
            c[name] for name in ("key", "slot", "used_at", "free_at", "refused_at", "rate", "ring")
        )
        updated = ", ".join(
            c[name] for name in ("used_at", "free_at", "refused_at", "rate", "ring")
        )
        return (
            f"INSERT INTO {self.table} AS s ({columns}) "  # noqa: S608
            f"SELECT %(key)s, 0, n.now, n.now + {period}, NULL, %(rate)s, "
            f"{first} FROM {_NOW} n "
            f"ON CONFLICT ({c['key']}, {c['slot']}) DO UPDATE SET ({updated}) = ("
            f"SELECT CASE WHEN d.g = 1 THEN d.now ELSE s.{c['used_at']} END, "
            f"CASE WHEN d.g = 1 THEN d.now + {period} ELSE s.{c['free_at']} END, "
            f"CASE WHEN d.g = 1 THEN NULL ELSE d.now END, "
            f"CASE WHEN d.g = 1 THEN EXCLUDED.{c['rate']} ELSE s.{c['rate']} END, "
            f"CASE WHEN d.g = 1 THEN {kept} ELSE {ring} END "
            f"FROM (SELECT n.now, n.us, {granted} AS g FROM {_NOW} n) d) "
            f"RETURNING s.{c['ring']}, "
            f"(extract(epoch FROM s.{c['refused_at']}) * 1000000)::bigint"
        )
