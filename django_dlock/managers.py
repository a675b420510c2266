"""The lock operations: ``DistributedLock.objects`` and its queryset.

The manager validates what callers pass, asks the backend of its database to
run the operation (each is one backend method, which decides), turns the rows
the backend answers into model instances and sends the signals. It knows no
vendor. The model class reaches it as ``self.model`` (this module does not
import ``models``, which imports it): its annotations use a type variable bound
to Django's ``Model``, and ``DistributedLock`` declares its manager as
``DistributedLockManager["DistributedLock"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.db import models

from django_dlock import signals
from django_dlock.backends import backend_for
from django_dlock.backends.base import LockBackend, expired_q
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.results import LOCK_FIELDS, LockRow
from django_dlock.conf import conf
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules import ReleaseResult, duration_of, new_owner_token
from django_dlock.threads import release_if_cancelled, run_in_lock_thread
from django_dlock.validators import validate_owner, validate_resource

__all__ = ["DistributedLockManager", "DistributedLockQuerySet", "ReleaseResult"]

_Lock = TypeVar("_Lock", bound=models.Model)


class DistributedLockQuerySet(models.QuerySet[_Lock]):
    def active(self) -> DistributedLockQuerySet[_Lock]:
        """Locks that are held now, by the database's clock."""
        return self.filter(expires_at__gt=DatabaseNow())

    def expired(self, older_than: float = 0) -> DistributedLockQuerySet[_Lock]:
        """Locks that expired or were released (at least ``older_than`` seconds
        ago), by the database's clock."""
        return self.filter(expired_q(older_than))

    def owned_by(self, owner: str) -> DistributedLockQuerySet[_Lock]:
        """Locks whose current (or last, if expired) holder is ``owner``."""
        return self.filter(owner=owner)

    def with_resource_prefix(self, prefix: str) -> DistributedLockQuerySet[_Lock]:
        """Locks whose resource starts with ``prefix`` (case-sensitive)."""
        return self.filter(resource_prefix_q(prefix))


# A module-level name, so that django-stubs' plugin can type the generated class.
_DistributedLockManagerBase = models.Manager.from_queryset(DistributedLockQuerySet)


