"""``LockHandle``: what the holder of a ``lock()`` gets, and whether the lock is lost."""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import datetime

from django_dlock import signals
from django_dlock.exceptions import LockExpired
from django_dlock.locking.renewal import RenewalFailure, renew_lock
from django_dlock.models import DistributedLock
from django_dlock.threads import run_in_lock_thread

__all__ = ["EXPIRED_LOCALLY", "LockHandle"]

logger = logging.getLogger("django_dlock")

EXPIRED_LOCALLY = "it expired: its ttl passed without a renewal"


class LockHandle:
    """What ``with lock(...) as handle`` gives the holder.

    ``resource``, ``owner``, ``fencing_token`` and ``expires_at`` (as of the
    last acquire or renew) describe the lock. ``lost`` is a ``threading.Event``
    set when the holder can no longer count on the lock: an automatic renewal
    failed (expired and maybe taken over, released or purged, or a database
    error), its ttl passed without a renewal, or releasing it on exit found it
    gone. ``check()`` raises then.
    """

    def __init__(self, lock: DistributedLock, ttl: float, using: str, started: float) -> None:
        self.resource: str = lock.resource
        self.owner: str = lock.owner
        self.fencing_token: int = lock.fencing_token
        self.expires_at: datetime = lock.expires_at
        self.ttl = ttl
        self.using = using
        self.lost: threading.Event = _LostEvent(self)
        self._lost_reason: str | None = None
        self._lost_lock = threading.Lock()
        # The local, conservative view of expiry: ``started`` is this process's
        # monotonic clock read before the acquire (or last renewal) was sent, so
        # the database's expiry is never earlier. Without auto_renew nothing else
        # would tell the holder that the lock expired and maybe was taken over.
        self.deadline = started + ttl

    def __repr__(self) -> str:
        state = "lost" if self.is_lost else "held"
        return f"<LockHandle {self.resource!r} token={self.fencing_token} {state}>"

    @property
    def is_lost(self) -> bool:
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

    def record_renewal(
        self, outcome: DistributedLock | RenewalFailure, started: float, ttl: float
    ) -> None:
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
            sender=DistributedLock, resource=self.resource, owner=self.owner, reason=reason
        )


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
