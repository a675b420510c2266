"""A throttle's use on PostgreSQL: one ``INSERT ... ON CONFLICT DO UPDATE``.

The clock is ``clock_timestamp()``, read in the ``DO UPDATE``'s sub-select,
which runs once the key's row is locked: ``now()`` (the statement's start)
could be earlier than the time of a use that committed while this one waited.
The sub-select reads it once, in a subquery of its own, and decides there
(``rules.throttle``); the ``SET`` writes every column from that one row.
"""

from __future__ import annotations

from django_dlock.backends.throttles import ThrottleUses
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
