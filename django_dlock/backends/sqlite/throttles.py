"""A throttle's use on SQLite: one ``INSERT ... ON CONFLICT DO UPDATE ...
RETURNING`` (SQLite 3.35+).

The statement holds the database's write lock from its start, and SQLite's
``'now'`` is one value for the whole statement, read once the lock is held:
every expression below reads the same now. The ``SET`` expressions read the
row as it was; ``RETURNING`` reads it as written. Times are the host's clock
to the millisecond, as ``DatabaseNow`` reads it (stored with six digits).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django_dlock.backends.throttles import ThrottleAnswer, ThrottleUses
from django_dlock.backends.transactions import TransactionHooks
from django_dlock.rules.throttle import WIDTH, granted_sql, kept_sql, microseconds

__all__ = ["SQLiteDialect", "SQLiteThrottleUses"]

# Written for a cursor with parameters: a literal % is doubled.
_NOW_US = (
    "(CAST(strftime('%%s', 'now') AS INTEGER) * 1000000 "
    "+ CAST(substr(strftime('%%f', 'now'), 4) AS INTEGER) * 1000)"
)
_TEXT = "strftime('%%Y-%%m-%%d %%H:%%M:%%f000', 'now'{})"
_ZEROS = "0" * WIDTH


class SQLiteDialect:
    def count(self, ring: str) -> str:
        return f"(length({ring}) / {WIDTH})"

    def entry(self, ring: str, index: str) -> str:
        return f"CAST(substr({ring}, {index} * {WIDTH} + 1, {WIDTH}) AS INTEGER)"

    def tail(self, ring: str, index: str) -> str:
        return f"substr({ring}, {index} * {WIDTH} + 1)"

    def append(self, ring: str, now_us: str) -> str:
        return f"({ring} || substr('{_ZEROS}' || ({now_us}), -{WIDTH}))"

    def greatest(self, first: str, second: str) -> str:
        return f"max({first}, {second})"

    def least(self, first: str, second: str) -> str:
        return f"min({first}, {second})"


class SQLiteThrottleUses(ThrottleUses):
    def __init__(self, using: str, hooks: TransactionHooks) -> None:
        super().__init__(using, hooks)
        self._driver_sql: dict[str, str] = {}

    def _run(self, sql: str, params: dict[str, Any]) -> ThrottleAnswer:
        connection = self.connection
        if connection.execute_wrappers or connection.queries_logged:
            return super()._run(sql, params)
        # Where nobody watches Django's cursor, the driver's own runs the
        # statement in its named style: Django's would rewrite the statement's
        # text at each use (its placeholders and each doubled %), which costs
        # the client as much as SQLite's work. Errors are still Django's.
        driver_sql = self._driver_sql.get(sql)
        if driver_sql is None:
            named = sql.replace("%(key)s", ":key").replace("%(rate)s", ":rate")
            driver_sql = self._driver_sql.setdefault(sql, named.replace("%%", "%"))
        connection.ensure_connection()
        with connection.wrap_database_errors:
            row = connection.connection.execute(driver_sql, params).fetchone()
        return self.answer(row)

    def refused_us(self, refused: Any) -> int:
        # The refusal's time as stored: text, from the same now as the kept
        # times. (Not "CASE WHEN refused_at IS NULL" in RETURNING: SQLite
        # 3.40 answers that from the row before its DO UPDATE.)
        # (The driver parses it where it knows the column's declared type.)
        moment = refused if isinstance(refused, datetime) else datetime.fromisoformat(refused)
        return microseconds(moment.replace(tzinfo=UTC))

    def statement(self, limit: int, period_us: int) -> str:
        c, d, table = self.c, SQLiteDialect(), self.table
        ring = f"{table}.{c['ring']}"
        granted = f"{granted_sql(d, ring, _NOW_US, limit, period_us)} = 1"
        now, free = _TEXT.format(""), _TEXT.format(f", '+{int(period_us) // 1000000} seconds'")
        columns = ", ".join(
            c[name] for name in ("key", "slot", "used_at", "free_at", "refused_at", "rate", "ring")
        )
        first = d.append("''", _NOW_US)
        return (
            f"INSERT INTO {table} ({columns}) "  # noqa: S608
            f"VALUES (%(key)s, 0, {now}, {free}, NULL, %(rate)s, {first}) "
            f"ON CONFLICT ({c['key']}, {c['slot']}) DO UPDATE SET "
            f"{c['used_at']} = CASE WHEN {granted} THEN {now} ELSE {c['used_at']} END, "
            f"{c['free_at']} = CASE WHEN {granted} THEN {free} ELSE {c['free_at']} END, "
            f"{c['refused_at']} = CASE WHEN {granted} THEN NULL ELSE {now} END, "
            f"{c['rate']} = CASE WHEN {granted} THEN excluded.{c['rate']} ELSE {c['rate']} END, "
            f"{c['ring']} = CASE WHEN {granted} THEN {kept_sql(d, ring, _NOW_US, limit, period_us)} "
            f"ELSE {ring} END "
            f"RETURNING {c['ring']}, {c['refused_at']}"
        )
