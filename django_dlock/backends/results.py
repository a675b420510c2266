"""What the backends' lock operations answer: typed values, built from the rows
the statements return. The manager makes model instances of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_dlock.rules import ReleaseResult

__all__ = ["LockRow", "Released", "Renewed", "Taken"]

#: The model fields of a ``LockRow``, in its order (``LockRow.values``).
LOCK_FIELDS = ("id", "resource", "owner", "acquired_at", "expires_at", "fencing_token")


@dataclass(frozen=True, slots=True)
class LockRow:
    """A row of ``distributed_locks`` as an operation read or wrote it, and the
    database's time then (every decision about it is made on that clock)."""

    pk: int
    resource: str
    owner: str  # "" once released
    acquired_at: datetime
    expires_at: datetime
    fencing_token: int
    now: datetime

    @property
    def held(self) -> bool:
        """Whether the lock had a valid holder at ``now``."""
        return self.owner != "" and self.now < self.expires_at

    def values(self) -> tuple[object, ...]:
        """The row's values in the order of ``LOCK_FIELDS``."""
        return (
            self.pk,
            self.resource,
            self.owner,
            self.acquired_at,
            self.expires_at,
            self.fencing_token,
        )


@dataclass(frozen=True, slots=True)
class Taken:
    """What an acquisition did."""

    row: LockRow | None  # the lock as written; None when another owner holds it
    previous_owner: str | None  # the row's owner before ("" released); None without a row
    renewed: bool  # the holder re-acquired it: same token, same acquired_at


@dataclass(frozen=True, slots=True)
class Renewed:
    """What a renewal did."""

    row: LockRow | None  # the renewed lock; None when the owner does not validly hold it
    exists: bool  # whether there was a lock at all (a row, not released)


@dataclass(frozen=True, slots=True)
class Released:
    """What a release (or a force-release) did."""

    row: LockRow | None  # the lock as released; None when nothing was released
    owner: str  # the owner that validly held it; "" when none did
    result: ReleaseResult
