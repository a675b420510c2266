"""What the backends' lock operations answer: typed values, built from the rows
the statements return (what they are asked is a ``Claim``: ``rules.claim``).
The manager makes model instances of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_dlock.rules import EXCLUSIVE, SHARED, SHARED_HOLDERS, ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.frozen import fast_init
from django_dlock.rules.notice import GrantNotice
from django_dlock.rules.predicates import HELD, HELD_BY_SHARED, delay_end

__all__ = ["LockRow", "Refusal", "Released", "Renewed", "Taken"]

#: The model fields of a row of ``distributed_locks`` (``LockRow.field_values``).
LOCK_FIELDS = (
    "id",
    "resource",
    "owner",
    "acquired_at",
    "expires_at",
    "fencing_token",
    "hold_count",
    "label",
    "limit",
    "lock_delay",
)


@fast_init
@dataclass(frozen=True, slots=True)
class LockRow:
    """A row as an operation read or wrote it, and the database's time then
    (every decision about it is made on that clock): a resource's row of
    ``distributed_locks`` (``shared`` False), or a shared hold of
    ``distributed_lock_holds``."""

    pk: int
    resource: str
    owner: str  # "" once released; SHARED_HOLDERS on a resource's row held by shared holds
    acquired_at: datetime
    expires_at: datetime
    fencing_token: int
    hold_count: int
    label: str
    limit: int | None
    now: datetime
    shared: bool = False  # a row of distributed_lock_holds
    # The exclusive holder's lock-delay: after an involuntary loss (its lease
    # ran out, or an operator force-released it) nobody may take the resource
    # until ``expires_at + lock_delay``. Null: none, or released by its holder.
    lock_delay: timedelta | None = None

    @property
    def held(self) -> bool:
        """Whether the row had a valid holder at ``now`` (``predicates.HELD``)."""
        return bool(HELD.value(self, {}))

    @property
    def available_at(self) -> datetime | None:
        """When the resource comes free after its holder's involuntary loss, if
        its lock-delay still ran at ``now`` (``predicates.DELAY_RUNS``); else
        None (held, or free)."""
        return delay_end(self)

    @property
    def mode(self) -> str:
        """The hold's mode, as its model instance says it (``Hold.mode``)."""
        return SHARED if self.shared or self.owner == SHARED_HOLDERS else EXCLUSIVE

    @property
    def held_by_shared(self) -> bool:
        """Whether this resource's row was held by shared holds at ``now``."""
        return bool(HELD_BY_SHARED.value(self, {}))

    @classmethod
    def told(cls, claim: Claim, notice: GrantNotice) -> LockRow:
        """The hold a release granted ``claim``'s waiter, as its wake-up told it
        (``rules.notice``): the lock's row, or a reader's or permit's hold."""
        return cls(
            pk=notice.pk, resource=claim.resource, owner=claim.owner, label=claim.label,
            acquired_at=notice.acquired_at, expires_at=notice.expires_at, now=notice.acquired_at,
            fencing_token=notice.fencing_token, hold_count=1, limit=claim.kind.limit,
            shared=not claim.exclusive,
        )  # fmt: skip

    def owned_by(self, owner: str) -> LockRow:
        """This row with ``owner`` as its owner (a release's hold as it was held):
        ``dataclasses.replace()``'s result, without its look at every field,
        which cost a release more of the client's CPU than the rest of its answer."""
        return LockRow(
            self.pk, self.resource, owner, self.acquired_at, self.expires_at, self.fencing_token,
            self.hold_count, self.label, self.limit, self.now, self.shared, self.lock_delay,
        )  # fmt: skip

    def field_values(self) -> dict[str, object]:
        """The row's values by model field (``LOCK_FIELDS``)."""
        return {
            "id": self.pk,
            "resource": self.resource,
            "owner": self.owner,
            "acquired_at": self.acquired_at,
            "expires_at": self.expires_at,
            "fencing_token": self.fencing_token,
            "hold_count": self.hold_count,
            "label": self.label,
            "limit": self.limit,
            "lock_delay": self.lock_delay,
        }


@fast_init
@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an acquisition was refused, as the refusing statement found the
    resource: nobody reads the lock again to say it (the API's ``Retry-After``,
    ``lock()``'s message)."""

    # The database's time of the decision; None where the statement found no row.
    now: datetime | None
    # The soonest the resource may come free: the first valid holder's expiry,
    # or the end of a running lock-delay; None when nobody holds it (waiters
    # queued before the claim, or a re-entered grant that is gone).
    until: datetime | None
    delayed: bool = False  # ``until`` is the end of a lock-delay
    # The claimant still holds a shared grant of its own (the one a re-entry,
    # ``Claim.held_token``, meant): refused beside other holders (an upgrade).
    grant_held: bool = False

    @classmethod
    def of(
        cls, row: LockRow | None, first_expiry: datetime | None = None, *, grant_held: bool = False
    ) -> Refusal:
        """The refusal by the resource's ``row`` as the statement read it;
        ``first_expiry``: the first of its valid shared holds to expire, where
        shared holders hold it (``grant_held``: among them, the claimant's)."""
        if row is None:
            return cls(now=None, until=None)
        delay_ends = row.available_at
        if delay_ends is not None:
            return cls(now=row.now, until=delay_ends, delayed=True)
        if row.held_by_shared:
            return cls(now=row.now, until=first_expiry, grant_held=grant_held)
        return cls(now=row.now, until=row.expires_at if row.held else None)


#: A refusal where the statement found no row to say more.
NO_ROW = Refusal(now=None, until=None)


@fast_init
@dataclass(frozen=True, slots=True)
class Taken:
    """What an acquisition did."""

    row: LockRow | None  # the hold as written; None when it was refused
    previous_owner: str | None  # the resource row's owner before ("" released); None without one
    renewed: bool  # the holder re-acquired it: same token, same acquired_at
    mismatch: str | None = None  # the kind the resource is, when the claim asked for another
    refusal: Refusal = NO_ROW  # why it was refused (row None, no mismatch)


@fast_init
@dataclass(frozen=True, slots=True)
class Renewed:
    """What a renewal did."""

    row: LockRow | None  # the renewed hold; None when the owner does not validly hold it
    exists: bool  # whether there was a lock at all (a row, not released)
    # Not renewed: the row's owner as the renewal found it ("" released; None:
    # no row), which tells an expiry from a take-over without reading it again.
    holder: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Released:
    """What a release (or a force-release) did."""

    row: LockRow | None  # the hold as released (or, decremented, as left); None: none
    owner: str  # the owner that validly held it; "" when none did
    result: ReleaseResult
    released: tuple[LockRow, ...] = ()  # a force-release's released holds
