"""SQLite's SQL for the lock operations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django_dlock.backends.base import LockBackend


class SQLiteBackend(LockBackend):
    vendor = "sqlite"
    waiters_share_host = True

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Start the lock transaction with ``BEGIN IMMEDIATE``, whatever the
        database's ``transaction_mode``: a deferred transaction that reads and then
        writes fails at once with "database is locked" when another process got the
        write lock first, while ``IMMEDIATE`` waits for it (the busy timeout)."""
        connection = self.connection
        connection.ensure_connection()  # the backend reads transaction_mode on connecting
        configured_mode = connection.transaction_mode  # type: ignore[attr-defined]
        if configured_mode != "EXCLUSIVE":
            connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
        try:
            yield
        finally:
            connection.transaction_mode = configured_mode  # type: ignore[attr-defined]

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> int:
        ids = self._purge_candidates(older_than, prefix).values("pk")[:batch_size]
        ids_sql, ids_params = ids.query.get_compiler(using=self.using).as_sql()
        where_sql, where_params = self._still_expired_sql(older_than)
        token = self.qn("fencing_token")
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"DELETE FROM {self.table} WHERE {self.pk_column} IN ({ids_sql}) "  # noqa: S608
            f"AND {where_sql} RETURNING {token}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [*ids_params, *where_params])
            tokens = [token for (token,) in cursor.fetchall()]
        if tokens:
            self._raise_fencing_floor(max(tokens))
        return len(tokens)
