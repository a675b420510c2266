"""One renewal of a held lock, and why it can fail."""

from __future__ import annotations

import enum

from django_dlock.exceptions import LockExpired, LockNotOwned
from django_dlock.rules import Hold, duration_of
from django_dlock.service import Renewed, service_for


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
    return outcome_of(owner, service_for(using).renew(resource, owner, duration_of(ttl)))


def outcome_of(owner: str, renewed: Hold | Renewed) -> Hold | RenewalFailure:
    """The renewed lock, or why ``owner``'s renewal failed, told by who held the
    row as the renewal found it (``Renewed``): nothing reads it again."""
    if not isinstance(renewed, Renewed):
        return renewed
    if not renewed.exists:
        return RenewalFailure.GONE
    return RenewalFailure.EXPIRED if renewed.holder == owner else RenewalFailure.TAKEN_OVER
