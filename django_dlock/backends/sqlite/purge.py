"""SQLite's purge: one ``DELETE ... RETURNING`` a batch, under the one write lock."""

from __future__ import annotations

from django_dlock.backends.purge import Purge, PurgedBatch


class SQLitePurge(Purge):
    def _delete_locks(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        ids = self._candidates(older_than, prefix).values("pk")[:batch_size]
        ids_sql, ids_params = ids.query.get_compiler(using=self.tables.using).as_sql()
        where_sql, where_params = self._still_expired_sql(older_than)
        token = self.tables.qn("fencing_token")
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"DELETE FROM {self.tables.table} WHERE {self.tables.pk_column} IN ({ids_sql}) "  # noqa: S608
            f"AND {where_sql} RETURNING {token}"
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [*ids_params, *where_params])
            tokens = [token for (token,) in cursor.fetchall()]
        if tokens:
            self._raise_fencing_floor(max(tokens))
        # Chosen and deleted under the one write lock: nothing changed in between.
        return PurgedBatch(chosen=len(tokens), deleted=len(tokens))
