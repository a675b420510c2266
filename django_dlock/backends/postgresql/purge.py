"""PostgreSQL's purge: it raises the fencing floor before it deletes, and a
first insert reads the floor locked (``FOR SHARE``: ``postgresql.lock_rows``),
so a purged resource's token is never issued again; the purge skips the rows
and holds that a lock operation holds locked, so it never deadlocks with one."""

from __future__ import annotations

from typing import Any

from django.db.models.expressions import RawSQL

from django_dlock.backends.purge import Purge, PurgedBatch


class PostgreSQLPurge(Purge):
    def _delete_locks(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        # One statement, one scan of the table:
        # - ``chosen``: the batch, read without locks, each row by its physical
        #   address (ctid: a TID scan reaches it without an index lookup) and
        #   token. Read once: the table is scanned where the last scan left off
        #   (synchronized scans), so a second scan for the same rows would start
        #   past them, where every token is larger, and go round the table.
        # - ``raised``: the floor raised to the largest token of the batch (its
        #   row created if missing), before any row is locked: the deletion
        #   waits for it (see ``PostgreSQLLockRows.floor_sql``).
        # - ``purged``: the chosen rows deleted, skipping those a lock
        #   operation holds locked (the purge waits for no lock row, and so
        #   never deadlocks with operations that lock several in their own
        #   order: ``acquire_all()``). A row renewed, taken or released since it
        #   was chosen has a new address and stays; so does one that is no
        #   longer expired. Every deleted token is at most the raised floor.
        tables = self.tables
        qn = tables.qn
        token, value, pk = qn("fencing_token"), qn("value"), qn("id")
        chosen_sql, chosen_params = (
            self._candidates(older_than, prefix)
            .annotate(row=RawSQL("ctid", ()))
            .values("row", "fencing_token")[:batch_size]
            .query.get_compiler(using=tables.using)
            .as_sql()
        )
        still_sql, still_params = self._still_expired_sql(older_than)
        sql = (
            f"WITH chosen AS MATERIALIZED ({chosen_sql}), "  # noqa: S608 - only compiled SQL and identifiers
            f"raised AS (INSERT INTO {tables.floor_table} AS floor ({pk}, {value}) "
            f"SELECT 1, MAX({token}) FROM chosen HAVING COUNT(*) > 0 "
            f"ON CONFLICT ({pk}) DO UPDATE SET {value} = GREATEST(floor.{value}, EXCLUDED.{value}) "
            f"RETURNING {value}), "
            f"purged AS (DELETE FROM {tables.table} WHERE ctid = ANY(ARRAY("
            f"SELECT ctid FROM {tables.table} WHERE ctid = ANY(ARRAY(SELECT {qn('row')} FROM chosen)) "
            f"AND {still_sql} AND {token} <= (SELECT {value} FROM raised) "
            "FOR UPDATE SKIP LOCKED)) RETURNING 1) "
            "SELECT (SELECT COUNT(*) FROM chosen), (SELECT COUNT(*) FROM purged)"
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [*chosen_params, *still_params])
            chosen, deleted = cursor.fetchone()
        return PurgedBatch(chosen=int(chosen), deleted=int(deleted))

    def _delete_expired_holds(self, where: str, params: list[Any]) -> None:
        table = self.tables.holds_table
        pk = self.tables.hold_column_sql["id"]
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE {pk} = ANY(ARRAY(SELECT {pk} FROM {table} "  # noqa: S608
                f"WHERE {where} FOR UPDATE SKIP LOCKED))",
                params,
            )
