"""One renewal of a held lock, and why it can fail."""

from __future__ import annotations

import enum

from django_dlock.exceptions import LockExpired, LockNotOwned
from django_dlock.models import DistributedLock
from django_dlock.rules import Hold


class RenewalFailure(enum.Enum):
    """Why a lock could not be renewed; the value is the sentence the holder reads."""

    GONE = "it was released or purged"
    EXPIRED = "it expired"
    TAKEN_OVER = "it expired and another owner holds it now"

    @property
    def exception(self) -> type[LockExpired | LockNotOwned]:
        """What acting on the lock raises: ``LockNotOwned`` once another owner holds it."""
        return LockNotOwned if self is RenewalFailure.TAKEN_OVER else LockExpired


def renew_lock(using: str, resource: str, owner: str, ttl: float) -> Hold | RenewalFailure:
    """The renewed lock, or why it could not be renewed."""
    try:
        renewed = DistributedLock.objects.db_manager(using).renew(resource, owner, ttl)
    except DistributedLock.DoesNotExist:
        return RenewalFailure.GONE
    if renewed is None:
        # The manager does not say which; read the row to tell the holder.
        holder = (
            DistributedLock.objects.using(using)
            .filter(resource=resource)
            .values_list("owner", flat=True)
            .first()
        )
        return failure_of(owner, holder)
    return renewed


def failure_of(owner: str, holder: str | None) -> RenewalFailure:
    """Why ``owner``'s lock was not renewed, given who holds its row now
    (``None``: no row; "": released)."""
    if holder in (None, ""):
        return RenewalFailure.GONE
    if holder not in ("", owner):
        return RenewalFailure.TAKEN_OVER
    return RenewalFailure.EXPIRED
