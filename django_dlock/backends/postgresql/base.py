"""PostgreSQL's SQL for the lock operations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from django.core.checks import CheckMessage

from django_dlock.backends.base import LockBackend
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.postgresql import shared
from django_dlock.backends.postgresql.checks import PostgreSQLChecks
from django_dlock.backends.postgresql.handover import HANDED, granting, handed_sql
from django_dlock.backends.postgresql.prepared import PreparedStatements, Statement
from django_dlock.backends.postgresql.purge import PostgreSQLPurge
from django_dlock.backends.postgresql.shared import SharedStatements
from django_dlock.backends.postgresql.statements import (
    ASYNC_COMMIT,
    ASYNC_COMMIT_CONDITION,
    NO_TICKET_EXCLUDED,
    OperationStatements,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.backends.queue import NO_TICKET, WANTS, QueueRow
from django_dlock.backends.results import Claim, LockRow, Released, Renewed, Taken
from django_dlock.django_private import atomic_depth, compile_expression
from django_dlock.rules import EXCLUSIVE, SHARED_HOLDERS, ReleaseResult
from django_dlock.transactions import in_lock_transaction


class PostgreSQLBackend(PostgreSQLPurge, LockBackend):
    """Each lock operation is one statement and one round trip
    (``statements``): a CTE locks the resource's row (``SELECT ... FOR
    UPDATE``), and the write that the row allows joins it, judged on the values
    the lock returned. The decision is written in SQL, in the write's ``WHERE``;
    ``STATEMENT_TIMESTAMP()`` is the database's now.

    The statement runs in the operation's ``atomic()`` block, as the portable
    statements would, and when that block is the outermost one, it is sent in
    autocommit (see ``_run``): the server's transaction is the statement's own,
    and BEGIN and COMMIT need no round trips of their own, where a portable
    lock transaction (SELECT, decide, write, COMMIT) takes four. Where the statements do not apply (psycopg2, or
    server-side binding), the operations are the portable ones.
    """

    vendor = "postgresql"
    listener_class = "django_dlock.listeners.postgresql.PostgresListener"
    grants_on_release = True

    def __init__(self, using: str) -> None:
        super().__init__(using)
        # Built for psycopg 3's client-side binding (Django's default): its
        # parameters are typed by the PREPARE, and the raw connection's
        # autocommit is psycopg 3's. (Imported here: this module is also
        # imported where no driver is installed.)
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        options = self.connection.settings_dict.get("OPTIONS") or {}
        #: Whether the operations run as one statement each (else the portable ones).
        self.one_statement = is_psycopg3 and not options.get("server_side_binding")
        self._statements = OperationStatements(self)
        self._shared = SharedStatements(self)
        self._prepared = PreparedStatements(using)

    def can_listen(self) -> bool:
        # psycopg2 has no notify handlers.
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return False
        return True

    def take(self, claim: Claim) -> Taken:
        if not self.one_statement:
            return super().take(claim)
        if not claim.exclusive:
            taken = in_lock_transaction(self, lambda: self._take_shared(claim))
            return super().take(claim) if taken is None else taken
        statements = self._statements
        statement = statements.take if claim.ticket is None else statements.take_leaving
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "duration": claim.duration,
            "ticket": claim.ticket,
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "held": claim.held_token,
        }
        taken = in_lock_transaction(self, lambda: self._taken(statement, params))
        if taken.row is None and taken.previous_owner == SHARED_HOLDERS:
            # Shared holders: the only one of them upgrades, a semaphore is
            # another kind; the portable operation tells.
            return super().take(claim)
        return taken

    def _take_shared(self, claim: Claim) -> Taken | None:
        """A reader's or a permit's acquisition in one statement; None where the
        portable operation decides (see ``postgresql.shared``)."""
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "duration": claim.duration,
            "limit": claim.limit,
            "reentrant": int(claim.adds_a_hold),
            "label": claim.label,
            "ticket": NO_TICKET if claim.ticket is None else claim.ticket,
            "held": claim.held_token,
        }
        answer = self._run(self._shared.take_shared, params)
        if answer is None:  # no row for the resource yet
            return None
        action, header_owner, _, *hold = answer
        if action == shared.REFUSED:
            return Taken(row=None, previous_owner=header_owner, renewed=False)
        if action == shared.PORTABLE or hold[0] is None:
            return None
        row = self._hold_row(hold, self._hold_select[1])
        return Taken(row=row, previous_owner=header_owner, renewed=action == shared.AGAIN)

    def _taken(self, statement: Statement, params: dict[str, Any]) -> Taken:
        owner, _, row = self._decided(statement, params)
        if owner is None and row is None:
            # The row vanished (purged while the lock waited for it), or it
            # appeared after the statement's snapshot, held by another owner: in
            # either case a statement with a new snapshot sees it as it is now.
            owner, _, row = self._decided(statement, params)
        if row is None:
            return Taken(row=None, previous_owner=owner, renewed=False)
        # A re-acquisition keeps acquired_at; a new holder's is the database's
        # now. (A row that appeared after the statement's snapshot has no owner
        # before: ON CONFLICT judged it.)
        return Taken(row=row, previous_owner=owner, renewed=row.acquired_at < row.now)

    def extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        if not self.one_statement:
            return super().extend(resource, owner, duration)
        params = {"resource": resource, "owner": owner, "duration": duration}
        held_by, held, row = in_lock_transaction(
            self, lambda: self._decided(self._statements.extend, params)
        )
        if row is None and held and held_by == SHARED_HOLDERS:
            return super().extend(resource, owner, duration)  # a shared hold's
        return Renewed(row=row, exists=held_by not in (None, ""))

    def give_up(self, resource: str, owner: str | None, *, forced: bool = False) -> Released:
        if not self.one_statement or (forced and owner is not None):
            return super().give_up(resource, owner, forced=forced)
        if owner is not None:
            params = {"resource": resource, "owner": owner}
            released = in_lock_transaction(self, lambda: self._release(params))
            return super().give_up(resource, owner) if released is None else released
        # An operator's: whoever holds it (shared holds: the portable operation).
        params = {"resource": resource}
        held_by, held, row = in_lock_transaction(
            self, lambda: self._decided(self._statements.force_release, params)
        )
        if not held or held_by is None:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if row is None:  # shared holders hold it
            return super().give_up(resource, None, forced=True)
        held_row = replace(row, owner=held_by, expires_at=row.now)  # as it was held
        return Released(row=row, owner=held_by, result=ReleaseResult.RELEASED, released=(held_row,))

    def _release(self, params: dict[str, Any]) -> Released | None:
        """The owner's release: the short statement where the row allows it
        (``release_alone``: an exclusive hold, no queue), else the full one; None where the portable
        operation decides. Each runs as a transaction of its own."""
        alone = self._run(self._statements.release_alone, params)
        if alone is None:
            return self._released(self._answer(self._shared.release, params))
        row = self._row(alone)
        if row.owner:  # one hold of several went
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        held = replace(row, owner=params["owner"])
        gone = replace(held, owner="")
        return Released(row=gone, owner=held.owner, result=ReleaseResult.RELEASED, released=(held,))

    def _released(self, answer: Sequence[Any]) -> Released | None:
        """``Released`` from the answer of ``shared.release``; None where the
        portable operation decides."""
        outcome, held_by, _, *rest = answer
        if outcome == shared.NOT_FOUND:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if outcome == shared.FORBIDDEN:
            return Released(row=None, owner=held_by or "", result=ReleaseResult.FORBIDDEN)
        if outcome == shared.PORTABLE:
            return None
        header, hold = rest[: len(self.columns) + 1], rest[len(self.columns) + 1 :]
        if header[0] is not None:  # the exclusive holder's
            row = self._row(header)
        else:
            row = self._hold_row(hold, self._hold_select[1])
        if outcome == shared.DECREMENTED:
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        # The exclusive row comes back as released (no owner); a hold, as it was.
        held = replace(row, owner=held_by) if header[0] is not None else row
        gone = replace(held, owner="", expires_at=row.now)
        return Released(row=gone, owner=held.owner, result=ReleaseResult.RELEASED, released=(held,))

    def _decided(
        self, statement: Statement, params: dict[str, Any]
    ) -> tuple[str | None, bool, LockRow | None]:
        """Run one operation's statement: the locked row's owner (None without a
        row) and whether it was held, and the row as written (None without a
        write)."""
        owner, held, *written = self._answer(statement, params)
        # A release's count of woken waiters may follow the row and its now.
        row = None if written[0] is None else self._row(written[: len(self.columns) + 1])
        return owner, bool(held), row

    def _answer(self, statement: Statement, params: dict[str, Any]) -> Sequence[Any]:
        """Run a statement that answers one row whatever it finds (its answer
        is a ``SELECT`` from ``(SELECT) one LEFT JOIN ...``); that row."""
        answer = self._run(statement, params)
        assert answer is not None  # noqa: S101 - such a statement always answers
        return answer

    def _run(self, statement: Statement, params: dict[str, Any]) -> Sequence[Any] | None:
        """Run ``statement`` in the lock transaction; its one row (None from a
        statement that wrote nothing and answers nothing then).

        The outermost lock transaction's only statement is sent in autocommit,
        where the server runs it as a transaction of its own: BEGIN and COMMIT
        cost no round trip (psycopg would wait for its BEGIN before sending the
        statement), and Django's commit on leaving ``atomic()`` finds no
        transaction open and sends nothing. It runs prepared (see
        ``django_dlock.backends.postgresql.prepared``). Inside another
        transaction (Django's TestCase wraps each test in one) it runs in that
        one, as plain SQL.
        """
        connection = self.connection
        with connection.cursor() as cursor:
            raw = connection.connection
            alone = atomic_depth(connection) == 1 and raw.info.transaction_status == PQTRANS_IDLE
            if not alone:
                cursor.execute(statement.sql, params)
                return cast(Sequence[Any] | None, cursor.fetchone())
            raw.autocommit = True
            try:
                self._prepared.execute(cursor, raw, statement, params)
            finally:
                # A connection that broke stays as it is: Django closes it.
                if raw.info.transaction_status == PQTRANS_IDLE:
                    raw.autocommit = False
            return cast(Sequence[Any] | None, cursor.fetchone())

    # -- waking the head of the queue ------------------------------------------------
    # A release NOTIFYs the channel of the head of the resource's queue (its
    # process's listener) with the head's ticket, and only when there is one:
    # NOTIFY takes a lock on the whole database's notification queue at commit,
    # which a release without waiters must not pay. The listener wakes that
    # waiter alone.

    def enqueue_waiter(
        self, claim: Claim, seconds: float, *, channel: str = "", listener_pid: int | None = None
    ) -> tuple[int, QueueRow]:
        # FOR KEY SHARE of the lock row (when there is one) makes the INSERT wait
        # for a release in flight, and a release wait for an INSERT in flight: a
        # release either sees the ticket (and names it) or committed before the
        # lock row was read here. (A locking read that waited returns the row as
        # the release left it, though the statement's snapshot is older.) The
        # queue ahead is counted in the same statement: one round trip, where
        # an INSERT and then a look would take two, both on the path of a hand-over.
        qn = self.qn
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        waiters = self.waiters_table
        names = ("resource", "owner", "expires_at", *WANTS)
        sql = (
            f"WITH held AS (SELECT {qn('owner')} AS owner, {qn('expires_at')} AS expires_at, "  # noqa: S608
            f"{qn('limit')} AS lim FROM {self.table} WHERE {qn('resource')} = %s FOR KEY SHARE), "
            f"queued AS (INSERT INTO {waiters} ({', '.join(qn(name) for name in names)}) "
            f"SELECT %s, %s, {expires_sql}, %s, %s::interval, %s, %s::integer, %s, %s::integer "
            "FROM (SELECT COUNT(*) FROM held) "
            f"locked, {ASYNC_COMMIT} RETURNING {qn('id')} AS id), "
            f"ahead AS (SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE w.{qn('mode')} = '{EXCLUSIVE}') "
            f"AS x, MIN(w.{qn('id')}) AS h FROM {waiters} w, queued WHERE w.{qn('resource')} = %s "
            f"AND w.{qn('id')} < queued.id AND {self.live_waiter_sql('w.')}) "
            f"SELECT queued.id, held.owner, held.expires_at, {now_sql}, ahead.n, ahead.x, "
            f"held.lim, ({self.holders_sql()}), ahead.h FROM queued CROSS JOIN ahead LEFT JOIN held ON TRUE"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    claim.resource,
                    claim.resource,
                    claim.owner,
                    *expires_params,
                    *self._wants(claim, channel, listener_pid),
                    claim.resource,
                    claim.resource,
                ],
            )
            ticket, *state = cursor.fetchone()
        return int(ticket), QueueRow.of(*state)

    def mark_released(self, row: LockRow) -> None:
        # The portable release's write: the head takes the lock here too (``handover``).
        values = self._released_values(row)
        t = self.table
        as_released = {"owner": "%s", "expires_at": "%s", "limit": "NULL"}
        sql = (
            f"WITH head AS ({head_sql(self, ticket=str(NO_TICKET_EXCLUDED), locked=True)}), "  # noqa: S608
            f"{fitting_sql(self)}, {handed_sql(self, 'TRUE')} UPDATE {t} "
            f"SET {granting(self, as_released, t + '.')} FROM (SELECT) one "
            f"LEFT JOIN handed {HANDED} ON TRUE WHERE {t}.{self.pk_column} = %s "
            f"RETURNING ({wake_sql(readers=True)})"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [row.resource, *values, row.pk])

    def live_waiter_sql(self, alias: str = "") -> str:
        # A ticket whose listener's server process is gone is a dead waiter's:
        # killed, or its host lost (its connection then ends at the keepalive
        # timeout the listener sets).
        pid = f"{alias}{self.qn('listener_pid')}"
        return (
            f"{super().live_waiter_sql(alias)} AND ({pid} IS NULL OR "
            f"EXISTS (SELECT FROM pg_stat_get_activity({pid})))"
        )

    def session_pid(self) -> int | None:
        connection = self.connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        # Behind a pooler the server's process changes from one transaction to
        # the next (and is not the one the pooler reports): no such check then.
        raw = connection.connection
        reported = raw.info.backend_pid if hasattr(raw, "info") else raw.get_backend_pid()
        return int(pid) if pid == reported else None

    def wake_head(self, resource: str) -> None:
        # NOTIFY goes out when the transaction commits. The waiters that fit
        # beside the head (readers, the permits left free) are woken with it.
        sql = f"WITH head AS ({head_sql(self)}), {fitting_sql(self)} {wake_sql(readers=True)}"
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [resource, NO_TICKET_EXCLUDED])

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
        # Leaving without the lock while it is free: the next waiter would
        # otherwise wait for a release that already happened. A ticket that is
        # gone was handed the lock by a release (``handover``).
        qn = self.qn
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        held = (
            f"SELECT 1 FROM {self.table} l WHERE l.{qn('resource')} = %s "  # noqa: S608
            f"AND l.{qn('owner')} <> '' AND l.{qn('expires_at')} > {now_sql}"
        )
        sql = (
            f"WITH gone AS (DELETE FROM {self.waiters_table} WHERE {qn('id')} = %s "  # noqa: S608
            f"AND {ASYNC_COMMIT_CONDITION} RETURNING 1), "
            f"head AS ({head_sql(self, f'AND NOT EXISTS ({held})')}), {fitting_sql(self)} "
            f"SELECT (SELECT COUNT(*) FROM gone), ({wake_sql(readers=True)})"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [ticket, resource, ticket, resource])
            (queued, _) = cursor.fetchone()
        return bool(queued)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return PostgreSQLChecks(self.using).check(**kwargs)


# libpq's transaction status of a connection with no transaction open.
PQTRANS_IDLE = 0
