"""MariaDB's lock rows: a first insert without ``ON CONFLICT``, and the fencing
floor read with an exclusive lock."""

from __future__ import annotations

from datetime import timedelta

from django.db import DatabaseError

from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.results import LockRow


class MySQLLockRows(LockRows):
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
        """Insert the first row of ``resource``; ``None`` if another process won.

        ``ON DUPLICATE KEY UPDATE`` with a no-op makes a lost race an insert of
        no row (no auto-increment id), after waiting for the winner's commit.
        It waits with an exclusive lock, where ``INSERT IGNORE`` takes a shared
        one: the losers would then each hold it and deadlock (1213) when they
        lock the winner's row FOR UPDATE to decide on it. The new row is read
        back: ``RETURNING`` (MariaDB only) would hide whether it was inserted.
        """
        columns, placeholders, params = self.insert_values(
            resource, owner, duration, label, limit, lock_delay
        )
        pk = self.tables.pk_column
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {self.tables.table} ({columns}) VALUES ({placeholders}) "  # noqa: S608
            f"ON DUPLICATE KEY UPDATE {pk} = {pk}"
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, params)
            inserted = bool(cursor.lastrowid)
        if not inserted:
            return None
        # The row is this transaction's own, locked already.
        row = self.select_for_update(resource)
        if row is None:
            raise DatabaseError(f"the row inserted for {resource!r} cannot be read back")
        return row

    def floor_sql(self) -> str:
        # Locked exclusively: first inserts (and purges, which lock it first)
        # queue on the floor row, one at a time. Concurrent inserts of a
        # resource whose purged rows InnoDB has not cleaned up yet would
        # otherwise deadlock (1213) on the index entries of the deleted rows.
        qn = self.tables.qn
        return (
            f"SELECT {qn('value')} FROM {self.tables.floor_table} WHERE {qn('id')} = 1 FOR UPDATE"  # noqa: S608
        )
