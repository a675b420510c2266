"""The lock operations: ``DistributedLock.objects`` and its queryset."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from django.db import models

from django_dlock import signals
from django_dlock.backends import backend_for
from django_dlock.backends.base import Found, Written
from django_dlock.backends.clock import DatabaseNow, expired_before
from django_dlock.conf import conf
from django_dlock.prefix import resource_prefix_q
from django_dlock.threads import release_if_cancelled, run_in_lock_thread
from django_dlock.transactions import in_lock_transaction
from django_dlock.validators import validate_owner, validate_resource, validate_ttl

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock


class ReleaseResult(enum.Enum):
    """What ``DistributedLock.objects.release()`` did."""

    RELEASED = "released"
    NOT_FOUND = "not_found"  # no lock, or it had expired or been released already
    FORBIDDEN = "forbidden"  # another owner holds it


def new_owner_token() -> str:
    """A random 128-bit owner token, for callers that name no owner."""
    return secrets.token_hex(16)


class DistributedLockQuerySet(models.QuerySet["DistributedLock"]):
    def active(self) -> DistributedLockQuerySet:
        """Locks that are held now, by the database's clock."""
        return self.filter(expires_at__gt=DatabaseNow())

    def expired(self, older_than: float = 0) -> DistributedLockQuerySet:
        """Locks that expired or were released (at least ``older_than`` seconds
        ago), by the database's clock."""
        return self.filter(expires_at__lte=expired_before(older_than))

    def owned_by(self, owner: str) -> DistributedLockQuerySet:
        """Locks whose current (or last, if expired) holder is ``owner``."""
        return self.filter(owner=owner)

    def with_resource_prefix(self, prefix: str) -> DistributedLockQuerySet:
        """Locks whose resource starts with ``prefix`` (case-sensitive)."""
        return self.filter(resource_prefix_q(prefix))


# A module-level name, so that django-stubs' plugin can type the generated class.
_DistributedLockManagerBase = models.Manager.from_queryset(DistributedLockQuerySet)


