"""SQLite's waiter queue: its writes in lock transactions, and the wake-up of
the head of a queue (a datagram to the head's process, ``listeners.sqlite``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import transaction

from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.queue_row import QueueRow
from django_dlock.backends.transactions import in_lock_transaction
from django_dlock.django_private import atomic_depth
from django_dlock.listeners.sqlite import alive, wake
from django_dlock.rules.claim import Claim

_T = TypeVar("_T")


class SQLiteQueue(WaiterQueue):
    def write(self, operation: Callable[[], _T]) -> _T:
        """Run the queue's write ``operation`` in a lock transaction (``BEGIN
        IMMEDIATE``, waiting for the write lock in short steps: see
        ``SQLiteBackend.transaction``). In autocommit it would wait in SQLite's
        busy handler, which sleeps whole milliseconds between tries, and lose
        the write lock to the lock transactions' quicker tries again and again,
        until its busy timeout ran out."""
        if atomic_depth(self.tables.connection):  # inside Django's TestCase transaction
            return operation()
        return in_lock_transaction(self.transactions, operation)

    def enqueue_waiter(
        self, claim: Claim, seconds: float, *, channel: str = "", listener_pid: int | None = None
    ) -> tuple[int, QueueRow]:
        enqueue = super().enqueue_waiter
        return self.write(
            lambda: enqueue(claim, seconds, channel=channel, listener_pid=listener_pid)
        )

    def refresh_waiters(self, tickets: Sequence[int], seconds: float) -> None:
        refresh = super().refresh_waiters
        self.write(lambda: refresh(tickets, seconds))

    def drop_dead_waiters(self, resource: str) -> None:
        drop = super().drop_dead_waiters
        self.write(lambda: drop(resource))

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
        # Leaving without the lock while it is free: the next waiter would
        # otherwise wait for a release that already happened.
        def leave() -> tuple[bool, tuple[str, int] | None]:
            return self.leave_queue(ticket), self.head(resource, unless_held=True)

        queued, head = self.write(leave)
        if head is not None:
            wake(*head)
        return queued

    def head(self, resource: str, *, unless_held: bool = False) -> tuple[str, int] | None:
        """The channel and ticket of the live waiter first in line for
        ``resource``, when it listens (and, ``unless_held``, the lock is free).
        A waiter whose process is gone (its listener's socket refuses) is
        dropped on the way: it never gets the lock, nor holds up the queue."""
        while True:
            with self.tables.connection.cursor() as cursor:
                sql = self.channel_sql(unless_held=unless_held)
                cursor.execute(sql, [resource, resource] if unless_held else [resource])
                row = cursor.fetchone()
            head = None if row is None else listening(row[0])
            if head is None or alive(head[0]):
                return head
            self.leave_queue(head[1])

    def prune_ahead(self, resource: str, ticket: int) -> None:
        # Every process of the database is on this host: a ticket ahead whose
        # listener's socket refuses is a dead waiter's.
        qn = self.tables.qn
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT w.{qn('id')}, w.{qn('channel')} {self.queued_before_sql('%s', '%s')} "
                f"AND w.{qn('channel')} <> ''",
                [resource, ticket],
            )
            ahead = cursor.fetchall()
        dead = [ticket_ahead for ticket_ahead, channel in ahead if not alive(channel)]
        if dead:
            self.write(lambda: [self.leave_queue(ticket_ahead) for ticket_ahead in dead])

    def channel_sql(self, *, unless_held: bool = False) -> str:
        """SQL: "channel ticket" of the head of a resource's queue (a
        placeholder). ``unless_held``: only while the lock (a second
        placeholder) is free."""
        qn = self.tables.qn
        held = self.unless_held_sql() if unless_held else ""
        return self.head_sql(f"w.{qn('channel')} || ' ' || w.{qn('id')}", held)

    def wake_head(self, resource: str) -> None:
        head = self.head(resource)
        if head is not None:
            transaction.on_commit(lambda: wake(*head), using=self.tables.using)


def listening(head: str | None) -> tuple[str, int] | None:
    """The channel and ticket of a head read as "channel ticket"; ``None`` for
    none, or for a head that polls (no channel)."""
    channel, _, ticket = (head or "").partition(" ")
    return (channel, int(ticket)) if channel else None
