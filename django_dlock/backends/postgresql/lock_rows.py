"""PostgreSQL's lock rows: a first insert reads the fencing floor locked."""

from __future__ import annotations

from django_dlock.backends.lock_rows import LockRows


class PostgreSQLLockRows(LockRows):
    def floor_sql(self) -> str:
        # FOR SHARE: a first insert waits for a purge that raised the floor and
        # has not committed, and then reads the floor as it committed (a locking
        # read returns the newest row, whatever the statement's snapshot). The
        # purge raises the floor before it deletes (``PostgreSQLPurge``): so an
        # insert that finds a purged resource's row gone (waiting for its
        # deletion if need be) has read the floor above that row's token, or
        # holds the floor, and the purge then deletes no row until it commits.
        qn = self.tables.qn
        return f"SELECT {qn('value')} FROM {self.tables.floor_table} WHERE {qn('id')} = 1 FOR SHARE"  # noqa: S608