class DistributedLockManager(_DistributedLockManagerBase[_Lock]):
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

    def _backend(self) -> LockBackend:
        return backend_for(self._alias())

    def get_queryset(self) -> DistributedLockQuerySet[_Lock]:
        # Lock reads (active(), the API, the admin) go where locks are written,
        # never to a replica that a database router picks for reads.
        queryset = super().get_queryset().using(self._alias())
        return cast(DistributedLockQuerySet[_Lock], queryset)  # from_queryset() makes it one

    def acquire(
        self, resource: str, owner: str | None = None, ttl: float | None = None
    ) -> _Lock | None:
        """Take the lock on ``resource`` for ``ttl`` seconds; never waits.

        Returns the lock, or ``None`` when another owner validly holds it.
        Without ``owner`` a random token is generated (the returned lock's
        ``owner``). The owner that validly holds the lock gets it back with a
        new ``expires_at`` and the same fencing token; any other acquisition
        gets a fencing token larger than every earlier one for ``resource``.
        """
        validate_resource(resource)
        owner = new_owner_token() if owner is None else validate_owner(owner)
        return self.acquire_queued(resource, owner, ttl, ticket=None)

    def renew(self, resource: str, owner: str, ttl: float | None = None) -> _Lock | None:
        """Extend the lock that ``owner`` validly holds to ``ttl`` seconds from now.

        Returns the renewed lock, or ``None`` when the lock expired or another
        owner holds it. Raises ``DistributedLock.DoesNotExist`` when there is no
        lock on ``resource`` at all (never acquired, released or purged).
        """
        validate_resource(resource)
        validate_owner(owner)
        renewed = self._backend().extend(resource, owner, duration_of(ttl))
        if not renewed.exists:
            does_not_exist: type[Exception] = cast(Any, self.model).DoesNotExist
            raise does_not_exist(f"There is no lock on {resource!r}.")
        if renewed.row is None:
            return None
        lock = self._lock(renewed.row)
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
        released = self._backend().give_up(resource, owner)
        if released.row is not None:
            lock = self._lock(released.row)
            signals.lock_released.send(sender=self.model, lock=lock, owner=owner, forced=False)
        return released.result

    def force_release(self, resource: str) -> bool:
        """Release the lock on ``resource`` whoever holds it (for operators).

        Returns whether a valid lock was released. Its fencing token stays
        counted, so the next holder still gets a larger one.
        """
        validate_resource(resource)
        released = self._backend().give_up(resource, None)
        if released.row is None:
            return False
        lock = self._lock(released.row)
        signals.lock_released.send(sender=self.model, lock=lock, owner=released.owner, forced=True)
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
        backend = self._backend()
        deleted = 0
        while True:
            batch = backend.purge_batch(older_than=older_than, batch_size=batch_size, prefix=prefix)
            if batch.chosen == 0:  # (a batch renewed meanwhile deletes none: look again)
                return deleted
            deleted += batch.deleted
            if batch.deleted and on_batch is not None:
                on_batch(batch.deleted)

    # -- lock()'s waiters (an internal interface of django_dlock.locking) -----------------

    def acquire_queued(
        self, resource: str, owner: str, ttl: float | None, *, ticket: int | None
    ) -> _Lock | None:
        """``acquire()`` with a valid resource and owner, for ``lock()``: with the
        lock taken, the waiter of ``ticket`` (if any) leaves its queue in the
        same transaction."""
        taken = self._backend().take(resource, owner, duration_of(ttl), leaving=ticket)
        if taken.row is None:
            return None
        lock = self._lock(taken.row)
        if taken.renewed:
            signals.lock_renewed.send(sender=self.model, lock=lock)
        else:
            self._announce_acquired(taken.row, lock, taken.previous_owner)
        return lock

    def accept_handover(self, resource: str, owner: str, ticket: int) -> tuple[_Lock, float] | None:
        """The lock, if a release handed it to the waiter of ``ticket``
        (``LockBackend.grants_on_release``), announced as acquired, and how many
        seconds ago (by the database's clock) the release made it the holder's."""
        row = self._backend().granted(resource, owner, ticket)
        if row is None:
            return None
        lock = self._lock(row)
        self._announce_acquired(row, lock, previous_owner="")
        return lock, max((row.now - row.acquired_at).total_seconds(), 0.0)

    def _announce_acquired(self, row: LockRow, lock: _Lock, previous_owner: str | None) -> None:
        """The signals of a new holder (``previous_owner``: the row's owner
        before; an expired lock of another owner was taken over). They go out
        after the commit, so that a receiver sees the lock as others do, and one
        that raises cannot undo it."""
        taken_over = previous_owner not in (None, "", row.owner)
        taken_over_from = previous_owner if taken_over else None
        if taken_over_from is not None:
            signals.lock_taken_over.send(
                sender=self.model, lock=lock, previous_owner=taken_over_from
            )
        signals.lock_acquired.send(sender=self.model, lock=lock, taken_over_from=taken_over_from)

    def renew_held(self, pairs: list[tuple[str, str]], ttl: float) -> dict[tuple[str, str], _Lock]:
        """Renew each (resource, owner) lock that owner validly holds, for
        ``ttl`` seconds (the auto-renewer's batch); the renewed locks. A lock
        not among them was lost."""
        rows = self._backend().renew_many(pairs, ttl)
        renewed = {pair: self._lock(row) for pair, row in rows.items()}
        for lock in renewed.values():
            signals.lock_renewed.send(sender=self.model, lock=lock)
        return renewed

    def _lock(self, row: LockRow) -> _Lock:
        return self.model.from_db(self._alias(), LOCK_FIELDS, row.values())

    # -- async twins -----------------------------------------------------------
    # Each runs the sync operation in a thread of django-dlock's own (not the
    # request's thread-sensitive one): a lock operation must never share the
    # request's connection or a transaction open on it.

    async def aacquire(
        self, resource: str, owner: str | None = None, ttl: float | None = None
    ) -> _Lock | None:
        """``acquire()`` for async code: never waits for the lock.

        Cancelled while the acquisition runs, it releases what it took before
        the cancellation goes on.
        """
        using = self._alias()
        owner = new_owner_token() if owner is None else owner
        acquiring = run_in_lock_thread(using, self.acquire, resource, owner, ttl)
        return await release_if_cancelled(using, acquiring, lambda: self.release(resource, owner))

    async def arenew(self, resource: str, owner: str, ttl: float | None = None) -> _Lock | None:
        """``renew()`` for async code; raises ``DoesNotExist`` when there is no lock."""
        return await run_in_lock_thread(self._alias(), self.renew, resource, owner, ttl)

    async def arelease(self, resource: str, owner: str) -> ReleaseResult:
        """``release()`` for async code."""
        return await run_in_lock_thread(self._alias(), self.release, resource, owner)
