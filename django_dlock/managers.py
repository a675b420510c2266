"""The lock operations: ``DistributedLock.objects`` and its queryset.

The manager validates what callers pass, once, and hands every operation to
the lock service of its database (``django_dlock.service``), the operation
layer that ``lock()``, the API, the admin and the commands share: it runs
each as one backend method, which decides, turns the rows the backend answers
into model instances and sends the signals. The manager knows no backend. The model class reaches it as ``self.model`` (this module does not
import ``models``, which imports it): its annotations use a type variable bound
to Django's ``Model``, and ``DistributedLock`` declares its manager as
``DistributedLockManager["DistributedLock"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Literal, TypeVar, cast, overload

from django.db import models
from django.db.models import Q

from django_dlock.backends.purge import expired_q, purgeable_q
from django_dlock.conf import conf
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules import (
    Hold,
    ReleaseResult,
    duration_of,
    new_owner_token,
)
from django_dlock.rules.claim import claims_for
from django_dlock.rules.clock import DatabaseNow, time_left
from django_dlock.rules.predicates import DELAY_END, DELAY_RUNS
from django_dlock.service import LockService, Refusal, Renewed, service_of
from django_dlock.threads import release_if_cancelled, run_in_lock_thread
from django_dlock.validators import (
    validate_owner,
    validate_resource,
)

__all__ = [
    "DistributedLockManager",
    "DistributedLockQuerySet",
    "ReleaseResult",
    "delay_runs_q",
]

_Lock = TypeVar("_Lock", bound=models.Model)


def delay_runs_q() -> Q:
    """Locks whose lock-delay still runs, by the database's clock
    (``rules.predicates.DELAY_RUNS``)."""
    return DELAY_RUNS.q()


class DistributedLockQuerySet(models.QuerySet[_Lock]):
    """Lock rows; each filter reads by the database's clock (to act on a lock, acquire it)."""

    def active(self) -> DistributedLockQuerySet[_Lock]:
        """Locks that are held now, by the database's clock."""
        return self.filter(expires_at__gt=DatabaseNow())

    def expired(self, older_than: float = 0) -> DistributedLockQuerySet[_Lock]:
        """Locks that expired or were released (at least ``older_than`` seconds
        ago), by the database's clock."""
        return self.filter(expired_q(older_than))

    def purgeable(self, older_than: float = 0) -> DistributedLockQuerySet[_Lock]:
        """Locks that ``purge_expired()`` deletes: expired or released at least
        ``older_than`` seconds ago, and out of any lock-delay (a delayed lock
        is kept until its delay ended ``older_than`` ago)."""
        return self.filter(purgeable_q(older_than))

    def delayed(self) -> DistributedLockQuerySet[_Lock]:
        """Locks refused to everyone while the lock-delay of their holder's
        involuntary loss (expiry, or a force-release) runs, by the database's
        clock; their ``available_at`` says until when."""
        return self.filter(delay_runs_q())

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

    Invalid arguments raise ``django_dlock.exceptions.InvalidArgument`` (a
    ``django.core.exceptions.ValidationError`` and a ``ValueError``); a
    database failure raises the database's error. Neither is ever reported as
    "not acquired".
    """

    def _alias(self) -> str:
        return self._db or conf.DATABASE

    def _service(self) -> LockService[_Lock]:
        """The internal operations (``django_dlock.service``) on this manager's database."""
        return service_of(self.model, self._alias())

    def get_queryset(self) -> DistributedLockQuerySet[_Lock]:
        # Lock reads (active(), the API, the admin) go where locks are written,
        # never to a replica that a database router picks for reads.
        queryset = super().get_queryset().using(self._alias())
        return cast(DistributedLockQuerySet[_Lock], queryset)  # from_queryset() makes it one

    @overload
    def acquire(
        self,
        resource: str,
        owner: str | None = None,
        ttl: float | None = None,
        *,
        reentrant: bool = False,
        shared: Literal[False] = False,
        limit: None = None,
        label: str = "",
        lock_delay: float | timedelta | None = None,
    ) -> _Lock | None: ...

    @overload
    def acquire(
        self,
        resource: str,
        owner: str | None = None,
        ttl: float | None = None,
        *,
        reentrant: bool = False,
        shared: bool = False,
        limit: int | None = None,
        label: str = "",
        lock_delay: float | timedelta | None = None,
    ) -> Hold | None: ...

    def acquire(
        self,
        resource: str,
        owner: str | None = None,
        ttl: float | None = None,
        *,
        reentrant: bool = False,
        shared: bool = False,
        limit: int | None = None,
        label: str = "",
        lock_delay: float | timedelta | None = None,
    ) -> _Lock | Hold | None:
        """Take a hold on ``resource`` for ``ttl`` seconds; never waits.

        Returns the hold, or ``None`` when others hold the lock in a way that
        excludes it. Without ``owner`` a random token is generated (the hold's
        ``owner``). Exclusive by default: the ``DistributedLock`` itself.
        ``shared=True``: one of many readers, none beside the exclusive holder,
        and none ahead of a writer queued in ``lock()``; ``limit=N``: one of at
        most N permits of a semaphore. Each is a ``LockHold``. The owner that
        validly holds it gets it back with a new ``expires_at`` and the same
        fencing token (``reentrant=True``: with one hold more, which a release
        takes away again); every other grant gets a fencing token larger than
        every earlier one for ``resource``. ``label`` is a public name for the
        holder (the owner is a secret). Raises ``LockKindMismatch`` when the
        resource has holders of another kind (a semaphore, or another limit).
        ``lock_delay`` (seconds, exclusive holds): if this hold is lost rather
        than released (it expires, or is force-released), the resource is
        refused to everyone for that long after (``DistributedLock.available_at``).
        """
        # (self._service(), without its two calls: acquire and release are the hot ones.)
        service = service_of(self.model, self._db or conf.DATABASE)
        hold = service.acquire(
            resource,
            owner,
            ttl,
            reentrant=reentrant,
            shared=shared,
            limit=limit,
            label=label,
            lock_delay=lock_delay,
        )
        return None if isinstance(hold, Refusal) else hold

    def renew(self, resource: str, owner: str, ttl: float | None = None) -> Hold | None:
        """Extend the hold that ``owner`` validly has to ``ttl`` seconds from now.

        Returns the renewed hold, or ``None`` when it expired or another owner
        holds the lock. Raises ``DistributedLock.DoesNotExist`` when there is no
        lock on ``resource`` at all (never acquired, released or purged).
        """
        validate_resource(resource)
        validate_owner(owner)
        renewed = self._service().renew(resource, owner, duration_of(ttl))
        if not isinstance(renewed, Renewed):
            return renewed
        if not renewed.exists:
            raise self.model.DoesNotExist(f"There is no lock on {resource!r}.")  # type: ignore[attr-defined]
        return None

    def release(self, resource: str, owner: str) -> ReleaseResult:
        """Give up the hold that ``owner`` has on ``resource``.

        Returns ``RELEASED``; ``DECREMENTED`` when a reentrant hold still has
        holds (the last release answers ``RELEASED``); ``NOT_FOUND`` when there
        is no valid lock (never acquired, expired, or released already);
        ``FORBIDDEN`` when others hold it, which leaves it untouched.
        """
        validate_resource(resource)
        validate_owner(owner)
        return service_of(self.model, self._db or conf.DATABASE).release(resource, owner)

    def force_release(self, resource: str, *, owner: str | None = None) -> bool:
        """Release every hold of ``resource`` whoever holds it (for operators),
        or, with ``owner``, that holder's hold whatever its hold count.

        Returns whether a valid hold was released. Fencing tokens stay counted,
        so the next holder still gets a larger one.
        """
        validate_resource(resource)
        if owner is not None:
            validate_owner(owner)
        return self._service().force_release(resource, owner)

    def holders(self, resource: str) -> list[Hold]:
        """The valid holds of ``resource``, oldest first: its exclusive holder,
        or its readers or permits; none when it is free."""
        validate_resource(resource)
        return self._service().holders(resource)

    def acquire_all(
        self,
        resources: Sequence[str | tuple[str, str]],
        owner: str | None = None,
        ttl: float | None = None,
        *,
        label: str = "",
    ) -> list[Hold] | None:
        """Take every lock of ``resources`` in one transaction, or none; never
        waits. An item is a resource (exclusive) or ``(resource, "shared")``.

        Returns the holds in the order asked, each with its own fencing token,
        or ``None`` (and nothing held) when any of them is held. The locks are
        taken in the order of their names, whatever the order asked, so two
        callers asking for overlapping sets never deadlock. Raises
        ``LockKindMismatch`` when one of them is a semaphore.
        """
        owner = new_owner_token() if owner is None else validate_owner(owner)
        service = self._service()
        return service.take_all(claims_for(resources, owner, ttl, label))

    def release_all(self, resources: Sequence[str], owner: str) -> list[ReleaseResult]:
        """Release ``owner``'s holds of ``resources`` together, in one
        transaction; what each release did, in the order asked."""
        for resource in resources:
            validate_resource(resource)
        validate_owner(owner)
        return self._service().release_all(list(resources), owner)

    def purge_expired(
        self,
        *,
        older_than: float = 0,
        batch_size: int = 10_000,
        prefix: str = "",
        on_batch: Callable[[int], object] | None = None,
    ) -> int:
        """Delete every lock and hold that expired at least ``older_than``
        seconds ago (and whose resource starts with ``prefix``); return how
        many locks.

        Deletes in batches of at most ``batch_size``, each one transaction whose
        ``DELETE`` checks expiry again, so a lock renewed or taken meanwhile
        survives, and memory and table locks stay bounded. Each batch's largest
        fencing token is kept (``FencingFloor``) so a purged resource that is
        locked again gets a larger token than any it had. A lock that a lock
        operation holds locked at that moment (``acquire_all()`` taking it, a
        renewal) is skipped, and left for a later purge. ``on_batch(count)`` is
        called after each batch that deleted something.
        """
        return self._service().purge_expired(
            older_than=older_than, batch_size=batch_size, prefix=prefix, on_batch=on_batch
        )

    # -- async twins -----------------------------------------------------------
    # Each runs the sync operation in a thread of django-dlock's own (not the
    # request's thread-sensitive one): a lock operation must never share the
    # request's connection or a transaction open on it.

    async def aacquire(
        self,
        resource: str,
        owner: str | None = None,
        ttl: float | None = None,
        *,
        reentrant: bool = False,
        shared: bool = False,
        limit: int | None = None,
        label: str = "",
        lock_delay: float | timedelta | None = None,
    ) -> Hold | None:
        """``acquire()`` for async code: never waits for the lock.

        Cancelled while the acquisition runs, it releases what it took before
        the cancellation goes on.
        """
        using = self._alias()
        owner = new_owner_token() if owner is None else owner

        def acquire() -> Hold | None:
            return self.acquire(
                resource,
                owner,
                ttl,
                reentrant=reentrant,
                shared=shared,
                limit=limit,
                label=label,
                lock_delay=lock_delay,
            )

        acquiring = run_in_lock_thread(using, acquire)
        return await release_if_cancelled(using, acquiring, lambda: self.release(resource, owner))

    async def arenew(self, resource: str, owner: str, ttl: float | None = None) -> Hold | None:
        """``renew()`` for async code; raises ``DoesNotExist`` when there is no lock."""
        return await run_in_lock_thread(self._alias(), self.renew, resource, owner, ttl)

    async def arelease(self, resource: str, owner: str) -> ReleaseResult:
        """``release()`` for async code."""
        return await run_in_lock_thread(self._alias(), self.release, resource, owner)

    def expires_in(self, resource: str) -> float | None:
        """Seconds until the holder's lock on ``resource`` expires, by the database's
        clock; ``None`` when nobody holds it. (For a retry's countdown: it reads, never waits.)"""
        validate_resource(resource)
        row = (
            self.active()
            .filter(resource=resource)
            .annotate(db_now=DatabaseNow())
            .values_list("expires_at", "db_now")
            .first()
        )
        return None if row is None else max(time_left(*row), 0.0)

    def available_in(self, resource: str) -> float | None:
        """Seconds until the lock-delay on ``resource`` ends (the holder lost its
        hold, and nobody may take it until then), by the database's clock;
        ``None`` when no delay runs. One query; it reads, never waits."""
        validate_resource(resource)
        row = (
            self.delayed()
            .filter(resource=resource)
            .annotate(db_now=DatabaseNow(), delay_end=DELAY_END.expression())
            .values_list("delay_end", "db_now")
            .first()
        )
        return None if row is None else max(time_left(*row), 0.0)
