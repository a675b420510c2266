"""How long a waiter of ``lock()`` sleeps between two looks at the lock: the
policy alone, with no database, so that it can be tested on its own."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django_dlock.conf import conf

if TYPE_CHECKING:
    # For the annotations only: at run time the policy needs no database.
    from django_dlock.locking.queue import QueueState

__all__ = ["LISTENING_LOOKS", "Backoff"]

# A listening waiter still looks every LISTENING_LOOKS x DLOCK_BACKOFF_MAX
# seconds, in case a wake-up went astray.
LISTENING_LOOKS = 4
# The longest a listening head of a queue sleeps where waiters share the
# database's host (SQLite), in seconds.
SHARED_HOST_HEAD_LOOKS = 0.05
# When a listening waiter that just queued looks a second time, in seconds:
# after any release in flight as it queued has committed.
NEW_WAITER_LOOKS_AGAIN = 0.05


@dataclass
class Backoff:
    """The sleeps of one wait: it learns how fast the queue moves from the looks
    (``learn``) and answers how long to sleep after each (``sleep``)."""

    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0  # looks since the lock last changed hands or the queue moved
    ahead: int | None = None  # waiters ahead at the last look
    holder: str | None = None  # the holder at the last look
    moved_at: float = 0.0  # when the queue last moved (monotonic)
    head_since: float | None = None  # when the waiter was first seen at the head
    turn: float | None = None  # seconds per turn of the queue, as observed
    looked_again: bool = False  # a listening head's early second look is scheduled

    def restart(self) -> None:
        """Look again soon: a caller that does not wait took the lock just now."""
        self.attempt = 0

    def learn(self, state: QueueState, now: float | None = None) -> None:
        """Learn how long a turn of the queue takes, from how it moved."""
        now = time.monotonic() if now is None else now
        if self.ahead is not None and state.ahead < self.ahead:
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
        if state.is_head and self.head_since is None:
            self.head_since = now
        self.ahead, self.holder = state.ahead, state.holder

    def sleep(
        self,
        state: QueueState,
        *,
        listening: bool,
        shares_host: bool,
        refresh_in: float,
        now: float | None = None,
    ) -> float:
        """Seconds to sleep after a look that saw ``state``. ``listening``: a
        release wakes this waiter; ``shares_host``: every waiter runs on the
        database's host, where a look costs microseconds; ``refresh_in``: seconds
        until the waiter's ticket needs refreshing."""
        now = time.monotonic() if now is None else now
        if listening and (state.is_head or not state.free):
            # A release wakes us; the timer covers an expiry and the ticket.
            sleep = min(LISTENING_LOOKS * conf.BACKOFF_MAX, max(refresh_in, 0.0))
            if state.is_head and shares_host:
                # A datagram does not cross network namespaces (containers that
                # share the SQLite file): the head still looks now and then.
                sleep = min(sleep, SHARED_HOST_HEAD_LOOKS)
            elif not self.looked_again:
                # A release whose statement began before this ticket was queued
                # does not see it (PostgreSQL: one snapshot per statement), and
                # wakes nobody: neither a waiter that queued as the head nor one
                # whose waiters ahead left while that release ran (a reader
                # admitted meanwhile). So a waiter that just queued looks once
                # more soon after.
                self.looked_again = True
                sleep = min(sleep, NEW_WAITER_LOOKS_AGAIN)
        elif not state.is_head and self.turn is not None:
            # Nothing to do before those ahead have had their turns: sleep a
            # quarter to half of that, so that looking costs little while the
            # queue moves. (Longer feeds back: turns seem slower, waits grow.)
            sleep = self.rng.uniform(0.25, 0.5) * state.ahead * self.turn
            sleep = min(sleep, conf.BACKOFF_MAX)
            sleep = max(sleep, self.rng.uniform(0, conf.BACKOFF_BASE))
        elif state.is_head and shares_host:
            # The head, where looking costs microseconds: look often, less so
            # the longer the holder keeps the lock.
            waited = now - (self.head_since or now)
            window = min(conf.BACKOFF_MAX, conf.BACKOFF_BASE * max(1.0, waited))
            sleep = self.rng.uniform(0.5, 1.0) * window
        else:
            # The first in line (or a waiter that has not seen the queue move):
            # capped exponential backoff with full jitter.
            window = min(conf.BACKOFF_MAX, conf.BACKOFF_BASE * 2**self.attempt)
            self.attempt = min(self.attempt + 1, 32)
            sleep = self.rng.uniform(0, window)
        if state.holder_left is not None and state.is_head:
            sleep = min(sleep, max(state.holder_left, 0.0))  # never past the holder's expiry
        return sleep


# The shortest time a head may leave the lock free before the waiters behind
# it pass it, in seconds (``head_grace``).
HEAD_GRACE = 1.0


def head_grace() -> float:
    """How long (seconds) a head may leave the lock free before the waiters
    behind it pass it (``Wait._passed_stalled_head``): twice the longest sleep
    of a head that polls, so that a head that answers always looks within it."""
    return max(HEAD_GRACE, 2 * conf.BACKOFF_MAX)
