from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.managers import DistributedLockManager
from django_dlock.rules import EXCLUSIVE, SHARED, SHARED_HOLDERS, ReleaseResult
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.predicates import DELAY_END
from django_dlock.service import service_for
from django_dlock.validators import MAX_LENGTH, validate_owner, validate_resource

__all__ = [
    "DistributedLock",
    "FencingFloor",
    "LockHold",
    "LockWaiter",
    "ReleaseResult",
    "ThrottleKey",
    "ThrottleSlot",
]

# The holds of the kinds (reentrant, shared, semaphore) have these columns,
# each with a database default, so that processes of the previous version
# keep inserting rows while a rolling upgrade runs (they hold exclusively,
# once, without a label).
HOLD_COUNT_DEFAULT = 1


class DistributedLock(models.Model):
    """One row per resource. The row outlives its holders: a release marks it
    released (empty owner, expired) rather than deleting it, so the next holder
    takes it over by UPDATE and its fencing token keeps counting up."""

    # Django ignores what a validator returns; these also return the cleaned
    # value, for the manager, so they are not the `-> None` that the stubs expect.
    resource = models.CharField(
        _("resource"),
        max_length=MAX_LENGTH,
        validators=[validate_resource],  # type: ignore[list-item]
    )
    # Empty once released: no valid owner token is empty.
    owner = models.CharField(
        _("owner"),
        max_length=MAX_LENGTH,
        blank=True,
        validators=[validate_owner],  # type: ignore[list-item]
    )
    acquired_at = models.DateTimeField(_("acquired at"))
    expires_at = models.DateTimeField(_("expires at"))
    fencing_token = models.PositiveBigIntegerField(_("fencing token"))
    # The exclusive holder's holds (reentrant acquisitions add one each); while
    # shared holders hold the resource, how many they are (at least: a hold
    # that expired is counted until the next release or admission that looks).
    hold_count = models.PositiveIntegerField(
        _("hold count"), default=HOLD_COUNT_DEFAULT, db_default=HOLD_COUNT_DEFAULT
    )
    # The exclusive holder's public name (the owner is a secret).
    label = models.CharField(
        _("label"), max_length=MAX_LENGTH, blank=True, default="", db_default=""
    )
    # While shared holders hold it: the semaphore's number of permits, or null
    # for readers (a read-write lock).
    limit = models.PositiveIntegerField(_("limit"), null=True, blank=True)
    # The exclusive holder's lock-delay (``lock(..., lock_delay=...)``), as
    # Chubby's: after an involuntary loss (the lease ran out, or an operator
    # force-released it) nobody takes the resource until ``expires_at +
    # lock_delay``, so a late writer that ignores fencing tokens cannot collide
    # with the next holder. A release by the holder clears it. Null: no delay.
    lock_delay = models.DurationField(_("lock delay"), null=True, blank=True)

    objects = DistributedLockManager["DistributedLock"]()

    class Meta:
        db_table = "distributed_locks"
        verbose_name = _("distributed lock")
        verbose_name_plural = _("distributed locks")
        ordering = ["resource"]
        constraints = [
            models.UniqueConstraint(fields=["resource"], name="distributed_locks_resource_key"),
        ]

    def __str__(self) -> str:
        return self.resource

    @property
    def is_released(self) -> bool:
        return self.owner == ""

    @property
    def is_shared(self) -> bool:
        """Whether shared holders (readers, or a semaphore's permits) hold it:
        each is a ``LockHold`` (``DistributedLock.objects.holders()``)."""
        return self.owner == SHARED_HOLDERS

    @property
    def mode(self) -> str:
        """``"exclusive"``, or ``"shared"`` while shared holders hold it."""
        return SHARED if self.is_shared else EXCLUSIVE

    def is_expired(self, now: datetime | None = None) -> bool:
        """Whether the lock is expired at ``now`` (default: this server's clock).

        The manager decides expiry with the database's clock; this is for display.
        """
        return (now or timezone.now()) >= self.expires_at

    def atomic(self, using: str | None = None) -> AbstractContextManager[float]:
        """A ``transaction.atomic()`` block whose writes are proven under this
        hold (one that ``acquire()`` returned), as ``LockHandle.atomic()``:
        its first statement checks that the hold is still valid and locks the
        lock's row until the block ends; ``LockExpired`` (a ``LockLost``) before
        anything is written when it is not. ``using`` defaults to the lock's
        database; another database raises ``InvalidArgument``. ``as``: the
        seconds the lease had left when the block began."""
        if self.is_shared:
            raise InvalidArgument(
                f"The row of {self.resource!r} is the header of its shared holds, not a "
                "hold: guard a block with a hold that acquire() returned.",
                code="hold",
            )
        return _guarded(self, shared=False, using=using)

    @property
    def available_at(self) -> datetime | None:
        """When its lock-delay ends, if a lock-delay was kept after an
        involuntary loss (the row has no valid holder then); None without one.
        Until then the resource is refused to everyone. (Whether that moment
        has passed is the database clock's to say: ``objects.delayed()``.)"""
        end: datetime | None = DELAY_END.value(self, {})
        return end


