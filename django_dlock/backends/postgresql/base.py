"""PostgreSQL's lock operations: one statement each, where the row settles them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import Any, TypeVar

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.backends.base import LockBackend
from django_dlock.backends.postgresql import release, shared_take
from django_dlock.backends.postgresql.checks import PostgreSQLChecks
from django_dlock.backends.postgresql.exclusive import ExclusiveStatements
from django_dlock.backends.postgresql.features import PostgreSQLFeatures
from django_dlock.backends.postgresql.handover import HANDED, granting, handed_sql
from django_dlock.backends.postgresql.lock_rows import PostgreSQLLockRows
from django_dlock.backends.postgresql.locked import PORTABLE
from django_dlock.backends.postgresql.prepared import PreparedStatements, Statement
from django_dlock.backends.postgresql.purge import PostgreSQLPurge
from django_dlock.backends.postgresql.queue import PostgreSQLQueue
from django_dlock.backends.postgresql.raw_cursor import kept_cursor
from django_dlock.backends.postgresql.shared_handover import PortableGrants
from django_dlock.backends.postgresql.throttles import PostgreSQLThrottleUses
from django_dlock.backends.postgresql.wake import (
    NO_TICKET_EXCLUDED,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.backends.results import LockRow, Refusal, Released, Renewed, Taken
from django_dlock.backends.tickets import NO_TICKET
from django_dlock.backends.transactions import in_lock_transaction, refuse_callers_transaction
from django_dlock.django_private import atomic_depth
from django_dlock.rules import SHARED, SHARED_HOLDERS, ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.grant import GRANT_PARAMS

_T = TypeVar("_T")


class PostgreSQLBackend(LockBackend):
    """Each lock operation is one statement and one round trip (``exclusive``,
    ``shared_take``, ``release``): a CTE locks the resource's row (``SELECT ...
    FOR UPDATE``), and the write that the row allows joins it, judged on the
    values the lock returned. The decision is written in SQL, in the write's
    ``WHERE``; ``STATEMENT_TIMESTAMP()`` is the database's now. An owner's
    release where the lock is its alone is a plain owner-checked ``UPDATE``
    (``release.AloneReleaseStatement``); the full release runs where that one
    writes nothing.

    The statement is sent in autocommit, outside ``atomic()`` (``_alone``):
    the server's transaction is the statement's own, and BEGIN and COMMIT need
    no round trips of their own, where a portable lock transaction (SELECT,
    decide, write, COMMIT) takes four. Where the statements do not apply
    (psycopg2, or server-side binding), the operations are the portable ones.
    """

    vendor = "postgresql"
    features_class = PostgreSQLFeatures
    rows_class = PostgreSQLLockRows
    queue_class = PostgreSQLQueue
    queue: PostgreSQLQueue
    purge_class = PostgreSQLPurge
    checks_class = PostgreSQLChecks
    throttles_class = PostgreSQLThrottleUses

    def __init__(self, using: str) -> None:
        super().__init__(using)
        self._exclusive = ExclusiveStatements(self)
        self._shared_take = shared_take.SharedTakeStatement(self).statement
        self._release_alone = release.AloneReleaseStatement(self).statement
        self._release = release.ReleaseStatement(self).statement
        self._prepared = PreparedStatements(using)
        self.queue.run = self.run_statement

    # Each operation has one entry, which dispatches once: to the statement
    # that settles the case, else (None from it) to the portable operation.

    def take(self, claim: Claim) -> Taken:
        taken = self._take_one(claim) if self.features.one_statement else None
        return self.take_portable(claim) if taken is None else taken

    def _take_one(self, claim: Claim) -> Taken | None:
        """The acquisition in one statement; None where the portable operation
        decides (no row yet for a reader; beside shared holders: the only one
        of them upgrades, a semaphore is another kind)."""
        if not claim.exclusive:
            return self._alone(lambda connection: self._take_shared(connection, claim))
        exclusive = self._exclusive
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "duration": claim.duration,
            "ticket": claim.ticket,
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "held": claim.held_token,
            "lock_delay": claim.lock_delay,
        }
        if claim.ticket is None and claim.held_token is None:
            taken = self._alone(lambda connection: self._take_released(connection, claim, params))
        else:
            statement = exclusive.take if claim.ticket is None else exclusive.take_leaving
            if claim.ticket is None and claim.behind_queue:
                statement = exclusive.take_behind
            taken = self._alone(lambda connection: self._taken(connection, statement, params))
        if taken.row is None and taken.previous_owner == SHARED_HOLDERS:
            # Beside readers or permits the portable take decides, its FOR UPDATE
            # waiting for their guarded blocks; a blocking lock() queues instead.
            return taken if claim.behind_queue else None
        return taken

    def _take_shared(self, connection: BaseDatabaseWrapper, claim: Claim) -> Taken | None:
        """A reader's or a permit's acquisition in one statement; None where the
        portable operation decides (see ``postgresql.shared_take``)."""
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "duration": claim.duration,
            "limit": claim.kind.limit,
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "ticket": NO_TICKET if claim.ticket is None else claim.ticket,
            "held": claim.held_token,
        }
        answer = self._run(connection, self._shared_take, params)
        if answer is None:  # no row for the resource yet
            return None
        action, header_owner, _, *rest = answer
        width = len(self.tables.columns) + 1
        locked, first_expiry, hold = rest[:width], rest[width], rest[width + 1 :]
        if action == shared_take.REFUSED:
            refusal = Refusal.of(self.tables.row(locked), first_expiry)
            return Taken(row=None, previous_owner=header_owner, renewed=False, refusal=refusal)
        if action == PORTABLE or hold[0] is None:
            return None
        row = self.holds.row(hold)
        return Taken(row=row, previous_owner=header_owner, renewed=action == shared_take.AGAIN)

    def _take_released(
        self, connection: BaseDatabaseWrapper, claim: Claim, params: dict[str, Any]
    ) -> Taken:
        """An exclusive acquisition by the short statement where the row settles
        it (released, or the owner's own hold: taken; another owner's valid
        hold: refused), else by ``take``: no row yet, an expired holder's (see
        ``ExclusiveStatements.take_released``)."""
        exclusive = self._exclusive
        behind = claim.behind_queue
        short = exclusive.take_released_behind if behind else exclusive.take_released
        owner, held, expires_at, now, *written = self._answer(connection, short, params)
        if written[0] is not None:
            row = self.tables.row(written)
            return Taken(row=row, previous_owner=owner, renewed=row.acquired_at < row.now)
        if held and owner != claim.owner:  # refused; shared holders: see take()
            refusal = Refusal(now=now, until=expires_at)
            return Taken(row=None, previous_owner=owner, renewed=False, refusal=refusal)
        if behind and owner == "" and not held:
            # Released, yet not written: someone is queued (or a lock-delay runs).
            # The blocking caller queues and looks (``Wait.step``): no statement more.
            return Taken(row=None, previous_owner=owner, renewed=False)
        statement = exclusive.take_behind if behind else exclusive.take
        return self._taken(connection, statement, params)

    def _taken(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> Taken:
        owner, _, locked, row = self._decided(connection, statement, params)
        if owner is None and row is None:
            # The row vanished (purged while the lock waited for it), or it
            # appeared after the statement's snapshot, held by another owner: in
            # either case a statement with a new snapshot sees it as it is now.
            owner, _, locked, row = self._decided(connection, statement, params)
        if row is None:
            refusal = Refusal.of(locked)
            return Taken(row=None, previous_owner=owner, renewed=False, refusal=refusal)
        # A re-acquisition keeps acquired_at; a new holder's is the database's
        # now. (A row that appeared after the statement's snapshot has no owner
        # before: ON CONFLICT judged it.)
        return Taken(row=row, previous_owner=owner, renewed=row.acquired_at < row.now)

    def extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        renewed = (
            self._extend_one(resource, owner, duration) if self.features.one_statement else None
        )
        return self.extend_portable(resource, owner, duration) if renewed is None else renewed

    def _extend_one(self, resource: str, owner: str, duration: timedelta) -> Renewed | None:
        """The renewal of an exclusive hold in one statement; None for a shared
        hold's (the portable operation)."""
        params = {"resource": resource, "owner": owner, "duration": duration}
        held_by, held, _, row = self._alone(
            lambda connection: self._decided(connection, self._exclusive.extend, params)
        )
        if row is None and held and held_by == SHARED_HOLDERS:
            return None
        return Renewed(row=row, exists=held_by not in (None, ""), holder=held_by)

    def give_up(
        self,
        resource: str,
        owner: str | None,
        *,
        forced: bool = False,
        mode: str | None = None,
        queued: bool = False,
    ) -> Released:
        # An operator's release of one holder's every hold: the portable operation.
        released = None
        if self.features.one_statement and owner is None:
            released = self._force_release(resource)
        elif self.features.one_statement and not forced:
            params = {"resource": resource, "owner": owner}
            released = self._alone(
                lambda connection: self._owners_release(connection, params, mode, queued)
            )
        if released is None:
            return self.give_up_portable(resource, owner, forced=forced)
        return released

    def _force_release(self, resource: str) -> Released | None:
        """An operator's release of whoever holds ``resource``, in one
        statement; None where shared holders hold it (the portable operation)."""
        params = {"resource": resource, **GRANT_PARAMS}
        held_by, held, _, row = self._alone(
            lambda connection: self._decided(connection, self._exclusive.force_release, params)
        )
        if not held or held_by is None:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if row is None:  # shared holders hold it
            return None
        held_row = replace(row, owner=held_by, expires_at=row.now)  # as it was held
        return Released(row=row, owner=held_by, result=ReleaseResult.RELEASED, released=(held_row,))

    def _owners_release(
        self,
        connection: BaseDatabaseWrapper,
        params: dict[str, Any],
        mode: str | None,
        queued: bool = False,
    ) -> Released | None:
        """The owner's release: the short statement where the row allows it (an
        exclusive hold, no queue: ``release.AloneReleaseStatement``), else the
        full one, at once for a hold its holder knows is shared (``mode``); None
        where the portable operation decides. Each statement is a transaction of
        its own. A hold handed over by a release (``queued``) goes straight to
        the full one too: the short one would write nothing while waiters queue."""
        alone = (
            None if mode == SHARED or queued else self._run(connection, self._release_alone, params)
        )
        if alone is None:
            return self._released(self._answer(connection, self._release, params))
        row = self.tables.row(alone)
        if row.owner:  # one hold of several went
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        # The row comes back as released (no owner); the hold, as it was held.
        held = row.owned_by(params["owner"])
        return Released(row=row, owner=held.owner, result=ReleaseResult.RELEASED, released=(held,))

    def _released(self, answer: Sequence[Any]) -> Released | None:
        """``Released`` from the answer of ``release.ReleaseStatement``; None where the
        portable operation decides."""
        outcome, held_by, _, *rest = answer
        if outcome == release.NOT_FOUND:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if outcome == release.FORBIDDEN:
            return Released(row=None, owner=held_by or "", result=ReleaseResult.FORBIDDEN)
        if outcome == PORTABLE:
            return None
        header, hold = rest[: len(self.tables.columns) + 1], rest[len(self.tables.columns) + 1 :]
        # The exclusive holder's row, or a shared hold.
        row = self.tables.row(header) if header[0] is not None else self.holds.row(hold)
        if outcome == release.DECREMENTED:
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        # The exclusive row comes back as released (no owner); a hold, as it was.
        held = row.owned_by(held_by) if header[0] is not None else row
        gone = replace(held, owner="", expires_at=row.now)
        return Released(row=gone, owner=held.owner, result=ReleaseResult.RELEASED, released=(held,))

    def _decided(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> tuple[str | None, bool, LockRow | None, LockRow | None]:
        """Run one operation's statement: the locked row's owner (None without a
        row) and whether it was held, the locked row as it was, and the row as
        written (None without a write)."""
        owner, held, *rest = self._answer(connection, statement, params)
        width = len(self.tables.columns) + 1
        locked, written = rest[:width], rest[width:]
        # A force-release's count of woken waiters may follow the row and its now.
        row = None if written[0] is None else self.tables.row(written[:width])
        return owner, bool(held), None if locked[0] is None else self.tables.row(locked), row

    def _alone(self, operation: Callable[[BaseDatabaseWrapper], _T]) -> _T:
        """``operation()``, whose statements (``_run``) are each a transaction of
        their own: outside ``atomic()``, which would only switch autocommit off
        and on around them, where the caller has no transaction open (else
        ``LockTransactionError``, as every lock operation). Each statement locks
        the row, decides and writes, so it is as atomic as a lock transaction.
        Inside Django's TestCase transaction, in a lock transaction (a
        savepoint), as every operation."""
        # (Looked up once, not through self.connection: each costs the client's CPU.)
        connection = connections[self.using]
        if atomic_depth(connection):
            return in_lock_transaction(self, lambda: operation(connection))
        refuse_callers_transaction(self.using, connection)
        return operation(connection)

    def _answer(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> Sequence[Any]:
        """Run a statement that answers one row whatever it finds (its answer
        is a ``SELECT`` from ``(SELECT) one LEFT JOIN ...``); that row."""
        answer = self._run(connection, statement, params)
        assert answer is not None  # noqa: S101 - such a statement always answers
        return answer

    def run_statement(self, statement: Statement, params: dict[str, Any]) -> Sequence[Any] | None:
        """Run a part's ``statement`` as the operations run theirs (``_run``); as
        plain SQL where the operations are the portable ones: its PREPARE is built
        for psycopg 3's client-side binding (``PostgreSQLFeatures.one_statement``)."""
        connection = connections[self.using]
        if self.features.one_statement:
            return self._run(connection, statement, params)
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, params)
            answer: Sequence[Any] | None = cursor.fetchone()
            return answer

    def _run(
        self, connection: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]
    ) -> Sequence[Any] | None:
        """Run ``statement``; its one row (None from a statement that wrote
        nothing and answers nothing then).

        Outside ``atomic()`` (``_alone``) it is sent in autocommit, where the
        server runs it as a transaction of its own: BEGIN and COMMIT cost no
        round trip, and it runs prepared (see
        ``django_dlock.backends.postgresql.prepared``), through Django's cursor
        where an execute wrapper or the query log would see it. Inside Django's TestCase
        transaction, the one transaction a lock operation runs in, it runs in
        that one, as plain SQL. (``connection``: this alias's, from ``_alone``.)
        """
        in_test_transaction = connection.in_atomic_block  # (atomic_depth() > 0, without a call)
        if in_test_transaction or connection.execute_wrappers or connection.queries_logged:
            with connection.cursor() as cursor:
                if in_test_transaction:
                    cursor.execute(statement.sql, params)
                else:
                    self._prepared.execute(cursor, connection.connection, statement, params)
                # (Annotated, not cast(): a call of typing's for nothing at run time.)
                answer: Sequence[Any] | None = cursor.fetchone()
                return answer
        # Where nobody watches Django's cursor (no execute wrapper, no query
        # log), a cursor of psycopg's own does the same with less of the
        # client's CPU; errors are still Django's, and the connection marked
        # as Django's cursor would mark it.
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors:
            cursor = kept_cursor(connection, raw)
            self._prepared.execute(cursor, raw, statement, params)
            answer = cursor.fetchone()
            return answer

    @cached_property
    def _portable_grants(self) -> PortableGrants:
        return PortableGrants(self.queue, self.shared_grants)

    def permit_freed(self, header: LockRow, held: list[LockRow]) -> None:
        # The portable release of a permit: the head and those that fit get it (``shared_handover``).
        if not self._portable_grants.grant(header, held):
            self.queue.wake_head(header.resource)

    def mark_released(self, row: LockRow) -> None:
        # The portable release's write: a head that reads or wants a permit is
        # granted its hold with those that fit beside it (``shared_handover``).
        if self._portable_grants.grant(row):
            return
        # Else the head takes the lock here too (``handover``), or is woken.
        values = self.rows.released_values(row)
        tables, queue = self.tables, self.queue
        t = tables.table
        as_released = {"owner": "%s", "expires_at": "%s", "limit": "NULL", "lock_delay": "NULL"}
        sql = (
            f"WITH head AS ({head_sql(queue, ticket=str(NO_TICKET_EXCLUDED), locked=True)}), "  # noqa: S608
            f"{fitting_sql(queue)}, {handed_sql(tables, 'TRUE')} UPDATE {t} "
            f"SET {granting(tables, as_released, t + '.')} FROM (SELECT) one "
            f"LEFT JOIN handed {HANDED} ON TRUE WHERE {t}.{tables.pk_column} = %s "
            f"RETURNING ({wake_sql(readers=True)})"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [row.resource, *values, row.pk])
