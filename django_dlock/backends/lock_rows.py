"""The portable statements of the lock rows (``distributed_locks``): the
``SELECT ... FOR UPDATE`` of a resource's row, its first insert and its
writes, on which ``LockBackend``'s portable operations decide.

A lock operation is a handful of statements, and at this size Django's query
building costs more than the round trips: compiling ``select_for_update()`` and
``update()`` on every call costs more than running the statement
(docs/performance.md, "Where the code's choices come from"). So the ORM writes
each statement once per alias, and the operations execute that SQL and convert
the rows with the converters Django chose for them (``LockTables``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.db import OperationalError

from django_dlock.backends.results import LockRow
from django_dlock.backends.tables import PLACEHOLDER, LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules.clock import DatabaseNow, now_plus

# A row lock NOWAIT found taken: PostgreSQL's lock_not_available; MariaDB's
# lock wait timeout (1205), MySQL's ER_LOCK_NOWAIT (3572).
ROW_LOCKED_SQLSTATE, ROW_LOCKED_CODES = "55P03", (1205, 3572)


class RowLocked(Exception):
    """``select_for_update(nowait=True)`` found the row locked by another transaction."""


class LockRows:
    """The statements of one alias's lock rows; a vendor overrides the ones it
    writes otherwise."""

    def __init__(self, tables: LockTables) -> None:
        self.tables = tables
        # The UPDATE of ``update()`` for each tuple of columns it was asked to write.
        self._update_sql: dict[tuple[str, ...], str] = {}

    @cached_property
    def select_sql(self) -> str:
        """The SELECT ... FOR UPDATE of a resource's row: its columns, then the
        database's now. Compiled on first use, which is inside a lock
        transaction: Django compiles ``select_for_update()`` only there."""
        tables = self.tables
        sql, params = tables.compiled(tables.row_query().select_for_update())[:2]
        if list(params) != [PLACEHOLDER]:
            raise AssertionError(f"unexpected SELECT for {tables.using!r}: {sql}")
        return sql

    @cached_property
    def read_sql(self) -> str:
        """The same SELECT without a row lock, for reads outside a transaction."""
        return self.tables.compiled(self.tables.row_query())[0]

    @cached_property
    def select_nowait_sql(self) -> str:
        """``select_sql`` that does not wait for another transaction's row lock."""
        tables = self.tables
        return str(tables.compiled(tables.row_query().select_for_update(nowait=True))[0])

    def select_for_update(self, resource: str, *, nowait: bool = False) -> LockRow | None:
        """The resource's row, locked until commit; ``None`` if there is none.
        ``nowait``: raise ``RowLocked`` rather than wait where another
        transaction locks it (where the database can say so)."""
        if not nowait or not self.tables.connection.features.has_select_for_update_nowait:
            return self.tables.fetch_row(self.select_sql, [resource])
        try:
            return self.tables.fetch_row(self.select_nowait_sql, [resource])
        except OperationalError as error:
            cause = error.__cause__
            if getattr(cause, "sqlstate", None) == ROW_LOCKED_SQLSTATE or (
                error.args and error.args[0] in ROW_LOCKED_CODES
            ):
                raise RowLocked from error
            raise

    def insert(
        self,
        resource: str,
        owner: str,
        duration: timedelta,
        *,
        label: str = "",
        limit: int | None = None,
        lock_delay: timedelta | None = None,
    ) -> LockRow | None:
        """Insert the first row of ``resource``, held by ``owner`` (or
        ``SHARED_HOLDERS``, then with a semaphore's ``limit``); ``None`` if
        another process won.

        ``ON CONFLICT DO NOTHING`` makes a lost race an empty result rather than
        an IntegrityError that would abort the transaction (a savepoint around
        it would cost two more round trips). The token starts above the largest
        one ever purged.
        """
        tables = self.tables
        columns, placeholders, params = self.insert_values(
            resource, owner, duration, label, limit, lock_delay
        )
        now_sql, now_params = compile_expression(tables.using, DatabaseNow())
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {tables.table} ({columns}) VALUES ({placeholders}) "  # noqa: S608
            f"ON CONFLICT ({tables.column_sql['resource']}) DO NOTHING "
            f"RETURNING {', '.join(tables.columns)}, {now_sql}"
        )
        return tables.fetch_row(sql, [*params, *now_params])

    def insert_values(
        self,
        resource: str,
        owner: str,
        duration: timedelta,
        label: str,
        limit: int | None,
        lock_delay: timedelta | None = None,
    ) -> tuple[str, str, list[Any]]:
        """The column list, VALUES and parameters of a first row of ``resource``:
        the database's time, and a token above the largest one ever purged."""
        using = self.tables.using
        now_sql, now_params = compile_expression(using, DatabaseNow())
        expires_sql, expires_params = compile_expression(using, now_plus(duration))
        # Each column named with its value: the model's field order does not matter.
        values: dict[str, tuple[str, list[Any]]] = {
            "resource": ("%s", [resource]),
            "owner": ("%s", [owner]),
            "acquired_at": (now_sql, now_params),
            "expires_at": (expires_sql, expires_params),
            "fencing_token": (f"COALESCE(({self.floor_sql()}), 0) + 1", []),
            "hold_count": ("%s", [1]),
            "label": ("%s", [label]),
            "limit": ("%s", [limit]),
            "lock_delay": ("%s", [self.duration_value(lock_delay)]),
        }
        columns = ", ".join(self.tables.column_sql[name] for name in values)
        placeholders = ", ".join(sql for sql, _ in values.values())
        params = [param for _, value_params in values.values() for param in value_params]
        return columns, placeholders, params

    def floor_sql(self) -> str:
        """A SELECT of the fencing floor: the largest token ever purged (a
        purge raises it: ``Purge``)."""
        tables = self.tables
        return f"SELECT MAX({tables.qn('value')}) FROM {tables.floor_table}"  # noqa: S608

    def duration_value(self, value: timedelta | None) -> Any:
        """``value`` as the driver takes the lock-delay column (SQLite and
        MariaDB: microseconds)."""
        if value is None:  # (the common lock-delay: none)
            return None
        tables = self.tables
        return tables.fields["lock_delay"].get_db_prep_save(value, tables.connection)

    def update(self, row: LockRow, attnames: Sequence[str]) -> None:
        """Write ``row``'s values of ``attnames`` to it."""
        tables = self.tables
        connection = tables.connection
        key = tuple(attnames)
        sql = self._update_sql.get(key)
        if sql is None:  # written once per set of columns: a few in all
            assignments = ", ".join(f"{tables.column_sql[name]} = %s" for name in attnames)
            sql = f"UPDATE {tables.table} SET {assignments} WHERE {tables.pk_column} = %s"  # noqa: S608
            self._update_sql[key] = sql
        fields = tables.fields
        values = [fields[name].get_db_prep_save(getattr(row, name), connection) for name in key]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, row.pk])

    def released_values(self, row: LockRow) -> list[Any]:
        """A released ``row``'s owner and expiry, as parameters of a hand-written
        ``UPDATE`` (a vendor's ``mark_released`` that also wakes the head)."""
        tables = self.tables
        return [
            tables.fields[name].get_db_prep_save(getattr(row, name), tables.connection)
            for name in ("owner", "expires_at")
        ]