class LockHold(models.Model):
    """A shared hold of a resource: a reader of a read-write lock, or one permit
    of a semaphore. Each has its own owner, expiry, hold count and fencing
    token. The resource's ``DistributedLock`` row is their header: every
    admission locks it, and while they hold the resource its owner is
    ``SHARED_HOLDERS`` and its expiry the last of theirs."""

    resource = models.CharField(_("resource"), max_length=MAX_LENGTH)
    owner = models.CharField(_("owner"), max_length=MAX_LENGTH)
    label = models.CharField(_("label"), max_length=MAX_LENGTH, blank=True, default="")
    acquired_at = models.DateTimeField(_("acquired at"))
    expires_at = models.DateTimeField(_("expires at"))
    hold_count = models.PositiveIntegerField(_("hold count"), default=HOLD_COUNT_DEFAULT)
    fencing_token = models.PositiveBigIntegerField(_("fencing token"))
    # The semaphore's number of permits; null for a reader.
    limit = models.PositiveIntegerField(_("limit"), null=True, blank=True)

    class Meta:
        db_table = "distributed_lock_holds"
        verbose_name = _("lock hold")
        verbose_name_plural = _("lock holds")
        ordering = ["resource", "acquired_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource", "owner"], name="distributed_lock_holds_owner_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource} ({self.label or self.mode})"

    mode = SHARED  # every row here is a shared hold

    def is_expired(self, now: datetime | None = None) -> bool:
        """Whether the hold is expired at ``now`` (default: this server's clock)."""
        return (now or timezone.now()) >= self.expires_at

    def atomic(self, using: str | None = None) -> AbstractContextManager[float]:
        """``DistributedLock.atomic()`` of this shared hold (a reader, or a
        semaphore's permit): the block's writes are proven under it."""
        return _guarded(self, shared=True, using=using)


def _guarded(
    hold: DistributedLock | LockHold, *, shared: bool, using: str | None
) -> AbstractContextManager[float]:
    # The hold's database is the one it was read from (or written to).
    service = service_for(hold._state.db or conf.DATABASE)
    return service.atomic(hold.resource, hold.owner, hold.fencing_token, shared=shared, using=using)


class FencingFloor(models.Model):
    """A single row: the largest fencing token of any lock row ever purged.

    A resource whose row was purged starts again above it, so fencing tokens
    keep increasing per resource across purges without a row kept per resource.
    """

    value = models.PositiveBigIntegerField(_("value"), default=0)

    class Meta:
        db_table = "distributed_locks_fencing_floor"
        verbose_name = _("fencing token floor")

    def __str__(self) -> str:
        return str(self.value)


class LockWaiterQuerySet(models.QuerySet["LockWaiter"]):
    def live(self) -> LockWaiterQuerySet:
        """The waiters whose tickets are live by the database's clock (a
        waiter that crashed stops counting when its ticket expires)."""
        return self.filter(expires_at__gt=DatabaseNow())


