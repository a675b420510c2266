"""Waiting for a lock: the queue of waiters kept in the database, and the backoff
between two looks.

Blocking waiters queue in ``LockWaiter`` in ``id`` order; only the first live
waiter tries to acquire, so a process that just released cannot jump back in
ahead of those already waiting.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django_dlock.backends import backend_for
from django_dlock.backends.clock import DatabaseNow, now_plus, time_left
from django_dlock.conf import conf
from django_dlock.exceptions import LockNotAcquired
from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.transactions import lock_transaction, refuse_callers_transaction

__all__ = ["WAITER_TTL", "QueueState", "Wait"]

# A waiter's row counts for this long (seconds) unless refreshed, so a waiter
# that crashed holds up the queue at most this long.
WAITER_TTL = 10.0


@dataclass
class Wait:
    """One blocking acquisition: the queue ticket and the backoff state.

    ``step()`` does one round of database work and returns the lock, or how
    long to sleep before the next round; the sync and async loops share it.
    """

    resource: str
    owner: str
    ttl: float
    timeout: float
    using: str
    deadline: float = 0.0
    ticket: int | None = None
    ticket_refreshed: float = 0.0
    attempt: int = 0
    ahead: int | None = None
    holder: str | None = None
    moved_at: float = 0.0
    turn: float | None = None  # seconds per turn of the queue, as observed
    tries: int = 0
    started: float = 0.0  # monotonic time before the last acquire was sent
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        # Queue rows written in the caller's transaction would be invisible to
        # the other waiters; fail as the manager's calls do.
        refuse_callers_transaction(self.using)

    def step(self) -> DistributedLock | float:
        manager = DistributedLock.objects.db_manager(self.using)
        if self.ticket is None:
            # Take the lock straight away only when nobody is queued for it.
            state = QueueState.read(self.using, self.resource, None)
            if state.free and state.ahead == 0:
                self.tries += 1
                self.started = time.monotonic()
                acquired = manager.acquire(self.resource, self.owner, self.ttl)
                if acquired is not None:
                    return acquired
            self.ticket = self._enqueue()
            if state.free:  # taken meanwhile, or came free: look again, as a waiter
                state = QueueState.read(self.using, self.resource, self.ticket)
            # Otherwise we are queued behind those counted just now (or a few
            # more): no need to look again before sleeping.
        else:
            state = QueueState.read(self.using, self.resource, self.ticket)
        if state.free and state.ahead == 0:
            self.tries += 1
            self.started = time.monotonic()
            # Take the lock and leave the queue in one transaction (one commit,
            # and no moment where the next waiter sees us ahead of it).
            with lock_transaction(self.using):
                acquired = manager.acquire(self.resource, self.owner, self.ttl)
                if acquired is not None:
                    self.leave_queue()
            if acquired is not None:
                return acquired
            self.attempt = 0  # a non-waiting caller took it: poll again soon
        now = time.monotonic()
        if self.ahead is not None and state.ahead < self.ahead:
            # The queue moved: learn how long a turn takes, and look again soon.
            per_turn = (now - self.moved_at) / (self.ahead - state.ahead)
            # Observed turns include our own lag in noticing them; lean towards
            # the fastest, so that slow looks cannot make turns seem ever slower.
            if self.turn is None or per_turn < self.turn:
                self.turn = per_turn
            else:
                self.turn = 0.9 * self.turn + 0.1 * per_turn
            self.moved_at = now
            self.attempt = 0
        elif self.ahead is None:
            self.moved_at = now
        if state.holder != self.holder:
            self.attempt = 0  # a new holder: its turn may be short
        self.ahead, self.holder = state.ahead, state.holder
        if now - self.ticket_refreshed > self._ticket_ttl() / 3:
            self._refresh_ticket()
        window = min(conf.BACKOFF_MAX, conf.BACKOFF_BASE * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        if state.ahead and self.turn is not None:
            # Nothing to do before those ahead have had their turns: sleep a
            # quarter to half of that, so that looking costs little while the
            # queue moves. (Longer feeds back: turns seem slower, waits grow.)
            sleep = self.rng.uniform(0.25, 0.5) * state.ahead * self.turn
            sleep = min(sleep, conf.BACKOFF_MAX)
            sleep = max(sleep, self.rng.uniform(0, conf.BACKOFF_BASE))
        else:
            # The first in line (or a waiter that has not seen the queue move):
            # capped exponential backoff with full jitter.
            sleep = self.rng.uniform(0, window)
        if state.holder_left is not None:
            sleep = min(sleep, max(state.holder_left, 0.0))  # never past the holder's expiry
        return min(sleep, max(self.deadline - now, 0.0))

    def timed_out(self) -> bool:
        return time.monotonic() >= self.deadline

    def failure(self) -> LockNotAcquired:
        return LockNotAcquired(
            f"Could not acquire the lock on {self.resource!r} within {self.timeout:g} s "
            f"({self.tries} tries): another owner held it."
        )

    def _ticket_ttl(self) -> float:
        return min(WAITER_TTL, max(self.deadline - time.monotonic(), 0.0) + 1.0)

    def _expiry(self) -> Any:
        return now_plus(timedelta(seconds=self._ticket_ttl()))

    def _enqueue(self) -> int:
        # One INSERT in autocommit: no transaction of its own to wait for.
        waiters = LockWaiter.objects.using(self.using)
        if self.rng.random() < 0.05:
            # Now and then, drop the rows of waiters that crashed (they no
            # longer count anyway) so that the table stays small.
            waiters.filter(resource=self.resource, expires_at__lte=DatabaseNow()).delete()
        waiter = waiters.create(resource=self.resource, owner=self.owner, expires_at=self._expiry())
        self.ticket_refreshed = time.monotonic()
        return waiter.pk

    def _refresh_ticket(self) -> None:
        LockWaiter.objects.using(self.using).filter(pk=self.ticket).update(
            expires_at=self._expiry()
        )
        self.ticket_refreshed = time.monotonic()

    def leave_queue(self) -> None:
        if self.ticket is not None:
            LockWaiter.objects.using(self.using).filter(pk=self.ticket).delete()
            self.ticket = None


@dataclass
class QueueState:
    holder: str | None  # the owner holding the lock, None when it is free
    free: bool
    holder_left: float | None  # seconds until the holder's lock expires
    ahead: int  # live waiters queued before the ticket (all of them without one)

    @classmethod
    def read(cls, using: str, resource: str, ticket: int | None) -> QueueState:
        """One statement, no transaction: whether the lock is free and who is ahead."""
        row = backend_for(using).queue_state(resource, ticket)
        if not row.owner or row.expires_at is None or row.now >= row.expires_at:
            return cls(holder=None, free=True, holder_left=None, ahead=row.ahead)
        left = time_left(row.expires_at, row.now)
        return cls(holder=row.owner, free=False, holder_left=left, ahead=row.ahead)
