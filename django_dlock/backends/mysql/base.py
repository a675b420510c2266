"""MariaDB's (and MySQL's) SQL for the lock operations, through Django's ``mysql``
backend and mysqlclient.

InnoDB differs from PostgreSQL where races are decided:

- Under REPEATABLE READ a ``SELECT ... FOR UPDATE`` that finds no row takes a
  gap lock, and two processes acquiring a new resource at once then deadlock
  (error 1213) on their INSERTs. Django opens MySQL connections in READ
  COMMITTED, which takes no gap locks; the system checks refuse any other level
  for the lock database (``django_dlock.backends.mysql.checks``).
- There is no ``ON CONFLICT``: the first insert is ``INSERT ... ON DUPLICATE
  KEY UPDATE`` with a no-op, and the new row is read back (one statement more
  than on PostgreSQL, for the first acquisition of a resource only).
- There is no ``ctid``, and InnoDB's lock order decides deadlocks: a purge
  batch raises the fencing floor first and locks its rows by resource, in
  the order the lock operations take them (``purge_batch``).
- Some deadlocks remain: a first insert locks the index entry after its key,
  which a neighbouring resource's first insert may hold while it waits for the
  floor. InnoDB rolls one back (error 1213), and that operation, which wrote
  nothing, runs again (``retry_after``, ``in_lock_transaction``).

Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)`` here, which is in the session's
time zone; the lock clock is ``UTC_TIMESTAMP(6)`` (``DatabaseNow.as_mysql``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.core.checks import CheckMessage
from django.db import DatabaseError

from django_dlock.backends.base import LockBackend, PurgedBatch
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.mysql import statements
from django_dlock.backends.mysql.checks import MySQLChecks
from django_dlock.backends.mysql.features import MySQLFeatures
from django_dlock.backends.mysql.statements import OneRowStatements
from django_dlock.backends.results import Claim, LockRow, Released, Taken
from django_dlock.django_private import atomic_depth, compile_expression
from django_dlock.rules import ReleaseResult
from django_dlock.transactions import refuse_callers_transaction

# InnoDB's "Deadlock found when trying to get lock; try restarting transaction".
ER_LOCK_DEADLOCK = 1213
# The prefix of the named lock each waiting connection holds while it lives.
WAITER_LOCK = "django-dlock:waiter:"
# How many times a lock operation runs at most when InnoDB keeps choosing its
# transaction as a deadlock's victim.
DEADLOCK_ATTEMPTS = 5


class MySQLBackend(LockBackend):
    """The exclusive lock's acquire and release are one ``UPDATE`` each, in
    autocommit, and a read of what it decided (``statements``); the other
    operations, and the cases the row alone cannot settle, are the portable
    ones."""

    vendor = "mysql"
    features_class = MySQLFeatures

    def __init__(self, using: str) -> None:
        super().__init__(using)
        self._one_row = OneRowStatements(self)

    def take(self, claim: Claim) -> Taken:
        if not claim.exclusive or claim.ticket is not None or not self._alone():
            return super().take(claim)
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "microseconds": claim.duration // timedelta(microseconds=1),
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "held": claim.held_token,
        }
        answer = self._update_one_row(self._one_row.take, params)
        if answer is None or answer[0] == statements.PORTABLE:  # no row yet; shared holders
            return super().take(claim)
        action, before, values = answer
        if action == statements.REFUSED:
            return Taken(row=None, previous_owner=before, renewed=False)
        return Taken(
            row=self._row(values), previous_owner=before, renewed=action == statements.AGAIN
        )

    def give_up(self, resource: str, owner: str | None, *, forced: bool = False) -> Released:
        if owner is None or forced or not self._alone():
            return super().give_up(resource, owner, forced=forced)
        answer = self._update_one_row(self._one_row.release, {"resource": resource, "owner": owner})
        if answer is None or answer[0] == statements.NOT_FOUND:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        action, before, values = answer
        if action == statements.FORBIDDEN:
            return Released(row=None, owner=before, result=ReleaseResult.FORBIDDEN)
        if action == statements.PORTABLE:  # a shared hold's
            return super().give_up(resource, owner)
        row = self._row(values)
        if action == statements.DECREMENTED:
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        held = replace(row, owner=before)  # as it was held, until now
        return Released(row=row, owner=before, result=ReleaseResult.RELEASED, released=(held,))

    def _alone(self) -> bool:
        """Whether an operation's one ``UPDATE`` runs, as a transaction of its
        own (autocommit): the one-statement operations are on
        (``features.one_statement``), and not inside Django's TestCase
        transaction, where the portable operation runs. Raises inside a
        transaction of the caller's."""
        refuse_callers_transaction(self.using)
        return self.features.one_statement and not atomic_depth(self.connection)

    def _update_one_row(
        self, sql: str, params: dict[str, Any]
    ) -> tuple[str, str, Sequence[Any]] | None:
        """Run an operation's ``UPDATE`` and read what it kept; None where the
        resource has no row."""
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            # Django connects with CLIENT.FOUND_ROWS: the rows matched, changed or not.
            if cursor.rowcount != 1:
                return None
            cursor.execute(self._one_row.kept, {"resource": params["resource"]})
            return statements.decided(cursor.fetchone())

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        # Django's error carries the driver's arguments: (code, message).
        if attempt == DEADLOCK_ATTEMPTS or not error.args or error.args[0] != ER_LOCK_DEADLOCK:
            return None
        # The victim wrote nothing; the winner commits within a statement or two,
        # and a jittered pause keeps two victims from meeting again.
        return random.uniform(0, 0.002 * attempt)  # noqa: S311 - jitter, not a secret

    def insert(
        self,
        resource: str,
        owner: str,
        duration: timedelta,
        *,
        label: str = "",
        limit: int | None = None,
    ) -> LockRow | None:
        """Insert the first row of ``resource``; ``None`` if another process won.

        ``ON DUPLICATE KEY UPDATE`` with a no-op makes a lost race an insert of
        no row (no auto-increment id), after waiting for the winner's commit.
        It waits with an exclusive lock, where ``INSERT IGNORE`` takes a shared
        one: the losers would then each hold it and deadlock (1213) when they
        lock the winner's row FOR UPDATE to decide on it. The new row is read
        back: ``RETURNING`` (MariaDB only) would hide whether it was inserted.
        """
        columns, placeholders, params = self._insert_values(resource, owner, duration, label, limit)
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) "  # noqa: S608
            f"ON DUPLICATE KEY UPDATE {self.pk_column} = {self.pk_column}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            inserted = bool(cursor.lastrowid)
        if not inserted:
            return None
        # The row is this transaction's own, locked already.
        row = self.select_for_update(resource)
        if row is None:
            raise DatabaseError(f"the row inserted for {resource!r} cannot be read back")
        return row

    def session_pid(self) -> int | None:
        # The connection takes a named lock of its own id, which MariaDB
        # releases when the session ends, however it ends: IS_USED_LOCK() then
        # tells whether it lives. (information_schema.PROCESSLIST would tell
        # too, but reading it in the waiters' looks crashed a MariaDB 10.11
        # server under load, in its temporary tables.)
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT CONNECTION_ID(), GET_LOCK(CONCAT('{WAITER_LOCK}', CONNECTION_ID()), 0)"
            )
            (pid, taken) = cursor.fetchone()
        return int(pid) if taken == 1 else None

    def live_waiter_sql(self, alias: str = "") -> str:
        # A ticket whose waiter's connection is gone (its named lock free) is
        # a dead waiter's.
        pid = f"{alias}{self.qn('listener_pid')}"
        return (
            f"{super().live_waiter_sql(alias)} AND ({pid} IS NULL OR "
            f"IS_USED_LOCK(CONCAT('{WAITER_LOCK}', {pid})) = {pid})"
        )

    def _pairs_sql(self, count: int) -> str:
        return f"({', '.join(['(%s, %s)'] * count)})"

    def _renew_exclusive(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        # MySQL has no UPDATE ... RETURNING: an UPDATE, then a SELECT of the
        # locks that are still valid and still the same owner's, which are the
        # renewed ones (a lock released or taken over in between is not
        # reported, as if it had not been renewed).
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        where = (
            f"({qn('resource')}, {qn('owner')}) IN {self._pairs_sql(len(pairs))} "
            f"AND {qn('expires_at')} > {now_sql}"
        )
        values = [value for pair in pairs for value in pair]
        renewed: dict[tuple[str, str], LockRow] = {}
        with self.connection.cursor() as cursor:
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            cursor.execute(
                f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} WHERE {where}",  # noqa: S608
                [*expires_params, *values, *now_params],
            )
            select = f"SELECT {', '.join(self.columns)}, {now_sql} FROM {self.table} WHERE {where}"  # noqa: S608
            cursor.execute(select, [*now_params, *values, *now_params])
            for selected in cursor.fetchall():
                row = self._row(selected)
                renewed[(row.resource, row.owner)] = row
        return renewed

    @property
    def _resource_index(self) -> str:
        """The unique index of the resource column (the model's UniqueConstraint)."""
        [constraint] = (
            constraint.name
            for constraint in self.model._meta.constraints
            if getattr(constraint, "fields", None) == ("resource",)
        )
        return str(constraint)

    def _floor_sql(self) -> str:
        # Locked exclusively: first inserts (and purges, which lock it first)
        # queue on the floor row, one at a time. Concurrent inserts of a
        # resource whose purged rows InnoDB has not cleaned up yet would
        # otherwise deadlock (1213) on the index entries of the deleted rows.
        qn = self.qn
        return f"SELECT {qn('value')} FROM {self.floor_table} WHERE {qn('id')} = 1 FOR UPDATE"  # noqa: S608

    def _purge_batch(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
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
        candidates = self._purge_candidates(older_than, prefix)
        batch = candidates.order_by(self.model._meta.pk.attname).values_list(
            "resource", "fencing_token"
        )
        batch_sql, batch_params = batch[:batch_size].query.get_compiler(using=self.using).as_sql()
        with self.connection.cursor() as cursor:
            cursor.execute(batch_sql, batch_params)
            rows = cursor.fetchall()
            if not rows:
                return PurgedBatch(chosen=0, deleted=0)
            largest = max(token for _, token in rows)
            self._raise_fencing_floor(largest)
            where_sql, where_params = self._still_expired_sql(older_than)
            placeholders = ", ".join(["%s"] * len(rows))
            resource, token = self.column_sql["resource"], self.column_sql["fencing_token"]
            # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
            cursor.execute(
                f"SELECT {self.pk_column} FROM {self.table} "  # noqa: S608
                f"FORCE INDEX ({self.qn(self._resource_index)}) WHERE {resource} IN ({placeholders}) "
                f"AND {token} <= %s AND {where_sql} FOR UPDATE SKIP LOCKED",
                [*(name for name, _ in rows), largest, *where_params],
            )
            locked = [pk for (pk,) in cursor.fetchall()]
            if not locked:
                return PurgedBatch(chosen=len(rows), deleted=0)
            placeholders = ", ".join(["%s"] * len(locked))
            cursor.execute(
                f"DELETE FROM {self.table} WHERE {self.pk_column} IN ({placeholders})",  # noqa: S608
                locked,
            )
            return PurgedBatch(chosen=len(rows), deleted=int(cursor.rowcount))

    def _delete_expired_holds(self, where: str, params: list[Any]) -> None:
        # Those a lock operation holds are skipped: it may wait for a lock row
        # this purge holds. (InnoDB deletes from a table it reads in a subquery
        # only through a derived table, which would lock no row: two statements.)
        table, _, column = self._hold_names
        pk = column["id"]
        with self.connection.cursor() as cursor:
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
        qn = self.qn
        value = qn("value")
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {self.floor_table} ({qn('id')}, {value}) VALUES (1, %s) "  # noqa: S608
                f"ON DUPLICATE KEY UPDATE {value} = GREATEST({value}, %s)",
                [token, token],
            )

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return MySQLChecks(self.using).check(**kwargs)
