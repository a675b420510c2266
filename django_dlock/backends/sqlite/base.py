"""SQLite's SQL for the lock operations, and the wake-up of the head of a queue."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from typing import Any, TypeVar

from django.core.checks import CheckMessage
from django.db import transaction
from django.db.models import DurationField
from django.db.models.expressions import RawSQL

from django_dlock.backends.base import LockBackend, PurgedBatch
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.queue import HANDOVER_LEASE, QueueRow
from django_dlock.backends.results import Claim, LockRow
from django_dlock.backends.sqlite.checks import SQLiteChecks
from django_dlock.backends.sqlite.features import SQLiteFeatures
from django_dlock.django_private import atomic_depth, compile_expression, sqlite_begin_immediate
from django_dlock.listeners.sqlite import alive, wake
from django_dlock.rules import EXCLUSIVE
from django_dlock.transactions import in_lock_transaction

_T = TypeVar("_T")

# SQLite's primary result code for "database is locked".
SQLITE_BUSY = 5
# The pauses between tries to begin a lock transaction: 0.1 ms more each time,
# up to 1 ms (a write of another lock operation lasts a fraction of that cap).
BUSY_PAUSE = 0.0001
BUSY_PAUSE_MAX = 0.001


class SQLiteBackend(LockBackend):
    vendor = "sqlite"
    features_class = SQLiteFeatures

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
    # offers it the lock (a new holder, a larger token, for HANDOVER_LEASE) and
    # drops its ticket; once committed, it sends the head a datagram (``wake``),
    # and the waiter takes the offer for its ttl (``granted``, one UPDATE). So
    # the next holder's turn begins with no acquisition of its own to wait for
    # the write lock, and a head that crashed or stopped answering while queued
    # holds the lock up for the lease, not its ttl. A head that polls, or whose
    # process predates the ttl column, takes the lock itself.

    def mark_released(self, row: LockRow) -> None:
        values = self._released_values(row)
        with self.connection.cursor() as cursor:
            # The UPDATE returns the head of the queue (one statement, as without waiters).
            cursor.execute(self._release_sql, [*values, row.pk, row.resource])
            head = _listening(cursor.fetchone()[0])
            if head is not None and not alive(head[0]):
                head = self._head(row.resource)  # the first that lives
            if head is not None:
                ticket = head[1]
                cursor.execute(self._grant_sql, [ticket, ticket, ticket, row.pk, ticket, ticket])
                if cursor.rowcount == 1:  # the head had a ttl: it holds the lock now
                    cursor.execute(self._leave_sql, [ticket])
        if head is not None:
            transaction.on_commit(lambda: wake(*head), using=self.using)

    @cached_property
    def _release_sql(self) -> str:
        qn = self.qn
        return (
            f"UPDATE {self.table} SET {qn('owner')} = %s, {qn('expires_at')} = %s, "  # noqa: S608
            f"{qn('limit')} = NULL WHERE {self.pk_column} = %s RETURNING ({self._head_sql()})"
        )

    @cached_property
    def _grant_sql(self) -> str:
        """UPDATE: the released lock (a placeholder) to the waiter of a ticket
        (five placeholders), if it has a ttl and wants it exclusively."""
        qn = self.qn
        # The ticket's placeholder inside the expression gets its value with the others.
        # The offer's lease: the ttl (microseconds, as SQLite keeps a duration), at most HANDOVER_LEASE.
        lease = f"MIN({self._of_waiter('ttl')}, {round(HANDOVER_LEASE * 1_000_000)})"
        ttl = RawSQL(lease, [], output_field=DurationField())  # noqa: S611 - identifiers only
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, DatabaseNow() + ttl)
        assert not expires_params  # noqa: S101 - DatabaseNow() and a column are plain SQL
        # Only to a head that wants the lock exclusively: readers and permits
        # are admitted by their own acquisitions.
        return (
            f"UPDATE {self.table} SET {qn('owner')} = {self._of_waiter('owner')}, "  # noqa: S608
            f"{qn('label')} = {self._of_waiter('label')}, "
            f"{qn('acquired_at')} = {now_sql}, {qn('expires_at')} = {expires_sql}, "
            f"{qn('fencing_token')} = {qn('fencing_token')} + 1, {qn('hold_count')} = 1, "
            f"{qn('limit')} = NULL WHERE {self.pk_column} = %s "
            f"AND {self._of_waiter('ttl')} IS NOT NULL AND {self._of_waiter('mode')} = '{EXCLUSIVE}'"
        )

    def _of_waiter(self, column: str) -> str:
        """SQL: ``column`` of the waiter whose ticket is a placeholder."""
        qn = self.qn
        return f"(SELECT w.{qn(column)} FROM {self.waiters_table} w WHERE w.{qn('id')} = %s)"  # noqa: S608

    def granted(
        self, resource: str, owner: str, ticket: int, duration: timedelta
    ) -> LockRow | None:
        # A write: in a lock transaction, as the queue's writes (below).
        return self._queue_write(
            lambda: super(SQLiteBackend, self).granted(resource, owner, ticket, duration)
        )

    def wake_head(self, resource: str) -> None:
        head = self._head(resource)
        if head is not None:
            transaction.on_commit(lambda: wake(*head), using=self.using)

    # -- the queue's writes --------------------------------------------------------
    # Each is a lock transaction (BEGIN IMMEDIATE, waiting for the write lock in
    # short steps: see transaction()). In autocommit they would wait in SQLite's
    # busy handler, which sleeps whole milliseconds between tries, and lose the
    # write lock to the lock transactions' quicker tries again and again, until
    # their busy timeout ran out.

    def _queue_write(self, write: Callable[[], _T]) -> _T:
        if atomic_depth(self.connection):  # inside Django's TestCase transaction
            return write()
        return in_lock_transaction(self, write)

    def enqueue_waiter(
        self, claim: Claim, seconds: float, *, channel: str = "", listener_pid: int | None = None
    ) -> tuple[int, QueueRow]:
        enqueue = super().enqueue_waiter
        return self._queue_write(
            lambda: enqueue(claim, seconds, channel=channel, listener_pid=listener_pid)
        )

    def refresh_waiters(self, tickets: Sequence[int], seconds: float) -> None:
        refresh = super().refresh_waiters
        self._queue_write(lambda: refresh(tickets, seconds))

    def drop_dead_waiters(self, resource: str) -> None:
        drop = super().drop_dead_waiters
        self._queue_write(lambda: drop(resource))

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
        # Leaving without the lock while it is free: the next waiter would
        # otherwise wait for a release that already happened.
        def leave() -> tuple[bool, tuple[str, int] | None]:
            return self.leave_queue(ticket), self._head(resource, unless_held=True)

        queued, head = self._queue_write(leave)
        if head is not None:
            wake(*head)
        return queued

    def _head(self, resource: str, *, unless_held: bool = False) -> tuple[str, int] | None:
        """The channel and ticket of the live waiter first in line for
        ``resource``, when it listens (and, ``unless_held``, the lock is free).
        A waiter whose process is gone (its listener's socket refuses) is
        dropped on the way: it never gets the lock, nor holds up the queue."""
        while True:
            with self.connection.cursor() as cursor:
                sql = self._head_sql(unless_held=unless_held)
                cursor.execute(sql, [resource, resource] if unless_held else [resource])
                row = cursor.fetchone()
            head = None if row is None else _listening(row[0])
            if head is None or alive(head[0]):
                return head
            self.leave_queue(head[1])

    def prune_ahead(self, resource: str, ticket: int) -> None:
        # Every process of the database is on this host: a ticket ahead whose
        # listener's socket refuses is a dead waiter's.
        qn = self.qn
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {qn('id')}, {qn('channel')} FROM {self.waiters_table} "  # noqa: S608
                f"WHERE {qn('resource')} = %s AND {qn('id')} < %s AND {qn('channel')} <> '' "
                f"AND {self.live_waiter_sql()}",
                [resource, ticket],
            )
            ahead = cursor.fetchall()
        dead = [ticket_ahead for ticket_ahead, channel in ahead if not alive(channel)]
        if dead:
            self._queue_write(lambda: [self.leave_queue(ticket_ahead) for ticket_ahead in dead])

    def _head_sql(self, *, unless_held: bool = False) -> str:
        """SQL: "channel ticket" of the first live waiter of a resource (a
        placeholder). ``unless_held``: only while the lock (a second
        placeholder) is free."""
        qn = self.qn
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        held = (
            f"AND NOT EXISTS (SELECT 1 FROM {self.table} l WHERE l.{qn('resource')} = %s "  # noqa: S608
            f"AND l.{qn('owner')} <> '' AND l.{qn('expires_at')} > {now_sql})"
        )
        return (
            f"SELECT w.{qn('channel')} || ' ' || w.{qn('id')} FROM {self.waiters_table} w "  # noqa: S608
            f"WHERE w.{qn('resource')} = %s AND w.{qn('expires_at')} > {now_sql} "
            f"{held if unless_held else ''} ORDER BY w.{qn('id')} LIMIT 1"
        )

    def _purge_batch(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
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
        # Chosen and deleted under the one write lock: nothing changed in between.
        return PurgedBatch(chosen=len(tokens), deleted=len(tokens))

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return SQLiteChecks(self.using).check(**kwargs)


def _listening(head: str | None) -> tuple[str, int] | None:
    """The channel and ticket of a head read as "channel ticket"; ``None`` for
    none, or for a head that polls (no channel)."""
    channel, _, ticket = (head or "").partition(" ")
    return (channel, int(ticket)) if channel else None
