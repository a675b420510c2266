"""The internal lock service of one database alias: what the manager's calls
and ``lock()`` share. The claims they make, the acquisitions that carry them
out with their signals, and the model instances of the rows answered.

Not public: ``DistributedLock.objects`` offers what the contract names and runs
on it; ``django_dlock.locking`` (its waiters, its renewer, ``lock([...])``)
reaches it through ``service_for(using)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

from django.apps import apps
from django.db import models
from django.dispatch import Signal

from django_dlock import signals
from django_dlock.backends import backend_for, backend_of_alias
from django_dlock.backends.base import LockBackend
from django_dlock.backends.features import BackendFeatures
from django_dlock.backends.guard import same_database
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.results import LockRow, Refusal, Released, Renewed
from django_dlock.backends.throttles import ThrottleAnswer
from django_dlock.backends.transactions import in_lock_transaction, refuse_callers_transaction
from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument, LockKindMismatch
from django_dlock.instances import from_db
from django_dlock.kinds import LockKind
from django_dlock.rules import (
    SHARED_HOLDERS,
    Hold,
    ReleaseResult,
    duration_of,
    kind_of,
    new_owner_token,
)
from django_dlock.rules.claim import Claim, claim_for
from django_dlock.rules.notice import GrantNotice
from django_dlock.validators import validate_owner, validate_resource

__all__ = ["LockService", "Refusal", "Renewed", "mismatch", "service_for", "service_of"]

_Lock = TypeVar("_Lock", bound=models.Model)
_T = TypeVar("_T")


class LockService(Generic[_Lock]):
    """The lock operations on ``_Lock`` rows (``model``) in the database ``using``."""

    def __init__(self, model: type[_Lock], using: str) -> None:
        self.model = model
        self.using = using

    def _backend(self) -> LockBackend:
        return backend_of_alias(self.using)

    # -- what the layers above reach the database through -------------------------

    @property
    def features(self) -> BackendFeatures:
        """What this alias's backend can do (push wake-ups, hand-overs, ...)."""
        return self._backend().features

    @property
    def queue(self) -> WaiterQueue:
        """The statements of ``lock()``'s waiter queue on this alias."""
        return self._backend().queue

    def in_transaction(self, operation: Callable[[], _T]) -> _T:
        """``operation()`` in a lock transaction of its own on this alias, run
        again after a lost race where the vendor does so (a throttle's decision,
        a purge's batch); ``LockTransactionError`` inside a transaction the
        caller has open."""
        return in_lock_transaction(self._backend(), operation)

    def refuse_callers_transaction(self) -> None:
        """Raise ``LockTransactionError`` if the caller has a transaction open on
        this alias (lock rows written in it would be invisible to others)."""
        refuse_callers_transaction(self.using)

    def atomic(
        self, resource: str, owner: str, fencing_token: int, *, shared: bool, using: str | None
    ) -> AbstractContextManager[float]:
        """``held.atomic()`` of the hold (``owner``'s grant ``fencing_token`` on
        ``resource``) in this alias's database: a transaction on ``using``
        (default: this alias), which must be the same database, whose first
        statement checks the hold and locks its row (``backends/guard.py``)."""
        using = using or self.using
        if not same_database(self.using, using):
            raise InvalidArgument(
                f"The lock on {resource!r} is kept in database {self.using!r}; a block on "
                f"{using!r} cannot be guarded by it (only the lock's own database can).",
                code="using",
            )
        guard = backend_for(using).guard
        return guard.atomic(resource, owner, fencing_token, shared=shared, using=using)

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
    ) -> Hold | Refusal:
        """The manager's ``acquire()``, and the API's: its arguments checked
        here, once (no owner: a new random token); the hold, or why it was
        refused (``lock_refused`` sent)."""
        validate_resource(resource)
        owner = new_owner_token() if owner is None else validate_owner(owner)
        if shared or reentrant or limit is not None or lock_delay is not None or label != "":
            kind = LockKind.from_flags(shared=shared, limit=limit, reentrant=reentrant)
            claim = claim_for(resource, owner, ttl, kind=kind, label=label, lock_delay=lock_delay)
        else:  # (claim_for's claim of an exclusive lock and nothing more, without its calls)
            claim = Claim(resource, owner, duration_of(ttl))
        return self.try_take(claim)

    def try_take(self, claim: Claim, *, instance: bool = True) -> Hold | Refusal:
        """``take`` that does not wait (``acquire()``, ``lock()`` without a
        timeout): ``lock_refused`` is sent here only (a wait's end is
        ``lock_wait_ended``)."""
        taken = self.take(claim, instance=instance)
        if isinstance(taken, Refusal):
            signals.send_refused(self.model, claim)
        return taken

    def take(self, claim: Claim, *, instance: bool = True) -> Hold | Refusal:
        """The acquisition ``claim`` (checked already), with the signals of a
        grant: the hold, or why it was refused, as the backend found it; once
        admitted, the waiter of ``claim.ticket`` (if any) leaves its queue in
        the same transaction. ``instance=False``: the hold as the row the
        backend answered, where the caller only reads it (``lock()``), unless a
        signal's receiver is to get the model instance."""
        taken = self._backend().take(claim)
        if taken.mismatch is not None:
            raise mismatch(claim, taken.mismatch)
        if taken.row is None:
            return taken.refusal
        return self.announce(taken.row, taken.previous_owner, taken.renewed, instance=instance)

    def take_all(self, claims: list[Claim]) -> list[Hold] | None:
        """``acquire_all()`` of checked claims."""
        taken = self._backend().take_all(claims)
        if taken is None:
            return None
        holds = []
        for claim, one in zip(claims, taken, strict=True):
            if one.mismatch is not None:
                raise mismatch(claim, one.mismatch)
            assert one.row is not None  # noqa: S101 - take_all() takes all or none
            holds.append(self.announce(one.row, one.previous_owner, one.renewed))
        return holds

    def accept_handover(
        self,
        resource: str,
        owner: str,
        ticket: int,
        duration: timedelta,
        lock_delay: timedelta | None = None,
        *,
        instance: bool = True,
        shared: bool = False,
        token: int | None = None,
    ) -> Hold | None:
        """The lock for ``duration`` (``lock_delay``) if a release handed it to ``ticket``'s waiter
        (``shared``: the hold of ``token``, if told) and it stands; announced (``instance``)."""
        backend = self._backend()
        if shared:
            row = backend.take_shared_grant(resource, owner, token, duration)
        else:
            row = backend.granted(resource, owner, ticket, duration, lock_delay)
        if row is None:
            return None
        return self.announce(row, previous_owner="", renewed=False, instance=instance)

    def told_grant(self, claim: Claim, notice: GrantNotice) -> Hold:
        """The hold a release granted ``claim``'s waiter and told it of (``rules.notice``)."""
        return self.announce(LockRow.told(claim, notice), "", renewed=False, instance=False)

    def announce(
        self, row: LockRow, previous_owner: str | None, renewed: bool, *, instance: bool = True
    ) -> Hold:
        """The signals of an acquisition (``previous_owner``: the resource row's
        owner before; an expired lock of another owner was taken over), and the
        hold: the model instance of ``row`` where the caller or a receiver gets
        one, else ``row`` itself. They go out after the commit, so that a
        receiver sees the lock as others do, and one that raises cannot undo it."""
        if renewed:
            sent: tuple[Signal, ...] = (signals.lock_renewed,)
            taken_over_from = None
        else:
            taken_over = previous_owner not in (None, "", SHARED_HOLDERS, row.owner)
            taken_over_from = previous_owner if taken_over else None
            sent = (signals.lock_acquired,)
            if taken_over_from is not None:
                sent = (signals.lock_taken_over, signals.lock_acquired)
        if not (instance or any(s.receivers and s.has_listeners(self.model) for s in sent)):
            return row
        hold = self.instance(row)
        if renewed:
            signals.lock_renewed.send(sender=self.model, lock=hold)
        else:
            if taken_over_from is not None:
                signals.lock_taken_over.send(
                    sender=self.model, lock=hold, previous_owner=taken_over_from
                )
            signals.lock_acquired.send(
                sender=self.model, lock=hold, taken_over_from=taken_over_from
            )
        return hold

    def release(
        self, resource: str, owner: str, mode: str | None = None, *, queued: bool = False
    ) -> ReleaseResult:
        """``owner``'s release of its hold on ``resource`` (both checked; ``mode``,
        ``queued``: ``LockBackend.give_up``'s), with its signal: what it did."""
        released = self._backend().give_up(resource, owner, mode=mode, queued=queued)
        self._announce(released, owner)
        return released.result

    def _announce(self, released: Released, owner: str) -> None:
        """``lock_released`` for ``owner``'s release, where it released."""
        row = released.row
        if signals.lock_released.receivers and released.result is ReleaseResult.RELEASED and row:
            self.announce_released(row, owner, forced=False)

    def announce_released(self, row: LockRow, owner: str, *, forced: bool) -> None:
        """``lock_released`` for the hold ``owner`` had (``row``, as released).
        The hold's model instance is built only for a receiver: a release
        returns none, so without one nobody would see it. (A signal without
        any receiver is told by its list, without has_listeners()' calls.)"""
        lock_released = signals.lock_released
        if lock_released.receivers and lock_released.has_listeners(self.model):
            hold = self.instance(row)
            lock_released.send(sender=self.model, lock=hold, owner=owner, forced=forced)

    def renew(self, resource: str, owner: str, duration: timedelta) -> Hold | Renewed:
        """Extend ``owner``'s valid hold of ``resource`` to ``duration`` from now,
        with its signal: the renewed hold, or what the renewal found instead
        (``Renewed``: whether there is a lock at all, and who holds it)."""
        renewed = self._backend().extend(resource, owner, duration)
        if renewed.row is None:
            return renewed
        hold = self.instance(renewed.row)
        signals.lock_renewed.send(sender=self.model, lock=hold)
        return hold

    def force_release(self, resource: str, owner: str | None) -> bool:
        """An operator's release of every hold of ``resource`` (or of ``owner``'s,
        whatever its hold count), with a signal for each: whether one was."""
        released = self._backend().give_up(resource, owner, forced=True)
        for held in released.released:  # each as it was held
            self.announce_released(
                replace(held, owner="", expires_at=held.now), held.owner, forced=True
            )
        return bool(released.released)

    def release_showing(self, resource: str, owner: str) -> tuple[ReleaseResult, Hold | None]:
        """``release``, for a caller that shows what is left (the API): what it
        did, and, decremented, the hold as the release left it (nothing reads
        it again)."""
        released = self._backend().give_up(resource, owner)
        self._announce(released, owner)
        left = released.row if released.result is ReleaseResult.DECREMENTED else None
        return released.result, None if left is None else self.instance(left)

    def holders(self, resource: str) -> list[Hold]:
        """The valid holds of ``resource``, oldest first; not a revoked grant's (nobody's)."""
        revoked = f"{SHARED_HOLDERS} "  # (``backends.shared_release.revoked_owner``)
        rows = self._backend().holders(resource)
        return [self.instance(row) for row in rows if not row.owner.startswith(revoked)]

    def release_all(self, resources: list[str], owner: str) -> list[ReleaseResult]:
        """``owner``'s releases of ``resources`` in one transaction, with their
        signals: what each did, in the order asked."""
        outcomes = self._backend().give_up_all(resources, owner)
        for released in outcomes:
            self._announce(released, owner)
        return [released.result for released in outcomes]

    def purge_expired(
        self,
        *,
        older_than: float,
        batch_size: int,
        prefix: str,
        on_batch: Callable[[int], object] | None,
    ) -> int:
        """The purge of ``DistributedLock.objects.purge_expired()``: batches
        until one takes every expired lock there was; how many locks."""
        backend = self._backend()
        deleted = 0
        while True:
            batch = backend.purge_batch(older_than=older_than, batch_size=batch_size, prefix=prefix)
            deleted += batch.deleted
            if batch.deleted and on_batch is not None:
                on_batch(batch.deleted)
            # Done when the batch took every expired lock there was, or deleted
            # none of those it chose (each was held by a lock operation or
            # renewed meanwhile: choosing again would find them again). Not
            # "until none is expired": locks that a busy resource's holders
            # release while the purge runs would keep it going.
            if batch.chosen < batch_size or not batch.deleted:
                return deleted

    def renew_held(
        self, pairs: list[tuple[str, str]], ttl: float
    ) -> dict[tuple[str, str], Hold | Renewed]:
        """Renew each (resource, owner) hold that owner validly has, for ``ttl``
        seconds (the auto-renewer's batch: one statement per table): the
        renewed hold, or what its renewal found instead, for each pair."""
        answers: dict[tuple[str, str], Hold | Renewed] = {}
        for pair, renewed in self._backend().renew_many(pairs, ttl).items():
            if renewed.row is None:
                answers[pair] = renewed
                continue
            hold = answers[pair] = self.instance(renewed.row)
            signals.lock_renewed.send(sender=self.model, lock=hold)
        return answers

    def use_throttle(self, key: str, limit: int, period: timedelta, rate: str) -> ThrottleAnswer:
        """One use of the throttle ``key`` under ``limit`` per ``period``
        (written ``rate``), decided and recorded in one statement
        (``backends.throttles``); ``LockTransactionError`` inside a transaction
        of the caller's."""
        period_us = period // timedelta(microseconds=1)
        return self._backend().throttles.use(key, limit, period_us, rate)

    def instance(self, row: LockRow) -> Hold:
        """The model instance of ``row``: a ``DistributedLock``, or a ``LockHold``
        (``instances.from_db``)."""
        model = apps.get_model("django_dlock", "LockHold") if row.shared else self.model
        # (Not cast(): a call for nothing on every acquisition.)
        return from_db(model, self.using, row.field_values())  # type: ignore[return-value]


def service_of(model: type[_Lock], using: str) -> LockService[_Lock]:
    """The lock service of ``model``'s rows in the database ``using``: one per
    pair in this process, made on first use (it keeps nothing but the two)."""
    # (Annotated, not cast(): each call of this runs on every lock operation.)
    service: LockService[Any] | None = _services.get((model, using))
    if service is None:
        service = _services.setdefault((model, using), LockService(model, using))
    return service


_services: dict[tuple[type[models.Model], str], LockService[Any]] = {}


def service_for(using: str | None = None) -> LockService[models.Model]:
    """The lock service of ``using`` (``DLOCK_DATABASE`` when None), on
    ``DistributedLock`` rows (looked up by name: ``models`` imports the
    manager, which imports this module)."""
    return service_of(_distributed_lock(), using or conf.DATABASE)


@functools.cache
def _distributed_lock() -> type[models.Model]:
    return apps.get_model("django_dlock", "DistributedLock")


def mismatch(claim: Claim, kind: str) -> LockKindMismatch:
    return LockKindMismatch(
        f"{claim.resource!r} is a {kind} while it has holders; this acquisition asked for a "
        f"{kind_of(claim.kind.limit)}."
    )
