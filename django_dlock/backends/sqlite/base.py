"""SQLite's lock operations: ``BEGIN IMMEDIATE`` lock transactions, and the
hand-over of a released lock to the head of its queue."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from django.db import transaction
from django.db.models import DurationField
from django.db.models.expressions import RawSQL

from django_dlock.backends.base import LockBackend
from django_dlock.backends.results import LockRow, Released, Taken
from django_dlock.backends.shared_grants import Granted
from django_dlock.backends.sqlite.alone import Alone
from django_dlock.backends.sqlite.checks import SQLiteChecks
from django_dlock.backends.sqlite.features import SQLiteFeatures
from django_dlock.backends.sqlite.purge import SQLitePurge
from django_dlock.backends.sqlite.queue import SQLiteQueue, listening
from django_dlock.backends.sqlite.throttles import SQLiteThrottleUses
from django_dlock.django_private import atomic_depth, compile_expression, sqlite_begin_immediate
from django_dlock.listeners.sqlite import alive, wake
from django_dlock.rules import EXCLUSIVE, SHARED
from django_dlock.rules.claim import Claim
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.grant import OFFER_LEASE
from django_dlock.rules.notice import GrantNotice

# SQLite's primary result code for "database is locked".
SQLITE_BUSY = 5
# The pauses between tries to begin a lock transaction: 0.1 ms more each time,
# up to 1 ms (a write of another lock operation lasts a fraction of that cap).
BUSY_PAUSE = 0.0001
BUSY_PAUSE_MAX = 0.001


class SQLiteBackend(LockBackend):
    vendor = "sqlite"
    features_class = SQLiteFeatures
    queue_class = SQLiteQueue
    purge_class = SQLitePurge
    checks_class = SQLiteChecks
    throttles_class = SQLiteThrottleUses
    queue: SQLiteQueue

    def __init__(self, using: str) -> None:
        super().__init__(using)
        self._alone = Alone(self)

    # Each operation has one entry, which dispatches once: to the statement
    # that settles the common case (``sqlite.alone``), else (None from it) to
    # the portable operation.

    def take(self, claim: Claim) -> Taken:
        taken = None
        if claim.exclusive and claim.ticket is None and claim.held_token is None:
            taken = self._alone.take(claim)
        return self.take_portable(claim) if taken is None else taken

    def give_up(
        self,
        resource: str,
        owner: str | None,
        *,
        forced: bool = False,
        mode: str | None = None,
        queued: bool = False,
    ) -> Released:
        # A hold its holder knows is shared, or was handed over by a release
        # (waiters are likely queued still): the one statement would write nothing.
        released = None
        if owner is not None and not forced and mode != SHARED and not queued:
            released = self._alone.release(resource, owner)
        return (
            self.give_up_portable(resource, owner, forced=forced) if released is None else released
        )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Start the lock transaction with ``BEGIN IMMEDIATE``, whatever the
        database's ``transaction_mode``: a deferred transaction that reads and then
        writes fails at once with "database is locked" when another process got the
        write lock first, while ``IMMEDIATE`` waits for it.

        It waits in ``in_lock_transaction`` (``retry_after``), not in SQLite's busy
        handler: that one sleeps 1, 2, 5... ms between tries, and a hand-over of a
        busy lock, whose writes last a fraction of a millisecond each, would wait
        a millisecond whenever the next holder's write met the last one's. So the
        busy timeout is 0 for the transaction (set on the driver's connection: a
        setting of the session, not a statement of the operation), except inside
        a transaction (Django's TestCase), where nothing begins and nothing would
        run the operation again.
        """
        connection = self.connection
        connection.ensure_connection()  # the backend reads transaction_mode on connecting
        session = connection.connection
        busy_ms = None
        if not atomic_depth(connection):
            (busy_ms,) = session.execute("PRAGMA busy_timeout").fetchone()
            session.execute("PRAGMA busy_timeout = 0")
        try:
            with sqlite_begin_immediate(connection):
                yield
        finally:
            if busy_ms is not None and connection.connection is session:  # not closed meanwhile
                session.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        code = getattr(error.__cause__, "sqlite_errorcode", None)
        if code is None or code & 0xFF != SQLITE_BUSY:
            return None
        # Up to the session's busy timeout (OPTIONS "timeout", the driver's
        # default 5 s, or a PRAGMA), as SQLite's own handler would wait.
        (busy_ms,) = self.connection.connection.execute("PRAGMA busy_timeout").fetchone()
        if time.monotonic() - started >= busy_ms / 1000:
            return None
        return min(BUSY_PAUSE_MAX, BUSY_PAUSE * attempt)

    # -- handing the lock to the head of the queue ---------------------------------
    # A release reads the head of the resource's queue in its transaction. When
    # the head listens and says how long it takes the lock for, the release
    # offers it the lock (a new holder, a larger token, for OFFER_LEASE) and
    # drops its ticket; once committed, it sends the head a datagram (``wake``),
    # and the waiter takes the offer for its ttl (``granted``, one UPDATE). So
    # the next holder's turn begins with no acquisition of its own to wait for
    # the write lock, and a head that crashed or stopped answering while queued
    # holds the lock up for the lease, not its ttl. A head that polls, or whose
    # process predates the ttl column, takes the lock itself.

    def mark_released(self, row: LockRow) -> None:
        values = self.rows.released_values(row)
        with self.connection.cursor() as cursor:
            # The UPDATE returns the head of the queue (one statement, as without waiters).
            cursor.execute(self._release_sql, [*values, row.pk, row.resource])
            head = listening(cursor.fetchone()[0])
            if head is not None and not alive(head[0]):
                head = self.queue.head(row.resource)  # the first that lives
            told: list[Granted] = []
            if head is not None:
                ticket = head[1]
                cursor.execute(self._grant_sql, [ticket, ticket, ticket, row.pk, ticket, ticket])
                grant = cursor.fetchone()
                if grant is not None:  # the head had a ttl: it holds the lock now
                    cursor.execute(self.queue.leave_sql, [ticket])
                    # The datagram tells it so: it starts without a write of its own.
                    told = [Granted(*head, _notice(grant))]
                else:  # a reader or a permit: it, and those that fit beside it
                    told = self.shared_grants.grant(row, ticket, alive)
        self._tell(head, told)

    def permit_freed(self, header: LockRow, held: list[LockRow]) -> None:
        # The head of the queue, and those that fit beside it, get the permit:
        # only a head whose process lives, as ``mark_released``'s (``SQLiteQueue.head``
        # probes it with ``alive`` and drops a dead one; ``_fitting``, those beside).
        head = self.queue.head(header.resource)
        if head is not None:
            self._tell(head, self.shared_grants.grant(header, head[1], alive, held))

    def _tell(self, head: tuple[str, int] | None, told: list[Granted]) -> None:
        """Once committed, tell the waiters ``told`` their grants, or wake ``head`` to look."""
        if told:
            for granted in told:
                transaction.on_commit(
                    lambda g=granted: wake(g.channel, g.ticket, g.payload),  # type: ignore[misc]
                    using=self.using,
                )
        elif head is not None:
            transaction.on_commit(lambda: wake(*head), using=self.using)

    @cached_property
    def _release_sql(self) -> str:
        tables = self.tables
        qn = tables.qn
        return (
            f"UPDATE {tables.table} SET {qn('owner')} = %s, {qn('expires_at')} = %s, "  # noqa: S608
            f"{qn('limit')} = NULL, {qn('lock_delay')} = NULL WHERE {tables.pk_column} = %s "
            f"RETURNING ({self.queue.channel_sql()})"
        )

    @cached_property
    def _grant_sql(self) -> str:
        """UPDATE: the released lock (a placeholder) to the waiter of a ticket
        (five placeholders), if it has a ttl and wants it exclusively."""
        tables = self.tables
        qn = tables.qn
        # The ticket's placeholder inside the expression gets its value with the others.
        # The offer's lease: the ttl (microseconds, as SQLite keeps a duration), at most OFFER_LEASE.
        lease = f"MIN({self._of_waiter('ttl')}, {round(OFFER_LEASE * 1_000_000)})"
        ttl = RawSQL(lease, [], output_field=DurationField())  # noqa: S611 - identifiers only
        now_sql, _ = compile_expression(tables.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(tables.using, DatabaseNow() + ttl)
        assert not expires_params  # noqa: S101 - DatabaseNow() and a column are plain SQL
        # Only to a head that wants the lock exclusively: readers and permits
        # get holds of their own (``shared_grants``). Its lock-delay is the mark of
        # a grant (``rules.grant.GRANT_MARK``, zero microseconds as SQLite
        # keeps a duration): an operator's release before the head confirmed
        # it revokes it.
        return (
            f"UPDATE {tables.table} SET {qn('owner')} = {self._of_waiter('owner')}, "  # noqa: S608
            f"{qn('label')} = {self._of_waiter('label')}, "
            f"{qn('acquired_at')} = {now_sql}, {qn('expires_at')} = {expires_sql}, "
            f"{qn('fencing_token')} = {qn('fencing_token')} + 1, {qn('hold_count')} = 1, "
            f"{qn('limit')} = NULL, {qn('lock_delay')} = 0 WHERE {tables.pk_column} = %s "
            f"AND {self._of_waiter('ttl')} IS NOT NULL AND {self._of_waiter('mode')} = '{EXCLUSIVE}' "
            f"RETURNING {tables.pk_column}, {qn('fencing_token')}, {qn('acquired_at')}, "
            f"{qn('expires_at')}"
        )

    def _of_waiter(self, column: str) -> str:
        """SQL: ``column`` of the waiter whose ticket is a placeholder."""
        qn = self.tables.qn
        return f"(SELECT w.{qn(column)} FROM {self.tables.waiters_table} w WHERE w.{qn('id')} = %s)"  # noqa: S608

    def granted(
        self,
        resource: str,
        owner: str,
        ticket: int,
        duration: timedelta,
        lock_delay: timedelta | None = None,
    ) -> LockRow | None:
        # A write: in a lock transaction, as the queue's writes (``SQLiteQueue.write``).
        return self.queue.write(
            lambda: super(SQLiteBackend, self).granted(
                resource, owner, ticket, duration, lock_delay
            )
        )


def _notice(grant: Sequence[Any]) -> GrantNotice:
    """The grant ``_grant_sql`` wrote (its row: pk, token, and the two times
    in UTC), as its wake-up tells it."""
    pk, token, acquired, expires = grant

    def moment(value: str | datetime) -> datetime:
        # (Text, or a datetime where the connection converts timestamps.)
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed

    return GrantNotice(int(pk), int(token), moment(acquired), moment(expires))
