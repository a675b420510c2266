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

import contextlib
import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections
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
from django_dlock.backends.mysql.queued_take import QueuedTake, taken_of
from django_dlock.backends.mysql.renewals import MySQLRenewals
from django_dlock.backends.mysql.throttles import MySQLThrottleUses
from django_dlock.backends.mysql.wake import HOLD_GATE, gate_of, kept_with_gate
from django_dlock.backends.results import Refusal, Released, Taken
from django_dlock.backends.transactions import (
    refuse_callers_transaction,
    run_again_after_lost_races,
)
from django_dlock.conf import conf
from django_dlock.rules import SHARED, ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.predicates import HELD

# InnoDB's "Deadlock found when trying to get lock; try restarting transaction".
ER_LOCK_DEADLOCK = 1213
ER_LOCK_WAIT_TIMEOUT = 1205
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
    throttles_class = MySQLThrottleUses

    def __init__(self, using: str) -> None:
        super().__init__(using)
        statements = OneRowStatements(
            self.tables,
            self.queue.ticket_heads("%(ticket)s", "%(resource)s"),
            self.queue.nobody_queued("%(resource)s"),
        )
        self._one_take = Statement("dlock_take", statements.take)
        # It waits for no row lock: a holder's ``held.atomic()`` keeps the row
        # locked, and a blocking lock() queues at once rather than wait there past
        # its timeout (error 1205 at once: ``take`` refuses it, and the wait queues).
        self._one_take_behind = Statement(
            "dlock_take_behind",
            f"SET STATEMENT innodb_lock_wait_timeout=0 FOR {statements.take_behind}",
        )
        self._one_release = Statement("dlock_release", statements.release)
        # The same, and the resource's gate held or given up (``mysql.wake``).
        self._kept_take = Statement("dlock_kept_take", kept_with_gate(statements.kept, take=True))
        self._kept_release = Statement(
            "dlock_kept_release", kept_with_gate(statements.kept, take=False)
        )
        # Without gates (``DLOCK_LISTEN = False``: the head polls): the same columns.
        self._kept = Statement("dlock_kept", f"{statements.kept}, %(gate)s")
        self._prepared = PreparedStatements()
        self._kept_row = one_row.KeptRow(self.tables)
        self._queued = {  # a waiter's (``queued_take``), with gates and without
            gates: QueuedTake(
                statements.queued_take, kept.sql, self.queue.leave_counted_sql, gates=gates
            )
            for gates, kept in ((True, self._kept_take), (False, self._kept))
        }

    # Each operation has one entry, which dispatches once: to the one-row
    # UPDATE where the row settles the case, else (None from it) to the
    # portable operation.

    def take(self, claim: Claim) -> Taken:
        try:
            return self._take_once(claim)
        except DatabaseError as error:
            # The row stayed locked past innodb_lock_wait_timeout. Where another
            # owner validly holds the lock (its guarded block, ``held.atomic()``,
            # keeps the row), that is a refusal as any other, and the statement
            # wrote nothing; else something is stuck, and the error is raised.
            timed_out = error.args and error.args[0] == ER_LOCK_WAIT_TIMEOUT
            if timed_out and claim.behind_queue:  # it waits for no row lock: it queues
                return Taken(row=None, previous_owner=None, renewed=False)
            if timed_out and self._held_by_another(claim.resource, claim.owner):
                return Taken(row=None, previous_owner=None, renewed=False)
            raise

    def _held_by_another(self, resource: str, owner: str) -> bool:
        """Whether another owner validly holds ``resource``, as last committed
        (a consistent read, which waits for no row lock)."""
        tables = self.tables
        held = HELD.sql(tables.sql_row)
        sql = (
            f"SELECT 1 FROM {tables.table} WHERE {tables.column_sql['resource']} = %s "  # noqa: S608
            f"AND {held} AND {tables.column_sql['owner']} <> %s"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [resource, owner])
            return cursor.fetchone() is not None

    def _take_once(self, claim: Claim) -> Taken:
        connection = self._alone() if claim.exclusive else None
        if connection is None:
            taken = None
        elif claim.ticket is None:
            taken = self._take_one_row(claim, connection)
        else:
            taken = self._take_queued(claim, connection)
        return self._gated_take(claim) if taken is None else taken

    def _take_one_row(self, claim: Claim, connection: BaseDatabaseWrapper) -> Taken | None:
        """The exclusive acquisition by the one-row UPDATE; None where the
        portable operation decides (no row yet, shared holders)."""
        params = self._one_row_params(claim, connection)
        kept = self._kept_take if conf.LISTEN is not False else self._kept
        statement = self._one_take_behind if claim.behind_queue else self._one_take
        answer = self._update_one_row(connection, statement, params, kept)
        if answer is None or (answer[0] == one_row.PORTABLE and not claim.behind_queue):
            return None
        action, before, values = answer
        row = self._kept_row.row(values, connection)
        # The row as the UPDATE left it. (Beside shared holders a blocking lock()
        # queues, rather than wait in the portable take for their guarded blocks.)
        if action in (one_row.REFUSED, one_row.NOT_HEAD, one_row.PORTABLE):
            return Taken(row=None, previous_owner=before, renewed=False, refusal=Refusal.of(row))
        return Taken(row=row, previous_owner=before, renewed=action == one_row.AGAIN)

    def _one_row_params(self, claim: Claim, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        """The parameters of the one-row take's statements (``connection``:
        this alias's, from ``_alone``)."""
        return {
            "resource": claim.resource,
            "owner": claim.owner,
            "microseconds": claim.duration // timedelta(microseconds=1),
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "held": claim.held_token,
            "lock_delay": self.rows.duration_value(claim.lock_delay),
            "gate": gate_of(connection, self.tables.table, claim.resource, claim.owner),
        }

    def _take_queued(self, claim: Claim, connection: BaseDatabaseWrapper) -> Taken | None:
        """A waiter's exclusive acquisition, in one transaction of its own
        (``queued_take``); None where the portable operation decides (no row
        yet, shared holders)."""
        params = self._one_row_params(claim, connection)
        params["ticket"] = claim.ticket
        queued = self._queued[conf.LISTEN is not False]
        answer = run_again_after_lost_races(self, lambda: queued.run(connection, params))
        if answer is None:
            return None
        return taken_of(answer, lambda values: self._kept_row.row(values, connection))

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
        released = None
        if connection is not None and owner is not None:
            released = self._release_one_row(resource, owner, connection)
        if released is None:
            released = self.give_up_portable(resource, owner, forced=forced)
            gated = connection is None and not forced and mode != SHARED
            if owner is not None and gated and conf.LISTEN is not False:
                self._open_gate(resource, owner, released)
        return released

    def _release_one_row(
        self, resource: str, owner: str, connection: BaseDatabaseWrapper
    ) -> Released | None:
        """The owner's release by the one-row UPDATE; None for a shared hold's
        (the portable operation)."""
        params = {
            "resource": resource,
            "owner": owner,
            "gate": gate_of(connection, self.tables.table, resource, owner),
        }
        kept = self._kept_release if conf.LISTEN is not False else self._kept
        answer = self._update_one_row(connection, self._one_release, params, kept)
        if answer is None or answer[0] == one_row.NOT_FOUND:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        action, before, values = answer
        if action == one_row.FORBIDDEN:
            return Released(row=None, owner=before, result=ReleaseResult.FORBIDDEN)
        if action == one_row.PORTABLE:
            return None
        row = self._kept_row.row(values, connection)
        if action == one_row.DECREMENTED:
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        held = row.owned_by(before)  # as it was held, until now
        return Released(row=row, owner=before, result=ReleaseResult.RELEASED, released=(held,))

    def _gated_take(self, claim: Claim) -> Taken:
        """The portable acquisition, for an exclusive claim with the resource's
        gate held first (``mysql.wake``): a head that looks once the lock is
        taken finds the gate held, and the release that opens it wakes it. The
        gate is given up again where the claim is refused (unless this
        session held it already)."""
        if not claim.exclusive or conf.LISTEN is False:
            return self.take_portable(claim)
        gate = gate_of(self.connection, self.tables.table, claim.resource, claim.owner)
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT IS_USED_LOCK(%s) <=> CONNECTION_ID(), {HOLD_GATE}", [gate] * 3)
            ours, holds = cursor.fetchone()
        fresh = holds == 1 and not ours
        try:
            taken = self.take_portable(claim)
        except DatabaseError:
            if fresh:  # where the connection still works
                with contextlib.suppress(DatabaseError), self.connection.cursor() as cursor:
                    cursor.execute("DO RELEASE_LOCK(%s)", [gate])
            raise
        if fresh and taken.row is None:
            with self.connection.cursor() as cursor:
                cursor.execute("DO RELEASE_LOCK(%s)", [gate])
        return taken

    def _open_gate(self, resource: str, owner: str, released: Released) -> None:
        """Give up the gate of ``owner``'s hold after a portable release of the
        exclusive lock (a no-op where this session does not hold it)."""
        if released.result != ReleaseResult.DECREMENTED:
            gate = gate_of(self.connection, self.tables.table, resource, owner)
            with self.connection.cursor() as cursor:
                cursor.execute("DO RELEASE_LOCK(%s)", [gate])

    def _alone(self) -> BaseDatabaseWrapper | None:
        """The connection, where an operation's one ``UPDATE`` runs, as a
        transaction of its own (autocommit): the one-statement operations are
        on (``features.one_statement``), and not inside Django's TestCase
        transaction, where the portable operation runs (None). Raises inside
        a transaction of the caller's."""
        # (Looked up once, not through self.connection: each costs the client's CPU.)
        connection = connections[self.using]
        refuse_callers_transaction(self.using, connection)
        # (in_atomic_block: atomic_depth() > 0, without a call.)
        if self.features.one_statement and not connection.in_atomic_block:
            return connection
        return None

    def _update_one_row(
        self,
        connection: BaseDatabaseWrapper,
        statement: Statement,
        params: dict[str, Any],
        kept: Statement,
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
            self, self._one_update, connection, statement, params, kept
        )

    def _one_update(
        self,
        connection: BaseDatabaseWrapper,
        statement: Statement,
        params: dict[str, Any],
        kept: Statement,
    ) -> tuple[str, str, Sequence[Any]] | None:
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
            answer = self._prepared.update_and_read(raw, statement, kept, params)
        if answer is None:  # no row (a SELECT of variables answers one row)
            return None
        return one_row.decided(answer)

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        # Django's error carries the driver's arguments: (code, message).
        if attempt == DEADLOCK_ATTEMPTS or not error.args or error.args[0] != ER_LOCK_DEADLOCK:
            return None
        # The victim wrote nothing; the winner commits within a statement or two,
        # and a jittered pause keeps two victims from meeting again.
        return random.uniform(0, 0.002 * attempt)  # noqa: S311 - jitter, not a secret
