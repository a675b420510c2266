"""The waiter queue of one database alias, as a blocking acquisition (``Wait``)
sees it: the one interface through which ``locking`` reads and writes the queue.

Each method is one call of the backend's queue (``backends/queue.py`` and the
vendors' subclasses hold the SQL); this module adds what a look means for a
waiter (``QueueState``, ``state_of``), and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError

from django_dlock.backends.features import BackendFeatures
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.queue_row import QueueRow
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.claim import Claim
from django_dlock.rules.clock import time_left
from django_dlock.rules.predicates import HELD, HELD_BY_SHARED, delay_end, is_head, may_join
from django_dlock.service import service_for

__all__ = ["Queue", "QueueState", "state_of"]

# How many times a waiter queues before a clash of tickets is an error.
TICKET_ATTEMPTS = 5


@dataclass
class QueueState:
    """What one look at the lock and its queue saw."""

    holder: str | None  # the owner holding the lock, None when it is free
    free: bool
    holder_left: float | None  # seconds until the holder's lock expires
    ahead: int  # live waiters queued before the ticket (all of them without one)
    admissible: bool | None = None  # whether an acquisition would be admitted now
    queued: bool = True  # the waiter's ticket is still in the queue (True without one)
    head: int | None = None  # the ticket of the first live waiter ahead, where known
    now: datetime | None = None  # the database's time of the look
    sent: float | None = None  # the monotonic time before it was read, where known

    def __post_init__(self) -> None:
        if self.admissible is None:  # an exclusive waiter's
            self.admissible = self.free and self.is_head

    @property
    def is_head(self) -> bool:
        """Nobody live is queued ahead (``IS_HEAD``)."""
        return is_head(self.ahead)

    @property
    def delayed(self) -> bool:
        """Nobody holds the lock, and its lock-delay runs (``state_of``)."""
        return self.holder == ""


class Queue:
    """The queue of waiters (``LockWaiter`` rows, in ticket order) on ``using``."""

    def __init__(self, using: str) -> None:
        self.using = using

    @property
    def _features(self) -> BackendFeatures:
        return service_for(self.using).features

    @property
    def _queue(self) -> WaiterQueue:
        return service_for(self.using).queue

    @property
    def grants_on_release(self) -> bool:
        """Whether a release hands the lock to the head of its queue (then the
        head accepts the offer rather than acquire)."""
        return self._features.grants_on_release

    @property
    def grants_shared_on_release(self) -> bool:
        """Whether such a release grants readers and permits their holds too."""
        return self._features.grants_shared_on_release

    @property
    def waiters_share_host(self) -> bool:
        """Whether every waiter runs on the database's host (SQLite): looking
        costs microseconds."""
        return self._features.waiters_share_host

    @property
    def waits_for_release(self) -> bool:
        """Whether the head can wait for the release in the database (MariaDB)."""
        return self._features.waits_for_release

    def wait_for_release(
        self, resource: str, holder: str, seconds: float, own: str = ""
    ) -> bool | None:
        """Wait up to ``seconds``, on this thread's connection, for ``holder``
        to release ``resource``, holding the gate of ``own`` (an owner, or "")
        meanwhile: whether it did; None where nothing tells
        (``WaiterQueue.wait_for_release``)."""
        return self._queue.wait_for_release(resource, holder, seconds, own)

    def owner_ahead(self, resource: str, ticket: int) -> str | None:
        """The owner of the live waiter just before ``ticket``, whose gate the
        waiter of ``ticket`` waits at (MariaDB); None where there is none."""
        return self._queue.owner_ahead(resource, ticket)

    def leave_gate(self, resource: str, owner: str) -> None:
        """Give up the gate ``wait_for_release`` held for ``owner``."""
        self._queue.leave_gate(resource, owner)

    def look(self, claim: Claim, ticket: int | None) -> QueueState:
        """One statement, no transaction: whether the lock would admit
        ``claim``, and who is ahead of ``ticket`` (of everyone when None)."""
        return state_of(self._queue.queue_state(claim.resource, ticket), claim)

    def join(
        self, claim: Claim, seconds: float, channel: str, pid: int | None
    ) -> tuple[int, QueueState]:
        """Queue a waiter of ``claim`` for ``seconds`` unless refreshed: its
        ticket, and the queue as seen once the ticket is in it. ``channel``:
        where a release wakes it ("" when it polls); ``pid``: the server
        connection that lives as long as the waiter (None: this thread's, where
        the database can tell)."""
        queue = self._queue
        if pid is None and not channel:
            pid = queue.session_pid()
        for attempt in range(TICKET_ATTEMPTS):
            try:
                ticket, row = queue.enqueue_waiter(
                    claim, seconds, channel=channel, listener_pid=pid
                )
            except IntegrityError:
                # Another process's ticket of the same tick and number: the
                # next number (``backends.tickets.TICKET_SPREAD``).
                if attempt == TICKET_ATTEMPTS - 1:
                    raise
                continue
            return ticket, state_of(row, claim)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def refresh(self, tickets: Sequence[int], seconds: float) -> None:
        """Keep the waiters of ``tickets`` queued for ``seconds`` more (one statement)."""
        self._queue.refresh_waiters(tickets, seconds)

    def leave(self, resource: str, ticket: int) -> bool:
        """Drop the waiter of ``ticket``, which leaves without the lock; whether
        it was still queued (if not, a release may have handed it the lock)."""
        return self._queue.give_up_waiting(resource, ticket)

    def pass_head(self, resource: str, ticket: int) -> None:
        """Drop the head's ``ticket``, as if it had left: it stopped answering,
        and the next waiter is told where it is not the one passing."""
        self._queue.give_up_waiting(resource, ticket)

    def prune(self, resource: str, ticket: int) -> None:
        """Drop the tickets ahead of ``ticket`` whose waiters are known to be
        dead, where the database can tell sooner than their expiry."""
        self._queue.prune_ahead(resource, ticket)

    def sweep(self, resource: str) -> None:
        """Delete the rows of ``resource``'s waiters that stopped refreshing
        them (they no longer count anyway), so that the table stays small."""
        self._queue.drop_dead_waiters(resource)


def state_of(row: QueueRow, claim: Claim) -> QueueState:
    """What a look that saw ``row`` means for a waiter of ``claim``: admitted
    as ``backends.admission`` would decide (a kind that does not match is tried
    too, so that the acquisition raises ``LockKindMismatch``)."""
    held = HELD.value(row, {})
    shared = HELD_BY_SHARED.value(row, {}) and row.holders > 0
    free = not held or (row.owner == SHARED_HOLDERS and row.holders == 0)
    available_at = delay_end(row)
    if available_at is not None:
        # Lost with a lock-delay that still runs: nobody holds it, nobody takes it.
        free, holder, left = False, "", time_left(available_at, row.now)
    elif free:
        holder, left = None, None
    else:
        assert row.expires_at is not None  # noqa: S101 - held
        holder, left = row.owner, time_left(row.expires_at, row.now)
    if claim.exclusive:
        admissible = free and is_head(row.ahead)
    else:
        holders, ahead, writers = (0 if free else row.holders), row.ahead, row.ahead_exclusive
        admissible = (free or (shared and row.limit == claim.kind.limit)) and may_join(
            claim.kind.limit, holders=holders, ahead=ahead, writers_ahead=writers
        )
    mismatch = held and not free and (row.limit if shared else None) != claim.kind.limit
    return QueueState(
        holder=holder,
        free=free,
        holder_left=left,
        ahead=row.ahead,
        admissible=admissible or mismatch,
        queued=row.queued,
        head=row.head,
        now=row.now,
        sent=row.sent,
    )
