"""MariaDB's purge, whose lock order InnoDB's deadlocks decide."""

from __future__ import annotations

from typing import Any

from django_dlock.backends.purge import Purge, PurgedBatch


class MySQLPurge(Purge):
    @property
    def _resource_index(self) -> str:
        """The unique index of the resource column (the model's UniqueConstraint)."""
        [constraint] = (
            constraint.name
            for constraint in self.tables.model._meta.constraints
            if getattr(constraint, "fields", None) == ("resource",)
        )
        return str(constraint)

    def _delete_locks(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        # InnoDB locks a row through the index it is found by, and keeps every
        # lock until commit; the order of the locks decides whether a purge and
        # the lock operations deadlock (1213):
        # - an acquirer locks the resource's unique-index entry, then the row,
        #   where a DELETE by primary key takes them the other way round: so the
        #   batch is locked by resource before it is deleted;
        # - a first insert reads the floor with a shared lock before it writes
        #   the resource: so the purge raises the floor first, to the largest
        #   token of the batch as read (without locks) at the start.
        # "fencing_token <= that largest" keeps a lock released since then (and
        # so expired, with a larger token) out of the batch. SKIP LOCKED: rows a
        # lock operation holds stay for a later batch, so the purge waits for no
        # lock row (acquire_all() locks several, in its own order).
        candidates = self._candidates(older_than, prefix)
        batch = candidates.order_by(self.tables.model._meta.pk.attname).values_list(
            "resource", "fencing_token"
        )
        batch_sql, batch_params = (
            batch[:batch_size].query.get_compiler(using=self.tables.using).as_sql()
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(batch_sql, batch_params)
            rows = cursor.fetchall()
            if not rows:
                return PurgedBatch(chosen=0, deleted=0)
            largest = max(token for _, token in rows)
            self._raise_fencing_floor(largest)
            where_sql, where_params = self._still_expired_sql(older_than)
            placeholders = ", ".join(["%s"] * len(rows))
            tables = self.tables
            resource, token = tables.column_sql["resource"], tables.column_sql["fencing_token"]
            # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
            cursor.execute(
                f"SELECT {tables.pk_column} FROM {tables.table} "  # noqa: S608
                f"FORCE INDEX ({tables.qn(self._resource_index)}) WHERE {resource} IN ({placeholders}) "
                f"AND {token} <= %s AND {where_sql} FOR UPDATE SKIP LOCKED",
                [*(name for name, _ in rows), largest, *where_params],
            )
            locked = [pk for (pk,) in cursor.fetchall()]
            if not locked:
                return PurgedBatch(chosen=len(rows), deleted=0)
            placeholders = ", ".join(["%s"] * len(locked))
            cursor.execute(
                f"DELETE FROM {tables.table} WHERE {tables.pk_column} IN ({placeholders})",  # noqa: S608
                locked,
            )
            return PurgedBatch(chosen=len(rows), deleted=int(cursor.rowcount))

    def _delete_expired_holds(self, where: str, params: list[Any]) -> None:
        # Those a lock operation holds are skipped: it may wait for a lock row
        # this purge holds. (InnoDB deletes from a table it reads in a subquery
        # only through a derived table, which would lock no row: two statements.)
        table = self.tables.holds_table
        pk = self.tables.hold_column_sql["id"]
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {pk} FROM {table} WHERE {where} FOR UPDATE SKIP LOCKED",  # noqa: S608
                params,
            )
            ids = [pk_value for (pk_value,) in cursor.fetchall()]
            if ids:
                placeholders = ", ".join(["%s"] * len(ids))
                cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({placeholders})", ids)  # noqa: S608

    def _raise_fencing_floor(self, token: int) -> None:
        """Raise the floor to at least ``token`` in one statement, creating its
        row if missing. (The generic UPDATE, then INSERT IGNORE, then UPDATE
        deadlocks on InnoDB when several purges find no row: INSERT IGNORE
        leaves each a shared lock that the UPDATE must upgrade.)"""
        qn = self.tables.qn
        value = qn("value")
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {self.tables.floor_table} ({qn('id')}, {value}) VALUES (1, %s) "  # noqa: S608
                f"ON DUPLICATE KEY UPDATE {value} = GREATEST({value}, %s)",
                [token, token],
            )
