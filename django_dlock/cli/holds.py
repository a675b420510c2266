"""The holds and waiters ``manage.py dlock`` shows, read in one place.

A resource has one exclusive holder (its ``DistributedLock`` row), or readers
or semaphore permits (``LockHold`` rows, under the resource's row as their
header): ``DistributedLock.objects.holders(resource)`` for one resource, and
two queries for a listing of many.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q

from django_dlock import rules
from django_dlock.conf import conf
from django_dlock.humanize import ACTIVE, DELAYED, EXPIRED, RELEASED, kind_in_words
from django_dlock.managers import delay_runs_q
from django_dlock.models import DistributedLock, LockHold, LockWaiter
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow, database_now, time_left
from django_dlock.rules.predicates import delay_end

__all__ = ["Hold", "free_row", "holds_of", "listed_holds", "release_hold", "waiters"]


@dataclass(frozen=True)
class Hold:
    resource: str
    owner: str  # secret: shown only with --show-owners; "" once released
    label: str  # "" when the holder gave none
    mode: str  # "exclusive" or "shared"
    limit: int | None  # a semaphore's permits
    hold_count: int
    fencing_token: int
    acquired_at: datetime
    expires_at: datetime
    now: datetime  # the database's time of the read
    # The exclusive holder's lock-delay (``DistributedLock.lock_delay``); None for
    # a shared hold, or none asked for, or released by its holder.
    lock_delay: timedelta | None = None

    @classmethod
    def of(cls, hold: rules.Hold, now: datetime) -> Hold:
        """From a ``DistributedLock`` or ``LockHold``, read at the database time ``now``."""
        return cls(
            resource=hold.resource,
            owner=hold.owner,
            label=hold.label,
            mode=hold.mode,
            limit=hold.limit,
            hold_count=hold.hold_count,
            fencing_token=hold.fencing_token,
            acquired_at=hold.acquired_at,
            expires_at=hold.expires_at,
            now=now,
            lock_delay=getattr(hold, "lock_delay", None),  # a LockHold has none
        )

    @property
    def kind(self) -> str:
        """As the admin says it: "exclusive", "exclusive, held 3 times", "shared"..."""
        return kind_in_words(self.mode, self.limit, self.hold_count)

    @property
    def status(self) -> str:
        if self.owner and self.seconds_left > 0:
            return ACTIVE
        if self.available_at is not None:
            return DELAYED
        return RELEASED if not self.owner else EXPIRED

    @property
    def available_at(self) -> datetime | None:
        """When the resource comes free, while the lock-delay of its holder's
        involuntary loss (expiry, or a force-release) runs; else None."""
        return delay_end(self)

    @property
    def seconds_left(self) -> float:
        return time_left(self.expires_at, self.now)


def holds_of(resource: str) -> list[Hold]:
    """The valid holds of ``resource``, oldest first."""
    now = database_now(conf.DATABASE)
    return [Hold.of(hold, now) for hold in DistributedLock.objects.holders(resource)]


def listed_holds(*, prefix: str = "", include_free: bool = False) -> list[Hold]:
    """The valid holds of every resource that starts with ``prefix``, by resource
    and then oldest first, and the rows of resources a lock-delay keeps from
    everyone (``Hold.status`` "delayed"); with ``include_free``, also the rows
    of resources that are free (expired or released), with their last fencing
    token."""
    now = DatabaseNow()
    rows = DistributedLock.objects.annotate(db_now=now).exclude(owner=SHARED_HOLDERS)
    shared = LockHold.objects.using(conf.DATABASE).annotate(db_now=now)
    shared = shared.filter(expires_at__gt=F("db_now"))
    if not include_free:
        rows = rows.filter(Q(expires_at__gt=F("db_now")) | delay_runs_q())
    if prefix:
        rows = rows.filter(resource_prefix_q(prefix))
        shared = shared.filter(resource_prefix_q(prefix))
    # One comprehension per query: a list of both kinds would be typed as their
    # common base, which has no db_now.
    holds = [Hold.of(row, row.db_now) for row in rows]
    holds += [Hold.of(hold, hold.db_now) for hold in shared]
    return sorted(holds, key=lambda hold: (hold.resource, hold.acquired_at))


def free_row(resource: str) -> Hold | None:
    """The row of ``resource`` when it has no holder: when it was released or
    expired, and its last fencing token (``None`` when never locked, or purged)."""
    lock = DistributedLock.objects.annotate(db_now=DatabaseNow()).filter(resource=resource).first()
    return None if lock is None else Hold.of(lock, lock.db_now)


def waiters(*, resource: str | None = None, prefix: str = "") -> Counter[str]:
    """How many live waiters ``resource``, or each resource starting with
    ``prefix``, has: one query."""
    queued = LockWaiter.objects.using(conf.DATABASE).live()
    if resource is not None:
        queued = queued.filter(resource=resource)
    elif prefix:
        queued = queued.filter(resource_prefix_q(prefix))
    return Counter(queued.values_list("resource", flat=True))


def release_hold(hold: Hold) -> bool:
    """Force-release ``hold`` (its owner's hold, whatever its hold count);
    whether it was still held. Only that hold: if it ended meanwhile and
    another holder came, the new holder keeps its lock."""
    return DistributedLock.objects.force_release(hold.resource, owner=hold.owner)
