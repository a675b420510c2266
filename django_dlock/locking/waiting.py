"""Waiting for a lock: the queue of waiters kept in the database, how the head of
the queue is woken, and the backoff between two looks where nothing wakes it.

Blocking waiters queue in ``LockWaiter`` in ``id`` order (the ticket); only the
first live waiter tries to acquire, so a process that just released cannot jump
back in ahead of those already waiting.

How the head learns that the lock came free:

- Where the process has a listener (PostgreSQL connected directly; SQLite on
  Linux): a release of a resource with waiters sends the head's ticket to the
  channel its ticket carries (``NOTIFY``, or a datagram), and this process's
  listener wakes that waiter alone. Where the release has made it the holder
  already (``grants_on_release``: SQLite, and PostgreSQL for a waiter that
  wants the lock exclusively) it finds the lock its own (``_granted``), and
  gives it back if its wait ended meanwhile. It still looks
  now and then (``LISTENING_LOOKS`` times the longest backoff), and at the
  holder's expiry, which no release announces. See
  ``django_dlock.listeners``.
- SQLite without a listener: all processes share one host and looking costs
  microseconds, so the head looks every few milliseconds (slower the longer it
  has waited).
- MariaDB: each waiter blocks at a gate, the holder's or the waiter's just
  ahead, until its release (``release_wait``). Elsewhere (PgBouncer, or where
  the gate tells nothing): backoff with full jitter, or the turns ahead.

In one process only the first waiter of a resource looks: the others sleep
until it leaves (``local_queues``): a thousand waiters cost what one does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime

from django_dlock import signals
from django_dlock.exceptions import LockNotAcquired
from django_dlock.listeners.base import Watch
from django_dlock.listeners.registry import listener_for
from django_dlock.locking import release_wait
from django_dlock.locking.backoff import Backoff, head_grace
from django_dlock.locking.deadlock import LOOK_EVERY, check_for_deadlock, declare_holding
from django_dlock.locking.local_queues import local_queues
from django_dlock.locking.queue import Queue, QueueState, state_of
from django_dlock.locking.refusals import wait_failure
from django_dlock.locking.told import take_shared_grant, told_grant
from django_dlock.locking.wakeup import Wakeup
from django_dlock.models import DistributedLock
from django_dlock.rules import Hold
from django_dlock.rules.claim import Claim
from django_dlock.service import Refusal, service_for

__all__ = ["WAITER_TTL", "Wait", "queue_state", "state_of"]

# A waiter's row counts for this long (seconds) unless refreshed, so a waiter
# that crashed holds up the queue at most this long.
WAITER_TTL = 10.0
# How long a waiter waits for the listener to be there before it queues (its
# first connection, a LISTEN), in seconds; past that it polls.
LISTEN_WAIT = 2.0


@dataclass
class Wait:
    """One blocking acquisition: the queue ticket, how it is woken, the backoff.

    ``step()`` does one round of database work and returns the lock, or how
    long to sleep (on ``wakeup``) before the next round; the sync and async
    loops share it. ``finish()`` ends the wait, with or without the lock.
    """

    claim: Claim
    timeout: float
    using: str
    wakeup: Wakeup = field(default_factory=Wakeup)
    backoff: Backoff = field(default_factory=Backoff)
    deadline: float = 0.0
    ticket: int | None = None
    ticket_until: float = 0.0  # monotonic time until which the ticket counts
    tries: int = 0
    started: float = 0.0  # monotonic time before the last acquire was sent
    cancelled: bool = False
    watch: Watch | None = None
    channel: str = ""  # the LISTEN channel the ticket carries ("" when it polls)
    began: float = 0.0  # monotonic time the wait began
    acquired: bool = False  # set by the loop that got the lock from step()
    # The head seen ahead of this waiter while the lock was free: its ticket,
    # and since when (monotonic), until the lock is taken or the head changes.
    stalled_head: tuple[int, float] | None = None
    # The (resource, owner) of the locks the waiting thread or task holds with
    # lock(): written on the ticket, and a cycle of such waiters looked for.
    holding: tuple[tuple[str, str], ...] = ()
    next_cycle_look: float = 0.0  # monotonic time of the next look for a cycle
    delayed: bool = False  # the last look found the lock in its lock-delay
    free_at: float | None = None  # when, by that look, it comes free (monotonic)
    # The wait for a release in the database, at a gate (``release_wait``).
    release_of: str | None = None
    unannounced: str | None = None
    released: bool = False
    chain: release_wait.Chain = field(default_factory=release_wait.Chain)
    # (``locking.told``) The lease a told grant gave where shorter than the ttl;
    # when the last step began (monotonic), and its look's (start, database now).
    lease: float | None = None
    told_late: bool = False  # told a grant it did not start on: it takes it (``_granted``)
    told: tuple[int, int] | None = None  # the ticket and token of the last grant it was told
    looked: float = 0.0
    clock: tuple[float, datetime] | None = None
    queue: Queue = field(init=False)

    @property
    def resource(self) -> str:
        return self.claim.resource

    @property
    def owner(self) -> str:
        return self.claim.owner

    def __post_init__(self) -> None:
        self.began = time.monotonic()
        self.deadline = self.began + self.timeout
        self.queue = Queue(self.using)
        # Rows of the caller's transaction: unseen by other waiters. Fail as managers do.
        service_for(self.using).refuse_callers_transaction()

    def step(self) -> Hold | float:
        self.looked, as_head = time.monotonic(), self.wakeup.clear()
        if self.ticket is None and local_queues.busy(self):
            # Another waiter of this process is queued for it: queue behind it
            # without looking, and sleep until it leaves (unless it left already).
            self._watch()
            state = self._enqueue()
            if not local_queues.first(self):
                return self._remaining()
        elif self.ticket is None:
            # The first look is the take itself: it takes only where the lock is
            # free for it and nobody is queued (``Claim.behind_queue``), one
            # statement where the lock is not contended.
            acquired = self._try(queued=False)
            if acquired is not None:
                return acquired
            self._watch()
            # Queuing looks again: the lock may have been taken or come free meanwhile,
            # or released before the ticket existed (so that no release names it).
            state = self._enqueue()
        elif (as_head and self._listening()) or release_wait.passed(self):
            # A release named this ticket the head, or the holder it waited for
            # in the database released: take it at once, without looking.
            acquired = told_grant(self) or self._granted() or self._try(queued=True)
            if acquired is not None:
                return acquired
            state = queue_state(self.using, self.claim, self.ticket)
        elif not local_queues.first(self):
            return self._remaining()  # the first waiter of this process looks
        else:
            state = queue_state(self.using, self.claim, self.ticket)
        if state.holder == self.owner:
            # Handed the lock by a release whose wake-up went astray (unless
            # this owner holds it elsewhere: then the wait goes on).
            acquired = self._granted()
            if acquired is not None:
                return acquired
        if self.ticket is not None and not state.queued:
            # A reader or a permit granted its hold by a release whose wake-up went astray?
            self.told_late = not self.claim.exclusive and self.queue.grants_shared_on_release
            if self.told_late and (acquired := self._granted()) is not None:
                return acquired
            if self.timed_out():
                # Its ticket lapsed (it was stuck past its deadline: in the
                # database, or paused) or was dropped, and its time is up: it
                # is no longer queued, and queuing again would take the lock late.
                return 0.0
            state = self._enqueue_again()
        if state.free and not state.is_head and self.ticket is not None:
            # Free, yet others ahead: dead waiters' tickets, where they can be
            # told, or a head that stopped answering.
            self.queue.prune(self.resource, self.ticket)
            if self._passed_stalled_head(state):
                state = queue_state(self.using, self.claim, self.ticket)
        else:
            self.stalled_head = None
        if state.admissible:
            acquired = self._try(queued=True)
            if acquired is not None:
                return acquired
            self.backoff.restart()  # a non-waiting caller took it: look again soon
        self.backoff.learn(state)
        self.delayed = state.delayed
        left = state.holder_left
        self.free_at = None if left is None else time.monotonic() + left
        if self.holding and self.ticket is not None:
            self._look_for_a_cycle()
        return self._sleep(state)

    def _look_for_a_cycle(self) -> None:
        """Raise ``LockDeadlock`` where this waiter closed a cycle of waiters
        (``locking.deadlock``), looking at most every ``LOOK_EVERY``."""
        now = time.monotonic()
        if now >= self.next_cycle_look and self.ticket is not None:
            self.next_cycle_look = now + LOOK_EVERY
            check_for_deadlock(self.using, self.ticket)

    def _passed_stalled_head(self, state: QueueState) -> bool:
        """Drop the head's ticket when the head has left the lock free for
        ``HEAD_GRACE`` (seen from here): it stopped answering (a paused
        process, which the database still sees connected), and the queue
        behind it would otherwise wait for its ticket to lapse. Whether it was
        dropped. A head that answers again finds its ticket gone and queues
        again, at the back (``_enqueue_again``)."""
        if state.head is None:
            return False
        now = time.monotonic()
        if self.stalled_head is None or self.stalled_head[0] != state.head:
            self.stalled_head = (state.head, now)
            return False
        if now - self.stalled_head[1] < head_grace():
            return False
        self.stalled_head = None
        # As if it had left the queue: the next waiter is told where it is not this one.
        self.queue.pass_head(self.resource, state.head)
        return True

    def timed_out(self) -> bool:
        return self.cancelled or time.monotonic() >= self.deadline

    def cancel(self) -> None:
        """End the wait early (from any thread): its next step or sleep gives up."""
        self.cancelled = True
        self.wakeup.set()

    def failure(self) -> LockNotAcquired:
        free_in = None if self.free_at is None else max(self.free_at - time.monotonic(), 0.0)
        return wait_failure(
            self.resource, self.timeout, self.tries, delayed=self.delayed, free_in=free_in
        )

    def finish(self) -> None:
        """Leave the queue (if still in it) and stop listening; wake the next
        waiter of this process, which looks from now on."""
        try:
            if self.ticket is not None:
                # Without the lock: if it is free, the next waiter is told.
                ticket, self.ticket = self.ticket, None
                if not self.queue.leave(self.resource, ticket):
                    self._give_back(ticket)
        finally:
            local_queues.leave(self)
            if self.watch is not None:
                self.watch.close()
                self.watch = None
            outcome = "acquired" if self.acquired else "cancelled" if self.cancelled else None
            outcome = outcome or ("timeout" if self.timed_out() else "error")
            waited = time.monotonic() - self.began
            signals.send_wait_ended(DistributedLock, self.claim, waited=waited, outcome=outcome)
            release_wait.leave(self)  # its own gate: a statement, last, that may fail

    # -- the steps -----------------------------------------------------------------

    def _try(self, *, queued: bool) -> Hold | None:
        self.tries += 1
        self.started = time.monotonic()
        leaving = self.ticket if queued else None
        claim = replace(self.claim, ticket=leaving, behind_queue=leaving is None)
        acquired = service_for(self.using).take(claim, instance=False)
        if isinstance(acquired, Refusal):
            return None
        if leaving is not None:
            self.ticket = None
        return acquired

    def _granted(self) -> Hold | None:
        """The lock, if a release handed it to this waiter (``grants_on_release``) and the
        offer stands; a reader or a permit waiter asks only where ``told_late``."""
        if self.ticket is None:
            return None
        started = time.monotonic()
        accepted = self._take_offer(self.ticket)
        if accepted is not None:
            self.ticket = None  # the release dropped it
            self.started = started  # the lock's time runs from the offer's taking
        return accepted

    def _take_offer(self, ticket: int) -> Hold | None:
        """The lock, for the claim's ttl, if a release offered it to the waiter
        of ``ticket`` and the offer still stands; None where none is offered."""
        duration = self.claim.duration
        if not self.claim.exclusive:  # a reader's, a permit's (``locking.told``)
            return take_shared_grant(self, ticket)
        if not (self.queue.grants_on_release and self.claim.exclusive) or duration is None:
            return None
        return service_for(self.using).accept_handover(
            self.resource, self.owner, ticket, duration, self.claim.lock_delay, instance=False
        )

    def _give_back(self, ticket: int) -> None:
        """Release a lock a release handed over as this wait ended without it
        (timed out, cancelled): the next waiter gets it at once, rather than
        when the offer lapses."""
        self.told_late = self.queue.grants_shared_on_release  # (a reader's, a permit's)
        if self._take_offer(ticket) is not None:
            DistributedLock.objects.db_manager(self.using).release(self.resource, self.owner)

    def _watch(self) -> None:
        """Subscribe to the releases that name this waiter, and give the listener
        a moment to get there (its first connection) before queuing."""
        listener = listener_for(self.using)
        if listener is None:
            return
        self.watch = listener.watch(self.wakeup)
        self.watch.listening(min(LISTEN_WAIT, self._remaining()))

    def _listening(self) -> bool:
        """Whether a release naming this waiter reaches it: its ticket carries
        the listener's channel, and the listener is connected."""
        return self.watch is not None and self.channel != "" and self.watch.listening()

    def _enqueue(self) -> QueueState:
        """Queue the waiter; the queue as seen once its ticket is in it."""
        if self.backoff.rng.random() < 0.05:
            # Now and then, drop the rows of waiters that crashed (they no
            # longer count anyway) so that the table stays small.
            self.queue.sweep(self.resource)
        seconds = self._ticket_ttl()
        # Releases notify the head's channel: only where it is listened to now.
        listening = self.watch is not None and self.watch.listening()
        self.channel = self.watch.channel if self.watch is not None and listening else ""
        # Where the database can tell, the ticket says which server connection
        # lives as long as the waiter: its listener's, or (None) the one it polls on.
        pid = self.watch.listener.backend_pid if self.channel and self.watch is not None else None
        # The look's clock (``locking.told``) from here, not from before the wait for the listener.
        self.looked = time.monotonic()
        self.ticket, state = self.queue.join(self.claim, seconds, self.channel, pid)
        if self.holding:
            declare_holding(self.using, self.ticket, self.holding)
        self.ticket_until = time.monotonic() + seconds
        if self.watch is not None:
            self.watch.claim(self.ticket)
        local_queues.join(self)
        return state

    def _enqueue_again(self) -> QueueState:
        """Queue again, at the back, a waiter whose ticket was dropped: a
        release handed it the lock, which an operator force-released (or which
        expired) before it looked; or it was dropped as a dead waiter's (it
        expired while the process was paused, its listener's socket refused).
        Without a ticket the others pass it unseen (a queued writer would no
        longer keep later readers out), and no release names it. Or its ticket
        lapsed (its process was stuck longer than the ticket lives): the
        others passed it, so it does not keep its place; its row goes."""
        lapsed, self.ticket = self.ticket, None
        local_queues.leave(self)
        if lapsed is not None:
            self.queue.leave(self.resource, lapsed)
        return self._enqueue()

    def _sleep(self, state: QueueState) -> float:
        """How long to sleep after a look that saw ``state``. This process's
        tickets for the resource are refreshed (one statement for all) at this
        look when they would fall due before the next: a wake-up of its own for
        the refresh would add a look as well."""
        self.release_of = release_wait.holder_to_wait_for(self, state)
        # (``locking.told``) From before the statement that read the now, where known.
        self.clock = (state.sent or self.looked, state.now) if state.now else self.clock
        sleep = self.backoff.sleep(
            state,
            listening=self._listening() or self.release_of is not None,
            shares_host=self.queue.waiters_share_host,
            refresh_in=WAITER_TTL / 2,
        )
        sleep = min(release_wait.chained_sleep(self, sleep), self._remaining())
        if self.holding:  # it may close a cycle: it looks again soon
            sleep = min(sleep, LOOK_EVERY)
        if local_queues.refresh_in(self) <= sleep:
            tickets = local_queues.tickets(self)
            self.queue.refresh(tickets, WAITER_TTL)
            local_queues.refreshed(self, time.monotonic() + WAITER_TTL)
        return sleep

    def _remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds`` in this thread (``wait_here``): see ``release_wait``."""
        release_wait.pause(self, seconds)

    def refresh_in(self) -> float:
        """Seconds until the ticket needs refreshing: when it has less than half
        of ``WAITER_TTL`` left, unless it outlives the wait anyway."""
        if self.ticket_until >= self.deadline + 1.0:
            return self._remaining() + 1.0
        return self.ticket_until - WAITER_TTL / 2 - time.monotonic()

    def _ticket_ttl(self) -> float:
        return min(WAITER_TTL, self._remaining() + 1.0)


def queue_state(using: str, claim: Claim, ticket: int | None) -> QueueState:
    """One statement, no transaction: whether the lock would admit ``claim``,
    and who is ahead (``Queue.look``)."""
    return Queue(using).look(claim, ticket)
