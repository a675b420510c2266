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
  the order the lock operations take them (``mysql.purge``).
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

from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.backends.base import LockBackend
from django_dlock.backends.mysql import one_row
from django_dlock.backends.mysql.checks import MySQLChecks
from django_dlock.backends.mysql.features import MySQLFeatures
from django_dlock.backends.mysql.lock_rows import MySQLLockRows
from django_dlock.backends.mysql.one_row import OneRowStatements
from django_dlock.backends.mysql.prepared import PreparedStatements, Statement
from django_dlock.backends.mysql.purge import MySQLPurge
from django_dlock.backends.mysql.queue import MySQLQueue
from django_dlock.backends.mysql.renewals import MySQLRenewals
from django_dlock.backends.results import LockRow, Released, Taken
from django_dlock.backends.transactions import (
    refuse_callers_transaction,
    run_again_after_lost_races,
)
from django_dlock.django_private import atomic_depth
from django_dlock.rules import SHARED, ReleaseResult
from django_dlock.rules.claim import Claim

# InnoDB's "Deadlock found when trying to get lock; try restarting transaction".
ER_LOCK_DEADLOCK = 1213
# How many times a lock operation runs at most when InnoDB keeps choosing its
# transaction as a deadlock's victim.
DEADLOCK_ATTEMPTS = 5


class MySQLBackend(LockBackend):
    """The exclusive lock's acquire and release are one ``UPDATE`` each, in
    autocommit, and a read of what it decided (``one_row``); the other
    operations, and the cases the row alone cannot settle, are the portable
    ones."""

    vendor = "mysql"
    features_class = MySQLFeatures
    rows_class = MySQLLockRows
    queue_class = MySQLQueue
    purge_class = MySQLPurge
    renewals_class = MySQLRenewals
    checks_class = MySQLChecks

    def __init__(self, using: str) -> None:
        super().__init__(using)
        statements = OneRowStatements(self.tables)
        self._one_take = Statement("dlock_take", statements.take)
        self._one_release = Statement("dlock_release", statements.release)
        self._one_kept = Statement("dlock_kept", statements.kept)
        self._prepared = PreparedStatements()
        self._kept_row = one_row.KeptRow(self.tables)

    def take(self, claim: Claim) -> Taken:
        connection = None
        if claim.exclusive and claim.ticket is None:
            connection = self._alone()
        if connection is None:
            return super().take(claim)
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "microseconds": claim.duration // timedelta(microseconds=1),
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "held": claim.held_token,
            "lock_delay": self.rows.duration_value(claim.lock_delay),
        }
        answer = self._update_one_row(connection, self._one_take, params)
        if answer is None or answer[0] == one_row.PORTABLE:  # no row yet; shared holders
            return super().take(claim)
        action, before, values = answer
        if action == one_row.REFUSED:
            return Taken(row=None, previous_owner=before, renewed=False)
        row = self._kept_row.row(values, connection)
        return Taken(row=row, previous_owner=before, renewed=action == one_row.AGAIN)

    def give_up(
        self,
        resource: str,
        owner: str | None,
        *,
        forced: bool = False,
        mode: str | None = None,
        queued: bool = False,
    ) -> Released:
        # A hold its holder knows is shared: the one-row UPDATE would only say so.
        connection = None if owner is None or forced or mode == SHARED else self._alone()
        if connection is None or owner is None:
            return super().give_up(resource, owner, forced=forced)
        params = {"resource": resource, "owner": owner}
        answer = self._update_one_row(connection, self._one_release, params)
        if answer is None or answer[0] == one_row.NOT_FOUND:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        action, before, values = answer
        if action == one_row.FORBIDDEN:
            return Released(row=None, owner=before, result=ReleaseResult.FORBIDDEN)
        if action == one_row.PORTABLE:  # a shared hold's
            return super().give_up(resource, owner)
        row = self._kept_row.row(values, connection)
        if action == one_row.DECREMENTED:
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        held = replace(row, owner=before)  # as it was held, until now
        return Released(row=row, owner=before, result=ReleaseResult.RELEASED, released=(held,))

    def _alone(self) -> BaseDatabaseWrapper | None:
        """The connection, where an operation's one ``UPDATE`` runs, as a
        transaction of its own (autocommit): the one-statement operations are
        on (``features.one_statement``), and not inside Django's TestCase
        transaction, where the portable operation runs (None). Raises inside
        a transaction of the caller's."""
        connection = self.connection
        refuse_callers_transaction(self.using, connection)
        if self.features.one_statement and not atomic_depth(connection):
            return connection
        return None

    def _row(self, values: Sequence[Any]) -> LockRow:
        """The ``LockRow`` of the values of the ``SELECT`` of what an ``UPDATE`` kept."""
        return self._kept_row.row(values, self.connection)

    def _update_one_row(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> tuple[str, str, Sequence[Any]] | None:
        """Run an operation's ``UPDATE`` and read what it kept; None where the
        resource has no row.

        InnoDB may pick even this one statement as a deadlock's victim (it
        locks an index entry and then the row; the torture run's long profile
        met it 9 times in 30 minutes, as errors 1213 of acquire and release).
        In autocommit the victim's statement wrote nothing, so it runs again
        as a lock transaction does (``retry_after``): a lost race is never an
        exception."""
        return run_again_after_lost_races(
            self, lambda: self._one_update(connection, statement, params)
        )

    def _one_update(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> tuple[str, str, Sequence[Any]] | None:
        kept = self._one_kept
        if connection.execute_wrappers or connection.queries_logged:
            # Debug tooling and the query log see the statements as written.
            with connection.cursor() as cursor:
                cursor.execute(statement.sql, params)
                # Django connects with CLIENT.FOUND_ROWS: the rows matched, changed or not.
                if cursor.rowcount != 1:
                    return None
                cursor.execute(kept.sql, params)
                return one_row.decided(cursor.fetchone())
        # Where nobody watches Django's cursor, mysqlclient's own runs them
        # prepared, for less of the client's CPU and of the server's; errors
        # are still Django's, and mark the connection as its cursor would.
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors:
            if self._prepared.execute(raw, statement, params) != 1:
                return None
            answer = self._prepared.fetch_one(raw, kept, params)
        assert answer is not None  # noqa: S101 - a SELECT of variables answers one row
        return one_row.decided(answer)

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        # Django's error carries the driver's arguments: (code, message).
        if attempt == DEADLOCK_ATTEMPTS or not error.args or error.args[0] != ER_LOCK_DEADLOCK:
            return None
        # The victim wrote nothing; the winner commits within a statement or two,
        # and a jittered pause keeps two victims from meeting again.
        return random.uniform(0, 0.002 * attempt)  # noqa: S311 - jitter, not a secret
