"""MariaDB's (and MySQL's) SQL for the lock operations, through Django's ``mysql``
backend and mysqlclient.

InnoDB differs from PostgreSQL where races are decided:

- Under REPEATABLE READ a ``SELECT ... FOR UPDATE`` that finds no row takes a
  gap lock, and two processes acquiring a new resource at once then deadlock
  (error 1213) on their INSERTs. Django opens MySQL connections in READ
  COMMITTED, which takes no gap locks; the system checks refuse any other level
  for the lock database (``django_dlock.checks_mysql``).
- There is no ``ON CONFLICT``: the first insert is ``INSERT IGNORE``. MariaDB
  returns the new row (``RETURNING``); MySQL 8 cannot, so there it is read back.
- There is no ``ctid``: purge batches are ranges of the primary key.

Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)`` here, which is in the session's
time zone; the lock clock is ``UTC_TIMESTAMP(6)`` (``DatabaseNow.as_mysql``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.db.models import Q
from django.db.models.sql import Query

from django_dlock.backends.base import LockBackend
from django_dlock.backends.clock import DatabaseNow, compile_expression, expired_before, now_plus

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock

# MySQL's "Duplicate entry ... for key ...": the warning INSERT IGNORE leaves
# when the row exists.
ER_DUP_ENTRY = 1062


class MySQLBackend(LockBackend):
    vendor = "mysql"

    def insert(self, resource: str, owner: str, duration: timedelta) -> DistributedLock | None:
        """Insert the first row of ``resource``; ``None`` if another process won.

        ``INSERT IGNORE`` makes a lost race an insert of no row, and waits for
        the winner's commit first, as ``ON CONFLICT DO NOTHING`` does. IGNORE
        would also turn other errors into warnings, so an insert of no row
        must have left exactly the duplicate-key warning, or it raises.
        """
        connection = self.connection
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, now_plus(duration))
        values: dict[str, tuple[str, list[Any]]] = {
            "resource": ("%s", [resource]),
            "owner": ("%s", [owner]),
            "acquired_at": (now_sql, now_params),
            "expires_at": (expires_sql, expires_params),
            "fencing_token": (
                f"COALESCE((SELECT MAX({qn('value')}) FROM {self.floor_table}), 0) + 1",  # noqa: S608
                [],
            ),
        }
        columns = ", ".join(qn(self.fields[name].column) for name in values)
        placeholders = ", ".join(sql for sql, _ in values.values())
        params = [param for _, value_params in values.values() for param in value_params]
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = f"INSERT IGNORE INTO {self.table} ({columns}) VALUES ({placeholders})"  # noqa: S608
        # MariaDB 10.5+ returns the new row; MySQL has no RETURNING: read it back.
        returning = connection.features.can_return_columns_from_insert
        if returning:
            sql += f" RETURNING {', '.join(self.columns)}"
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone() if returning else None
            if cursor.rowcount != 1:
                self._raise_unless_duplicate(cursor)
                return None
        if row is not None:
            lock = self.model.from_db(self.using, self.attnames, self._convert(row, connection))
        else:
            # The row is this transaction's own, locked already.
            read_back = self.select_for_update(resource)
            if read_back is None:
                raise DatabaseError(f"the row inserted for {resource!r} cannot be read back")
            lock = read_back
        lock.db_now = lock.acquired_at  # type: ignore[attr-defined]
        return lock

    @staticmethod
    def _raise_unless_duplicate(cursor: Any) -> None:
        cursor.execute("SHOW WARNINGS")
        codes = {code for _, code, _ in cursor.fetchall()}
        if codes != {ER_DUP_ENTRY}:
            raise DatabaseError(f"INSERT IGNORE of a lock inserted nothing (warnings {codes})")

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> int:
        # The batch is the first ``batch_size`` expired rows in primary-key order,
        # deleted as a key range: MySQL refuses LIMIT in an IN subquery, and a
        # range DELETE walks the clustered index. The range may hold rows that
        # expired meanwhile; "fencing_token <= the batch's largest" keeps every
        # deleted token under the floor the batch raises, and the expiry is
        # checked again, so a lock renewed or taken since survives.
        candidates = self._purge_candidates(older_than, prefix)
        batch = candidates.order_by("pk").values(self.model._meta.pk.attname, "fencing_token")[
            :batch_size
        ]
        batch_sql, batch_params = batch.query.get_compiler(using=self.using).as_sql()
        qn = self.qn
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT MIN(b.{qn('id')}), MAX(b.{qn('id')}), MAX(b.{qn('fencing_token')}) "  # noqa: S608
                f"FROM ({batch_sql}) b",
                batch_params,
            )
            first, last, largest = cursor.fetchone()
            if first is None:
                return 0
            in_batch = Q(
                pk__range=(first, last),
                fencing_token__lte=largest,
                expires_at__lte=expired_before(older_than),
            )
            if prefix:
                in_batch &= Q(resource__startswith=prefix)
            query = Query(self.model)
            where_sql, where_params = query.build_where(in_batch).as_sql(
                query.get_compiler(using=self.using), self.connection
            )
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            cursor.execute(f"DELETE FROM {self.table} WHERE {where_sql}", where_params)  # noqa: S608
            count = cursor.rowcount
        if count:
            self._raise_fencing_floor(largest)
        return int(count)