class LockWaiter(models.Model):
    """One process waiting in ``lock(..., timeout=...)`` for a resource.

    Blocking waiters queue here in ``id`` order; only the first live waiter
    tries to acquire, so a process that just released cannot jump back in
    ahead of those already waiting. A waiter refreshes ``expires_at`` while it
    waits, and a row whose ``expires_at`` passed (a waiter that crashed) no
    longer counts. The non-blocking manager calls ignore this table.
    """

    resource = models.CharField(_("resource"), max_length=MAX_LENGTH)
    owner = models.CharField(_("owner"), max_length=MAX_LENGTH)
    expires_at = models.DateTimeField(_("expires at"))
    # The channel of the waiter's process's listener (PostgreSQL LISTEN, or a
    # SQLite datagram socket), which a release wakes when this waiter is the
    # head; "" for a waiter that polls. The
    # database default lets processes that predate the column queue meanwhile
    # (a rolling upgrade): they poll.
    channel = models.CharField(_("channel"), max_length=63, blank=True, default="", db_default="")
    # How long the waiter takes the lock for. On SQLite and PostgreSQL a release
    # hands the lock straight to a listening head with one (``grants_on_release``);
    # null for processes that predate the column: they take it themselves.
    ttl = models.DurationField(_("ttl"), null=True, blank=True)
    # What the waiter asks for: "exclusive" or "shared", and a semaphore's limit
    # (null for a lock). Processes of the previous version queue exclusive.
    mode = models.CharField(_("mode"), max_length=9, default=EXCLUSIVE, db_default=EXCLUSIVE)
    limit = models.PositiveIntegerField(_("limit"), null=True, blank=True)
    # The process id, on the database server, of the waiter's listener
    # connection (PostgreSQL): while that backend lives, so does the waiter's
    # process; a ticket whose backend is gone (its process was killed, its host
    # lost) no longer counts, long before it expires. Null: no such check.
    listener_pid = models.IntegerField(_("listener pid"), null=True, blank=True)
    # The waiter's public name, shown with the queue.
    label = models.CharField(
        _("label"), max_length=MAX_LENGTH, blank=True, default="", db_default=""
    )
    # What the waiter's thread or task holds with lock() while it waits: a JSON
    # list of [resource, owner] pairs ("" for none), written only where it
    # holds some. A cycle of waiters, each holding what the next waits for, is
    # a deadlock (``locking.deadlock``).
    holding = models.TextField(_("holding"), blank=True, default="", db_default="")

    objects = LockWaiterQuerySet.as_manager()

    class Meta:
        db_table = "distributed_lock_waiters"
        verbose_name = _("lock waiter")
        verbose_name_plural = _("lock waiters")
        indexes = [
            models.Index(fields=["resource", "id"], name="distributed_lock_waiters_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.resource} ({self.owner})"


class ThrottleSlot(models.Model):
    """A throttle key's row (``django_dlock.throttle``): its slot 0.

    The row keeps the times of the key's last uses, at most N for a rate of N
    per period (``ring``; the rule is ``rules.throttle``), and each use locks,
    decides and writes it in one statement (``backends.throttles``), so uses
    of a key are decided one at a time on every database. (Before migration
    0010, a key had one row per use in the window, numbered by ``slot``: the
    migration folded them into slot 0.)
    """

    key = models.CharField(_("key"), max_length=MAX_LENGTH)
    slot = models.PositiveIntegerField(_("slot"))
    # The key's last granted use.
    used_at = models.DateTimeField(_("used at"), null=True, blank=True)
    # used_at plus the rate's period: when the last use leaves the window. The
    # purge deletes a key once it has passed.
    free_at = models.DateTimeField(_("free at"), null=True, blank=True)
    # The rate of the last granted use, as written ("10/m"): for the admin,
    # which shows a key's rate as its last use had it.
    rate = models.CharField(_("rate"), max_length=64, blank=True, default="")
    # The times of the last uses, oldest first: microseconds since 1970 in 16
    # digits each (rules.throttle.WIDTH), at most the rate's N of them.
    ring = models.TextField(_("uses kept"), blank=True, default="", db_default="")
    # When the key's last decision refused a use; null when it granted one.
    refused_at = models.DateTimeField(_("refused at"), null=True, blank=True)

    class Meta:
        db_table = "distributed_lock_throttle_slots"
        verbose_name = _("throttle slot")
        verbose_name_plural = _("throttle slots")
        ordering = ["key", "slot"]
        constraints = [
            models.UniqueConstraint(
                fields=["key", "slot"], name="distributed_lock_throttle_slots_key"
            ),
        ]
        indexes = [
            models.Index(fields=["free_at"], name="distributed_lock_throttle_free"),
        ]

    def __str__(self) -> str:
        return f"{self.key} #{self.slot}"


class ThrottleKey(ThrottleSlot):
    """A throttle key as the admin lists it: its row (slot 0), one per key."""

    class Meta:
        proxy = True
        verbose_name = _("throttle key")
        verbose_name_plural = _("throttle keys")

    def __str__(self) -> str:
        return self.key