class DistributedLockManager(_DistributedLockManagerBase["DistributedLock"]):
    """Owns the lock operations. Each runs in one transaction of its own on the
    ``DLOCK_DATABASE`` connection (or the one named with ``db_manager()``),
    starting with ``SELECT ... FOR UPDATE`` of the resource's row, and decides
    expiry with the database's clock. None of them joins a transaction the
    caller has open: they raise ``LockTransactionError`` instead.

    Invalid arguments raise ``django.core.exceptions.ValidationError``; a
    database failure raises the database's error. Neither is ever reported as
    "not acquired".
    """

    def _alias(self) -> str:
        return self._db or conf.DATABASE

    def get_queryset(self) -> DistributedLockQuerySet:
        # Lock reads (active(), the API, the admin) go where locks are written,
        # never to a replica that a database router picks for reads.
        queryset = super().get_queryset().using(self._alias())
        return cast(DistributedLockQuerySet, queryset)  # from_queryset() makes it one

    def acquire(
        self, resource: str, owner: str | None = None, ttl: float | None = None
    ) -> DistributedLock | None:
        """Take the lock on ``resource`` for ``ttl`` seconds; never waits.

        Returns the lock, or ``None`` when another owner validly holds it.
        Without ``owner`` a random token is generated (the returned lock's
        ``owner``). The owner that validly holds the lock gets it back with a
        new ``expires_at`` and the same fencing token; any other acquisition
        gets a fencing token larger than every earlier one for ``resource``.
        """
        validate_resource(resource)
        owner = new_owner_token() if owner is None else validate_owner(owner)
        return self._acquire(resource, owner, ttl)

    def _acquire(
        self, resource: str, owner: str, ttl: float | None, *, leaving: int | None = None
    ) -> DistributedLock | None:
        """``acquire()`` with a valid resource and owner. With the lock taken,
        ``lock()``'s waiter ticket ``leaving`` leaves its queue in the same
        transaction: one commit, and no moment where the next waiter sees the
        new holder still queued ahead of it."""
        duration = duration_of(ttl)
        using = self._alias()
        lock, previous_owner, renewed = in_lock_transaction(
            using, lambda: self._take(resource, owner, duration, using, leaving)
        )
        if lock is not None:
            self._announce(lock, owner, previous_owner, renewed)
        return lock

    def _announce(
        self, lock: DistributedLock, owner: str, previous_owner: str | None, renewed: bool
    ) -> None:
        """The signals of an acquisition. They go out after the commit, so that a
        receiver sees the lock as others do, and one that raises cannot undo it."""
        if renewed:
            signals.lock_renewed.send(sender=self.model, lock=lock)
            return
        # An expired (not released) lock of another owner was taken over.
        taken_over_from = previous_owner if previous_owner not in (None, "", owner) else None
        if taken_over_from is not None:
            signals.lock_taken_over.send(
                sender=self.model, lock=lock, previous_owner=taken_over_from
            )
        signals.lock_acquired.send(sender=self.model, lock=lock, taken_over_from=taken_over_from)

    def _take(
        self, resource: str, owner: str, duration: timedelta, using: str, leaving: int | None
    ) -> tuple[DistributedLock | None, str | None, bool]:
        """Acquire inside the lock transaction. Returns the lock (``None`` when
        another owner holds it), the owner of the row before (``None`` for a new
        row) and whether this was the holder re-acquiring (same token)."""
        backend = backend_for(using)
        if backend.fuses_operations:
            return _taken(backend.take(resource, owner, duration, leaving=leaving), owner)
        taken = self._select_and_take(resource, owner, duration, using)
        if taken[0] is not None and leaving is not None:
            backend.leave_queue(leaving)
        return taken

    def _select_and_take(
        self, resource: str, owner: str, duration: timedelta, using: str
    ) -> tuple[DistributedLock | None, str | None, bool]:
        lock = self._select_for_update(resource, using)
        if lock is None:
            inserted = self._insert(resource, owner, duration, using)
            if inserted is not None:
                return inserted, None, False
            # Another process inserted the row first (ON CONFLICT DO NOTHING
            # waited for its commit): read the winner's row and decide on it.
            lock = self._select_for_update(resource, using)
            if lock is None:  # the winner's row is gone already; rare enough to
                return None, None, False  # report as "held" rather than loop
        now: datetime = lock.db_now  # type: ignore[attr-defined]
        previous_owner = lock.owner
        if _holds(lock, now):
            if not same_owner(lock.owner, owner):
                return None, previous_owner, False
            lock.expires_at = now + duration  # re-acquire: same token, same acquired_at
            self._write(lock, using, ["expires_at"])
            return lock, previous_owner, True
        lock.owner = owner
        lock.acquired_at = now
        lock.expires_at = now + duration
        lock.fencing_token += 1
        self._write(lock, using, ["owner", "acquired_at", "expires_at", "fencing_token"])
        return lock, previous_owner, False

    def renew(self, resource: str, owner: str, ttl: float | None = None) -> DistributedLock | None:
        """Extend the lock that ``owner`` validly holds to ``ttl`` seconds from now.

        Returns the renewed lock, or ``None`` when the lock expired or another
        owner holds it. Raises ``DistributedLock.DoesNotExist`` when there is no
        lock on ``resource`` at all (never acquired, released or purged).
        """
        validate_resource(resource)
        validate_owner(owner)
        duration = duration_of(ttl)
        using = self._alias()
        lock = in_lock_transaction(using, lambda: self._extend(resource, owner, duration, using))
        if lock is None:
            return None
        signals.lock_renewed.send(sender=self.model, lock=lock)
        return lock

    def release(self, resource: str, owner: str) -> ReleaseResult:
        """Give up the lock that ``owner`` holds on ``resource``.

        Returns ``RELEASED``; ``NOT_FOUND`` when there is no valid lock (never
        acquired, expired, or released already); ``FORBIDDEN`` when another
        owner holds it, which leaves it untouched.
        """
        validate_resource(resource)
        validate_owner(owner)
        using = self._alias()
        lock, _, outcome = in_lock_transaction(using, lambda: self._give_up(resource, owner, using))
        if lock is None:
            return outcome
        signals.lock_released.send(sender=self.model, lock=lock, owner=owner, forced=False)
        return ReleaseResult.RELEASED

    def force_release(self, resource: str) -> bool:
        """Release the lock on ``resource`` whoever holds it (for operators).

        Returns whether a valid lock was released. Its fencing token stays
        counted, so the next holder still gets a larger one.
        """
        validate_resource(resource)
        using = self._alias()
        lock, owner, _ = in_lock_transaction(using, lambda: self._give_up(resource, None, using))
        if lock is None:
            return False
        signals.lock_released.send(sender=self.model, lock=lock, owner=owner, forced=True)
        return True

    def purge_expired(
        self,
        *,
        older_than: float = 0,
        batch_size: int = 10_000,
        prefix: str = "",
        on_batch: Callable[[int], object] | None = None,
    ) -> int:
        """Delete every lock that expired at least ``older_than`` seconds ago
        (and whose resource starts with ``prefix``); return how many.

        Deletes in batches of at most ``batch_size``, each one transaction whose
        ``DELETE`` checks expiry again, so a lock renewed or taken meanwhile
        survives, and memory and table locks stay bounded. Each batch's largest
        fencing token is kept (``FencingFloor``) so a purged resource that is
        locked again gets a larger token than any it had. ``on_batch(count)`` is
        called after each batch that deleted something.
        """
        using = self._alias()
        backend = backend_for(using)
        deleted = 0
        while True:
            count = in_lock_transaction(
                using,
                lambda: backend.purge_batch(
                    older_than=older_than, batch_size=batch_size, prefix=prefix
                ),
            )
            if count == 0:
                return deleted
            deleted += count
            if on_batch is not None:
                on_batch(count)

    def _extend(
        self, resource: str, owner: str, duration: timedelta, using: str
    ) -> DistributedLock | None:
        """Renew inside the lock transaction: the renewed lock, or ``None`` when
        ``owner`` does not validly hold it; ``DoesNotExist`` without a lock."""
        backend = backend_for(using)
        if backend.fuses_operations:
            written = backend.extend(resource, owner, duration)
            found, lock = written.before, written.after
        else:
            lock = self._select_for_update(resource, using)
            found = _found(lock)
        if found is None or found.released:
            raise self.model.DoesNotExist(f"There is no lock on {resource!r}.")
        if backend.fuses_operations or lock is None:  # the statement decided and wrote
            return lock
        if not same_owner(found.owner, owner) or not found.held:
            return None
        lock.expires_at = lock.db_now + duration  # type: ignore[attr-defined]
        self._write(lock, using, ["expires_at"])
        return lock

    def _give_up(
        self, resource: str, owner: str | None, using: str
    ) -> tuple[DistributedLock | None, str, ReleaseResult]:
        """Release inside the lock transaction (``owner=None``: whoever holds it).
        Returns the released row (``None`` when nothing was released), its owner
        before, and the outcome."""
        backend = backend_for(using)
        if backend.fuses_operations:
            written = backend.give_up(resource, owner)
            found, lock = written.before, written.after
        else:
            lock = self._select_for_update(resource, using)
            found = _found(lock)
        if found is None or not found.held:
            return None, "", ReleaseResult.NOT_FOUND
        if owner is not None and not same_owner(found.owner, owner):
            return None, found.owner, ReleaseResult.FORBIDDEN
        if not backend.fuses_operations and lock is not None:
            self._mark_released(lock, using)
        return lock, found.owner, ReleaseResult.RELEASED

    # -- the statements ------------------------------------------------------

    def _select_for_update(self, resource: str, using: str) -> DistributedLock | None:
        return backend_for(using).select_for_update(resource)

    def _write(self, lock: DistributedLock, using: str, fields: list[str]) -> None:
        backend_for(using).update(lock, fields)

    def _mark_released(self, lock: DistributedLock, using: str) -> None:
        # The row stays, expired and ownerless, to keep the fencing token counting.
        lock.owner = ""
        lock.expires_at = lock.db_now  # type: ignore[attr-defined]
        # (On PostgreSQL the same statement wakes the head of the resource's waiters.)
        backend_for(using).mark_released(lock)

    def _insert(
        self, resource: str, owner: str, duration: timedelta, using: str
    ) -> DistributedLock | None:
        return backend_for(using).insert(resource, owner, duration)

    # -- async twins -----------------------------------------------------------
    # Each runs the sync operation in a thread of django-dlock's own (not the
    # request's thread-sensitive one): a lock operation must never share the
    # request's connection or a transaction open on it.

    async def aacquire(
        self, resource: str, owner: str | None = None, ttl: float | None = None
    ) -> DistributedLock | None:
        """``acquire()`` for async code: never waits for the lock.

        Cancelled while the acquisition runs, it releases what it took before
        the cancellation goes on.
        """
        using = self._alias()
        acquiring = run_in_lock_thread(using, self.acquire, resource, owner, ttl)
        return await release_if_cancelled(using, acquiring, self.release)

    async def arenew(
        self, resource: str, owner: str, ttl: float | None = None
    ) -> DistributedLock | None:
        """``renew()`` for async code; raises ``DoesNotExist`` when there is no lock."""
        return await run_in_lock_thread(self._alias(), self.renew, resource, owner, ttl)

    async def arelease(self, resource: str, owner: str) -> ReleaseResult:
        """``release()`` for async code."""
        return await run_in_lock_thread(self._alias(), self.release, resource, owner)


