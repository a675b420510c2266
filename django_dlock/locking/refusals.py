"""Why ``lock()`` did not acquire: the message of its ``LockNotAcquired``, for
a try without waiting (from the refusing statement's ``Refusal``: nothing
reads the lock again) and for a wait whose time ran out."""

from __future__ import annotations

from django_dlock.exceptions import LockNotAcquired
from django_dlock.rules.clock import time_left
from django_dlock.service import Refusal

__all__ = ["refusal", "wait_failure"]


def refusal(resource: str, refused: Refusal) -> LockNotAcquired:
    """Why a non-blocking acquisition was refused, as its statement found the
    lock (``Refusal``)."""
    until, now = refused.until, refused.now
    left = None if until is None or now is None else max(time_left(until, now), 0.0)
    if refused.delayed and left is not None:
        return LockNotAcquired(
            f"The lock on {resource!r} is in its lock-delay for another {left:.1f} s: "
            "its last holder lost it (it expired or was force-released).",
            free_in=left,
        )
    return LockNotAcquired(f"The lock on {resource!r} is held by another owner.", free_in=left)


def wait_failure(
    resource: str, timeout: float, tries: int, *, delayed: bool, free_in: float | None = None
) -> LockNotAcquired:
    """Why a wait of ``timeout`` seconds ended without the lock, after ``tries``
    tries; ``delayed``: its last look found the lock in its lock-delay;
    ``free_in``: seconds until, by that look, it comes free."""
    # A waiter queued behind others may never get a turn to try: say so
    # rather than report "0 tries".
    how = f"(tried {tries} time{'s' if tries != 1 else ''})" if tries else "the whole time"
    why = (
        "its lock-delay ran (its last holder lost it) when the time was up"
        if delayed
        else f"another owner held it {how}"
    )
    message = f"Could not acquire the lock on {resource!r} within {timeout:g} s: {why}."
    return LockNotAcquired(message, free_in=free_in)
