"""Signals sent after a lock operation has committed. ``sender`` is the
``DistributedLock`` model; ``lock`` is the hold as the operation left it: the
``DistributedLock`` of an exclusive holder, or the ``LockHold`` of a reader or
a semaphore's permit. Its ``mode`` ("exclusive" or "shared"), ``limit`` (a
semaphore's, else None) and ``hold_count`` say which kind it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.dispatch import Signal

if TYPE_CHECKING:
    from django_dlock.rules.claim import Claim

# Each signal caches its receivers by sender, as Django's model signals do (each
# is sent with the ``DistributedLock`` model as sender): every lock operation
# sends one, which then finds its receivers, or that it has none, in one look-up
# rather than by going through every connected receiver again.

lock_acquired = Signal(use_caching=True)
"""A new holder got the lock: first acquisition, or after a release or expiry.

Keyword arguments: ``lock``; ``taken_over_from``, the previous owner when an
expired lock of another owner was taken over, else ``None``.
"""

lock_renewed = Signal(use_caching=True)
"""The holder extended its lock: ``renew()``, or ``acquire()`` by the owner
that holds it, or ``min_hold`` keeping it on exit.

Keyword arguments: ``lock``.
"""

lock_taken_over = Signal(use_caching=True)
"""An expired lock of one owner was taken by another.

Keyword arguments: ``lock`` (the new holder's), ``previous_owner``.
"""

lock_released = Signal(use_caching=True)
"""The holder released its lock, or an operator force-released it.

Keyword arguments: ``lock`` (as released: empty owner, expired), ``owner``
(the owner that held it), ``forced`` (``True`` for a force-release).
"""

lock_lost = Signal(use_caching=True)
"""A holder found that its lock was lost: a renewal failed, or it expired.

Keyword arguments: ``resource``, ``owner``, ``reason`` (a sentence saying
why), ``mode`` and ``limit`` (of the hold it had).
"""

lock_refused = Signal(use_caching=True)
"""An acquisition that does not wait (``acquire()``, ``lock()`` without a
timeout, the HTTP API) found the lock held in a way that excludes it.

Keyword arguments: ``resource``, ``owner`` (the caller's), ``mode``
(``"exclusive"`` or ``"shared"``) and ``limit`` (a semaphore's, else
``None``) of what it asked for.
"""

lock_wait_ended = Signal(use_caching=True)
"""A blocking acquisition (``lock(..., timeout=...)``) stopped waiting.

Keyword arguments: ``resource``, ``owner``, ``waited`` (seconds, on this
process's monotonic clock), ``outcome`` (``"acquired"``, ``"timeout"``,
``"cancelled"``, or ``"error"`` when the database failed), ``mode`` and
``limit`` (as for ``lock_refused``).
"""

throttle_used = Signal(use_caching=True)
"""A throttle granted or refused a use, once its decision is committed.
Its sender is the ``ThrottleSlot`` model.

Keyword arguments: ``key``, ``rate`` (a ``Rate``), ``granted`` (a bool),
``retry_after`` (a ``timedelta``, zero when granted).
"""


def send_refused(sender: type, claim: Claim) -> None:
    """``lock_refused`` for ``claim``, an acquisition that does not wait and
    found the lock held: sent by ``LockService.try_take`` only, for
    ``acquire()``, the API and ``lock()``."""
    lock_refused.send(sender=sender, resource=claim.resource, owner=claim.owner, **_asked(claim))


def send_wait_ended(sender: type, claim: Claim, *, waited: float, outcome: str) -> None:
    """``lock_wait_ended`` for the wait of ``claim`` (from ``Wait.finish()``)."""
    lock_wait_ended.send(
        sender=sender,
        resource=claim.resource,
        owner=claim.owner,
        waited=waited,
        outcome=outcome,
        **_asked(claim),
    )


def _asked(claim: Claim) -> dict[str, Any]:
    """The mode and limit ``claim`` asked for, as the signals name them."""
    return {"mode": claim.kind.mode, "limit": claim.kind.limit}
