"""``LockHandle``: what the holder of a ``lock()`` gets, and whether the lock is lost."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django_dlock import signals
from django_dlock.exceptions import LockExpired, LockNotAcquired, LockNotOwned
from django_dlock.kinds import LockKind
from django_dlock.locking.renewal import RenewalFailure, renew_lock
from django_dlock.models import DistributedLock
from django_dlock.rules import SHARED, Hold, ReleaseResult
from django_dlock.rules.claim import EXCLUSIVE_KIND, claim_for
from django_dlock.service import Refusal, service_for
from django_dlock.threads import run_in_lock_thread

__all__ = ["EXPIRED_LOCALLY", "LockHandle", "report_lost"]

logger = logging.getLogger("django_dlock")

EXPIRED_LOCALLY = "it expired: its ttl passed without a renewal"


class LockHandle:
    """What ``with lock(...) as handle`` gives the holder; ``lock()`` makes it.

    ``lost`` is set when the holder can no longer count on the lock: an automatic renewal
    failed (expired and maybe taken over, released or purged, or a database error), its ttl
    passed without a renewal on this process's clock, or the release on exit found it gone.
    ``check()`` raises then. Looking at ``lost`` or ``is_lost`` changes nothing; ``check()``, a
    renewal or the exit records the loss and sends ``lock_lost``.

    Attributes:
        resource: The lock's name.
        owner: The holder's secret token.
        fencing_token: The grant's token, larger than every earlier grant's on ``resource``.
        acquired_at: When the grant began, by the database's clock (a re-entry's: the first's).
        expires_at: The expiry as of the last acquire or renewal, by the database's clock.
        mode: ``"exclusive"`` or ``"shared"`` (a reader, or a semaphore's permit).
        limit: The semaphore's number of permits, else ``None``.
        label: The holder's public name.
        lost: A ``threading.Event``, set once the lock is lost.
    """

    def __init__(
        self,
        lock: Hold,
        ttl: float,
        using: str,
        started: float,
        on_lost: Callable[[LockHandle], object] | None = None,
    ) -> None:
        self.resource: str = lock.resource
        self.owner: str = lock.owner
        self.fencing_token: int = lock.fencing_token
        self.acquired_at: datetime = lock.acquired_at
        self.expires_at: datetime = lock.expires_at
        self.mode: str = lock.mode
        self.limit: int | None = lock.limit
        self.label: str = lock.label
        self.ttl = ttl
        self.using = using
        self.on_lost = on_lost
        self.lost: threading.Event = _LostEvent(self)
        self._lost_reason: str | None = None
        self._lost_lock = threading.Lock()
        # The local, conservative view of expiry: ``started`` is this process's
        # monotonic clock read before the acquire (or last renewal) was sent, so
        # the database's expiry is never earlier. Without auto_renew nothing else
        # would tell the holder that the lock expired and maybe was taken over.
        self.deadline = started + ttl
        # Read once the acquisition returned (so after the database's acquired_at):
        # ``min_hold`` counts from here, on the monotonic clock (see ``min_hold``).
        self.held_since = time.monotonic()
        # Handed over by a release that told it (``locking.told``): the queue it
        # came through likely has waiters still, which its release skips a look for.
        self.handed_over = False

    def __repr__(self) -> str:
        state = "lost" if self.is_lost else "held"
        return f"<LockHandle {self.resource!r} token={self.fencing_token} {state}>"

    @property
    def is_lost(self) -> bool:
        """Whether the lock was lost (``lost`` is set); ``check()`` raises then."""
        return self.lost.is_set()

    @property
    def lost_reason(self) -> str | None:
        """Why the lock was lost (a sentence), or ``None`` while it is held."""
        if self._lost_reason is None and self.past_deadline():
            return EXPIRED_LOCALLY
        return self._lost_reason

    def past_deadline(self) -> bool:
        """Whether the ttl passed, on this process's clock, without a renewal."""
        return time.monotonic() >= self.deadline

    def check(self) -> None:
        """Raise ``LockExpired`` if the lock was lost; call it between steps of long work."""
        self.check_deadline()
        if self.is_lost:
            raise LockExpired(f"The lock on {self.resource!r} was lost: {self.lost_reason}")

    def check_deadline(self) -> None:
        """Mark the lock lost (and announce it) if its ttl passed without a renewal."""
        if self.past_deadline():
            self.mark_lost(EXPIRED_LOCALLY)

    @contextmanager
    def atomic(self, using: str | None = None) -> Iterator[float]:
        """A ``transaction.atomic()`` block whose writes are proven under the lock.

        Its first statement checks that the lock is still this holder's (this
        grant, not expired) and locks the lock's row until the block ends (a
        shared row lock; on SQLite the database's write lock): no other owner
        takes the lock over and no purge removes it meanwhile, so what the block
        writes commits while the lock is held. A lock no longer held raises
        ``LockExpired`` (a ``LockLost``) before anything is written, and marks
        the handle lost. A holder paused inside the block keeps the resource at
        most the lease's time left plus ``GRACE`` seconds (MariaDB: rounded up to
        whole seconds); a block that ends later is rolled back with
        ``LockExpired`` (docs/holding.md, "Writes proven under the lock").

        ``using``: the alias of the block, by default the lock's database; another
        alias must name the same database, else ``InvalidArgument``. ``as``: the
        seconds the lease had left when the block began, by the database's clock.
        """
        self.check()
        guarded = service_for(self.using).atomic(
            self.resource, self.owner, self.fencing_token, shared=self.mode == SHARED, using=using
        )
        entered = finished = False
        try:
            with guarded as left:
                entered = True
                yield left
                finished = True
        except LockExpired:
            if not entered or finished:  # the guard's refusal, not the block's own error
                self.check_deadline()
                self.mark_lost("it was no longer held, or its block ended too late, at atomic()")
            raise

    def renew(self, ttl: float | None = None) -> None:
        """Extend the lock by ``ttl`` seconds (default: the ttl it was taken with).

        Raises ``LockExpired`` when it expired, was released or purged, and
        ``LockNotOwned`` when another owner holds it; either marks it lost.
        """
        ttl = ttl or self.ttl
        started = time.monotonic()
        self.record_renewal(renew_lock(self.using, self.resource, self.owner, ttl), started, ttl)

    async def arenew(self, ttl: float | None = None) -> None:
        """``renew()`` for async code."""
        ttl = ttl or self.ttl
        started = time.monotonic()
        outcome = await run_in_lock_thread(
            self.using, renew_lock, self.using, self.resource, self.owner, ttl
        )
        self.record_renewal(outcome, started, ttl)

    def record_renewal(self, outcome: Hold | RenewalFailure, started: float, ttl: float) -> None:
        """Take in a renewal sent at ``started``: move the deadline, or mark the lock
        lost and raise why. A lock whose ttl had passed stays lost: the holder may
        already have been told."""
        if isinstance(outcome, RenewalFailure):
            self.mark_lost(outcome.value)
            raise outcome.exception(f"Cannot renew the lock on {self.resource!r}: {outcome.value}")
        self.check_deadline()
        self.expires_at = outcome.expires_at
        self.deadline = started + ttl

    def mark_released(self) -> None:
        """Released by its holder: it can no longer expire on the holder."""
        self.deadline = math.inf

    def mark_lost(self, reason: str) -> None:
        """Flag the lock as lost, log it and send ``lock_lost``, once."""
        with self._lost_lock:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
            self.lost.set()
        logger.warning("Lost the lock on %r: %s", self.resource, reason)
        signals.lock_lost.send(
            sender=DistributedLock,
            resource=self.resource,
            owner=self.owner,
            reason=reason,
            mode=self.mode,
            limit=self.limit,
        )
        if self.on_lost is not None:
            self.on_lost(self)

    def upgrade(self, ttl: float | None = None) -> None:
        """Make this shared hold the exclusive lock, now or never: raises
        ``LockNotAcquired`` while others hold it too (waiting would deadlock
        two readers that upgrade at once). A new grant: a new fencing token."""
        self._change_mode(shared=False, ttl=ttl)

    def downgrade(self, ttl: float | None = None) -> None:
        """Make this exclusive lock a shared hold, letting readers in beside it.
        A new grant: a new fencing token."""
        self._change_mode(shared=True, ttl=ttl)

    def _change_mode(self, *, shared: bool, ttl: float | None) -> None:
        self.check()
        ttl = ttl or self.ttl
        started = time.monotonic()
        # Of this grant only: one that was lost is not replaced by a new one.
        kind = LockKind.shared_lock() if shared else EXCLUSIVE_KIND
        claim = claim_for(self.resource, self.owner, ttl, kind=kind, held_token=self.fencing_token)
        hold = service_for(self.using).take(claim)
        # Refused: the grant was lost, unless the refusal says it is still held
        # (an upgrade beside other readers).
        if isinstance(hold, Refusal) and (shared or not hold.grant_held):
            raise self.lost_before("its change of mode")
        if isinstance(hold, Refusal) or hold.mode != kind.mode:
            raise LockNotAcquired(
                f"Cannot upgrade the lock on {self.resource!r}: other holders share it."
            )
        self.fencing_token = hold.fencing_token
        self.acquired_at = hold.acquired_at
        self.expires_at = hold.expires_at
        self.mode = hold.mode
        self.deadline = started + ttl

    def lost_before(self, what: str) -> LockExpired:
        """The hold was found lost (expired, or force-released) by ``what``:
        marked lost, and the exception to raise."""
        self.check_deadline()
        self.mark_lost(f"it was no longer held at {what}")
        return LockExpired(f"The lock on {self.resource!r} was lost: {self.lost_reason}.")


class _LostEvent(threading.Event):
    """``handle.lost``: set by a failed renewal, and also seen set, when looked at
    or waited for, once the handle's local deadline has passed. Looking changes
    nothing: ``check()``, a renewal or the exit records and announces the loss."""

    def __init__(self, handle: LockHandle) -> None:
        super().__init__()
        self._handle = handle

    def is_set(self) -> bool:
        return super().is_set() or self._handle.past_deadline()

    def wait(self, timeout: float | None = None) -> bool:
        end = math.inf if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            now = time.monotonic()
            if now >= end:
                return False
            # Wake at the deadline too (a renewal may move it meanwhile).
            super().wait(min(end - now, self._handle.deadline - now, threading.TIMEOUT_MAX))
        return True


def report_release(handle: LockHandle, result: ReleaseResult, *, last: bool, failed: bool) -> None:
    """After the release of one entry of ``handle``'s hold (the ``last`` one, or
    one of several reentrant): released once the last is; a release that found
    the hold gone reports it lost (raised unless the block ``failed``)."""
    expected = ReleaseResult.RELEASED if last else ReleaseResult.DECREMENTED
    if result is expected:
        if last:
            handle.mark_released()
        return
    report_lost(handle, result, failed=failed)


def report_lost(handle: LockHandle, result: ReleaseResult, *, failed: bool) -> None:
    """A release that found ``handle``'s hold gone: mark it lost and, unless the
    block failed already (never hide its exception behind this one), raise."""
    exception: type[LockExpired | LockNotOwned]
    if result is ReleaseResult.FORBIDDEN:
        reason, exception = "another owner held it when it was released", LockNotOwned
    else:
        reason, exception = "it had expired when it was released", LockExpired
    handle.check_deadline()  # a ttl that passed first is the reason it was lost
    handle.mark_lost(reason)  # unless a renewal found it lost first: that reason stays
    if not failed:
        raise exception(
            f"The lock on {handle.resource!r} was lost before the end: {handle.lost_reason}."
        )
