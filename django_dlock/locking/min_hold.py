"""``lock(..., min_hold=...)``: a lock held at least so long after it was taken.

ShedLock's ``lockAtLeastFor``. A job that ends in 200 ms would free its lock
before a host whose clock is behind (or whose cron fires late) even tries, and
that host would run the job again. With ``min_hold`` the last exit does not
release a lock taken less than ``min_hold`` ago: it renews it to the time left,
and the lock expires by itself ``min_hold`` after it was taken. The caller never
waits for that (``dlock run --min-hold``, older, keeps its process holding the
lock instead, and accepts holds longer than ``DLOCK_MAX_TTL``).

The time left is measured with this process's monotonic clock from the moment
the acquisition returned, and the database adds it to its own now: the client's
wall clock never counts, and the expiry is never earlier than the database's
``acquired_at`` plus ``min_hold`` (the acquisition ran before it returned, the
renewal runs after it is sent). SQLite's clock counts whole milliseconds, so the
renewal's now may read up to one millisecond early: the time left is rounded up
by that much.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.locking.renewal import RenewalFailure, renew_lock
from django_dlock.rules import ReleaseResult
from django_dlock.service import service_for
from django_dlock.validators import validate_ttl

if TYPE_CHECKING:
    from django_dlock.locking.handle import LockHandle

__all__ = ["release_or_keep", "validate_min_hold"]

# The coarsest database clock's step (SQLite's STRFTIME('%f')), added to the time
# left so that a truncated now never makes the expiry early.
CLOCK_STEP = 0.001


def validate_min_hold(
    value: object, *, several: bool = False, what: str = "min_hold"
) -> float | None:
    """``value`` (``None``, a ``timedelta`` or a number of seconds) as seconds.

    Raises ``InvalidArgument`` unless it is ``None`` or more than 0 and at most
    ``DLOCK_MAX_TTL`` seconds (the renewal that keeps the lock is a ttl), and
    for a ``lock()`` of several resources. ``what`` names the argument in the message.
    """
    if value is None:
        return None
    if several:
        raise InvalidArgument(
            "min_hold is for a lock() of one resource, not of a list of them.", code="min_hold"
        )
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    try:
        return validate_ttl(seconds)  # the renewal that keeps the lock is a ttl
    except InvalidArgument:
        raise InvalidArgument(
            f"{what} must be a timedelta or a number of seconds, more than 0 and at most "
            f"DLOCK_MAX_TTL ({conf.MAX_TTL:g}) seconds, not {value!r}.",
            code=what,
        ) from None


def release_or_keep(using: str, handle: LockHandle, min_hold: float | None) -> ReleaseResult:
    """End the hold of ``handle``: release it, or, taken less than ``min_hold``
    seconds ago, renew it to the time left and leave it to expire.

    Returns what a release would for the caller's checks: ``RELEASED`` when it
    was kept, ``FORBIDDEN`` when another owner held it, ``NOT_FOUND`` when it
    had expired or was gone. Kept, it sends ``lock_renewed``, not ``lock_released``.
    """
    left = math.inf if min_hold is None else min_hold - (time.monotonic() - handle.held_since)
    if not 0 < left < math.inf:
        # The resource and owner were checked when the lock was entered.
        service = service_for(using)
        if handle.handed_over:  # (``locking.told``: the queue it came through is likely there)
            return service.release(handle.resource, handle.owner, handle.mode, queued=True)
        return service.release(handle.resource, handle.owner, handle.mode)
    outcome = renew_lock(using, handle.resource, handle.owner, min(left + CLOCK_STEP, conf.MAX_TTL))
    if outcome is RenewalFailure.TAKEN_OVER:
        return ReleaseResult.FORBIDDEN
    if isinstance(outcome, RenewalFailure):
        return ReleaseResult.NOT_FOUND
    handle.expires_at = outcome.expires_at
    return ReleaseResult.RELEASED