def same_owner(held_by: str, owner: str) -> bool:
    """Whether ``owner`` is ``held_by``, compared in constant time: an owner
    token is a secret, and its prefix must not leak through timing."""
    return secrets.compare_digest(held_by.encode(), owner.encode())


def _taken(written: Written, owner: str) -> tuple[DistributedLock | None, str | None, bool]:
    """``_take``'s answer from a backend's ``take()``: the lock, the row's owner
    before (``None`` for a new row), and whether the holder re-acquired."""
    before, after = written.before, written.after
    previous_owner = None if before is None else before.owner
    if after is None:
        return None, previous_owner, False
    # A re-acquisition keeps acquired_at; a new holder's is the database's now.
    # (A row that appeared after the statement's snapshot has no ``before``.)
    renewed = after.acquired_at < after.db_now  # type: ignore[attr-defined]
    return after, previous_owner, renewed


def _found(lock: DistributedLock | None) -> Found | None:
    """What the operations decide on, of a row read with SELECT ... FOR UPDATE."""
    if lock is None:
        return None
    return Found(owner=lock.owner, held=_holds(lock, lock.db_now))  # type: ignore[attr-defined]


def _holds(lock: DistributedLock, now: datetime) -> bool:
    """Whether the lock has a holder at the database time ``now``."""
    return not lock.is_released and now < lock.expires_at


# SQLite's clock counts milliseconds: a shorter lock would expire as it is made.
SHORTEST_TTL = 0.001


def duration_of(ttl: float | None) -> timedelta:
    """How long a lock taken for ``ttl`` seconds (``None``: the default) lasts."""
    seconds = validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl)
    return timedelta(seconds=max(seconds, SHORTEST_TTL))
