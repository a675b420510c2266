"""The holds and waiters ``manage.py dlock`` shows, read in one place.

Today every lock is exclusive and unlabelled: a resource's one hold is its lock
row. The lock kinds (shared, semaphore, reentrant, labels) bring
``DistributedLock.objects.holders(resource)``; ``read_holds`` and
``release_hold`` are what switches to it then.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F

from django_dlock.backends.clock import DatabaseNow, time_left
from django_dlock.conf import conf
from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.prefix import resource_prefix_q

__all__ = ["Hold", "read_holds", "release_hold", "waiters"]

ACTIVE, EXPIRED, RELEASED = "active", "expired", "released"


@dataclass(frozen=True)
class Hold:
    resource: str
    owner: str  # secret: shown only with --show-owners
    label: str  # "" when the holder gave none
    mode: str  # "exclusive" or "shared"
    fencing_token: int
    acquired_at: datetime
    expires_at: datetime
    now: datetime  # the database's time of the read

    @property
    def status(self) -> str:
        if not self.owner:
            return RELEASED
        return ACTIVE if self.seconds_left > 0 else EXPIRED

    @property
    def seconds_left(self) -> float:
        return time_left(self.expires_at, self.now)


def read_holds(
    *, resource: str | None = None, prefix: str = "", include_expired: bool = False
) -> list[Hold]:
    """The valid holds (with ``include_expired``, also expired and released
    ones) of ``resource``, or of every resource starting with ``prefix``, by
    resource; the database's clock decides what is valid."""
    locks = DistributedLock.objects.annotate(db_now=DatabaseNow())
    if resource is not None:
        locks = locks.filter(resource=resource)
    elif prefix:
        locks = locks.filter(resource_prefix_q(prefix))
    if not include_expired:
        locks = locks.filter(expires_at__gt=F("db_now"))
    columns = ("resource", "owner", "fencing_token", "acquired_at", "expires_at", "db_now")
    return [
        Hold(
            resource=resource,
            owner=owner,
            label="",
            mode="exclusive",
            fencing_token=token,
            acquired_at=acquired_at,
            expires_at=expires_at,
            now=now,
        )
        for resource, owner, token, acquired_at, expires_at, now in locks.order_by(
            "resource"
        ).values_list(*columns)
    ]


def waiters(*, resource: str | None = None, prefix: str = "") -> Counter[str]:
    """How many live waiters ``resource``, or each resource starting with
    ``prefix``, has: one query."""
    queued = LockWaiter.objects.using(conf.DATABASE).filter(expires_at__gt=DatabaseNow())
    if resource is not None:
        queued = queued.filter(resource=resource)
    elif prefix:
        queued = queued.filter(resource_prefix_q(prefix))
    return Counter(queued.values_list("resource", flat=True))


def release_hold(hold: Hold) -> bool:
    """Release ``hold`` for its holder (an operator's force-release); whether it
    was still held. Only that hold: if it ended meanwhile and another holder
    came, the new holder keeps its lock."""
    return DistributedLock.objects.force_release(hold.resource, owner=hold.owner)
