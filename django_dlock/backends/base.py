"""The interface every database backend of django-dlock implements, with the
portable version of each lock operation.

Each lock operation is one method (``take``, ``extend``, ``give_up``, the
queue's ``enqueue_waiter``), and the decision it makes lives there: here, in
Python, between a ``SELECT ... FOR UPDATE`` of the resource's row and the write,
inside one transaction of the operation's own (``in_lock_transaction``). A
vendor overrides an operation with a form that decides in SQL, in fewer
statements, and calls ``super()`` where that form does not apply, as Django's
``BaseDatabaseOperations`` and its vendor subclasses do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple

from django.core.checks import CheckMessage
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Greatest

from django_dlock.backends.checks import BackendChecks
from django_dlock.backends.clock import DatabaseNow, expired_before
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.results import LockRow, Released, Renewed, Taken
from django_dlock.backends.statements import LockStatements
from django_dlock.django_private import compile_expression, compile_where
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules import ReleaseResult, same_owner
from django_dlock.transactions import in_lock_transaction

# Locks per statement of renew_many(): well under every database's parameter limit.
RENEW_CHUNK = 500


class PurgedBatch(NamedTuple):
    """What one purge batch did."""

    chosen: int  # expired locks chosen for the batch (0: none left)
    deleted: int  # of those, deleted (the others were renewed or taken meanwhile)


class LockBackend(LockStatements, WaiterQueue):
    """The lock operations on one database alias.

    ``take``, ``extend``, ``give_up`` and ``purge_batch`` each run in a lock
    transaction of their own; the queue's statements run alone, in autocommit.
    """

    vendor: ClassVar[str]
    #: Whether every process that waits runs on the database's host (SQLite):
    #: then the head of a queue may look often, each look costing microseconds.
    waiters_share_host: ClassVar[bool] = False

    #: Whether a release hands the lock to the head of its queue (``granted``).
    grants_on_release: ClassVar[bool] = False

    #: The dotted path of the ``Listener`` class whose thread receives the
    #: releases that wake this database's waiters; None: waiters poll.
    listener_class: ClassVar[str | None] = None

    def can_listen(self) -> bool:
        """Whether releases can wake this process's waiters (``listener_class``)."""
        return self.listener_class is not None

    # -- the transaction -----------------------------------------------------------

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        """Seconds to pause before ``in_lock_transaction`` runs a lock transaction
        again that failed with ``error`` (its ``attempt``-th, the first begun at
        ``time.monotonic()`` ``started``); ``None``: raise ``error``."""
        return None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Wrap the start of a lock transaction (a vendor may change how it begins)."""
        yield

    # -- acquire, renew, release -----------------------------------------------------

    def take(
        self, resource: str, owner: str, duration: timedelta, *, leaving: int | None = None
    ) -> Taken:
        """Acquire: when the lock is free (released or expired), a new holder and
        a larger token; when ``owner`` validly holds it, a later expiry, the same
        token; when another owner does, nothing. Without a row, the first one is
        inserted. With the lock taken, the waiter ticket ``leaving`` leaves its
        queue in the same transaction (one commit, and no moment where the next
        waiter sees the new holder still queued ahead of it)."""
        return in_lock_transaction(self, lambda: self._take(resource, owner, duration, leaving))

    def _take(self, resource: str, owner: str, duration: timedelta, leaving: int | None) -> Taken:
        found = self.select_for_update(resource)
        if found is None:
            inserted = self.insert(resource, owner, duration)
            if inserted is not None:
                self._leave(leaving)
                return Taken(row=inserted, previous_owner=None, renewed=False)
            # Another process inserted the row first (ON CONFLICT DO NOTHING
            # waited for its commit): read the winner's row and decide on it.
            found = self.select_for_update(resource)
            if found is None:  # the winner's row is gone already; rare enough to
                return Taken(row=None, previous_owner=None, renewed=False)  # call it held
        if found.held and not same_owner(found.owner, owner):
            return Taken(row=None, previous_owner=found.owner, renewed=False)
        if found.held:  # the holder again: same token, same acquired_at
            row = replace(found, expires_at=found.now + duration)
            self.update(row, ["expires_at"])
        else:
            row = replace(
                found,
                owner=owner,
                acquired_at=found.now,
                expires_at=found.now + duration,
                fencing_token=found.fencing_token + 1,
            )
            self.update(row, ["owner", "acquired_at", "expires_at", "fencing_token"])
        self._leave(leaving)
        return Taken(row=row, previous_owner=found.owner, renewed=found.held)

    def _leave(self, ticket: int | None) -> None:
        if ticket is not None:
            self.leave_queue(ticket)

    def extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        """Renew: a later expiry when ``owner`` validly holds the lock."""
        return in_lock_transaction(self, lambda: self._extend(resource, owner, duration))

    def _extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        found = self.select_for_update(resource)
        if found is None or found.owner == "":
            return Renewed(row=None, exists=False)
        if not found.held or not same_owner(found.owner, owner):
            return Renewed(row=None, exists=True)
        row = replace(found, expires_at=found.now + duration)
        self.update(row, ["expires_at"])
        return Renewed(row=row, exists=True)

    def give_up(self, resource: str, owner: str | None) -> Released:
        """Release (``owner=None``: whoever holds it): when the lock is valid and
        held by ``owner``, mark it released (``mark_released``)."""
        return in_lock_transaction(self, lambda: self._give_up(resource, owner))

    def _give_up(self, resource: str, owner: str | None) -> Released:
        found = self.select_for_update(resource)
        if found is None or not found.held:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if owner is not None and not same_owner(found.owner, owner):
            return Released(row=None, owner=found.owner, result=ReleaseResult.FORBIDDEN)
        # The row stays, expired and ownerless, to keep the fencing token counting.
        row = replace(found, owner="", expires_at=found.now)
        self.mark_released(row)
        return Released(row=row, owner=found.owner, result=ReleaseResult.RELEASED)

    def mark_released(self, row: LockRow) -> None:
        """Write the released ``row`` (no owner, expired) inside its lock
        transaction; a vendor also wakes the head of the resource's queue here."""
        self.update(row, ["owner", "expires_at"])

    def granted(self, resource: str, owner: str, ticket: int) -> LockRow | None:
        """The lock, if a release handed it to the waiter of ``ticket`` (one
        ``SELECT``, no transaction): held by ``owner``, the ticket gone."""
        return None

    def renew_many(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        """Extend each (resource, owner) lock that owner validly holds to
        ``seconds`` from now; the renewed locks. One statement per
        ``RENEW_CHUNK`` locks, in autocommit."""
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        renewed: dict[tuple[str, str], LockRow] = {}
        for start in range(0, len(pairs), RENEW_CHUNK):
            chunk = pairs[start : start + RENEW_CHUNK]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            sql = (
                f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
                f"WHERE ({qn('resource')}, {qn('owner')}) IN (VALUES {values}) "
                f"AND {qn('expires_at')} > {now_sql} "
                f"RETURNING {', '.join(self.columns)}, {now_sql}"
            )
            params = [
                *expires_params,
                *(value for pair in chunk for value in pair),
                *now_params,
                *now_params,
            ]
            with self.connection.cursor() as cursor:
                cursor.execute(sql, params)
                for values in cursor.fetchall():
                    row = self._row(values)
                    renewed[(row.resource, row.owner)] = row
        return renewed

    # -- purge ---------------------------------------------------------------------

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        """Delete at most ``batch_size`` locks that expired at least ``older_than``
        seconds ago (and whose resource starts with ``prefix``), in a lock
        transaction of its own.

        The ``DELETE`` checks expiry again, so a lock renewed or taken since the
        batch was chosen survives, and the batch's largest fencing token raises
        the floor.
        """
        return in_lock_transaction(self, lambda: self._purge_batch(older_than, batch_size, prefix))

    def _purge_batch(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        raise NotImplementedError

    def _purge_candidates(self, older_than: float, prefix: str) -> QuerySet[Any]:
        """The expired locks a batch chooses from (``DistributedLockQuerySet.expired``)."""
        candidates = (
            self.model._default_manager.using(self.using).filter(expired_q(older_than)).order_by()
        )
        return candidates.filter(resource_prefix_q(prefix)) if prefix else candidates

    def _still_expired_sql(self, older_than: float) -> tuple[str, list[Any]]:
        """``expires_at <= now - older_than`` as SQL, for the DELETE to check again."""
        return compile_where(self.model, self.using, expired_q(older_than))

    def _raise_fencing_floor(self, token: int) -> None:
        """Raise the floor to at least ``token``, creating its one row if missing
        (``manage.py flush`` or a test's truncation empties the table)."""
        floors = self.floor_model._default_manager.using(self.using)
        raise_to = {"value": Greatest(F("value"), Value(token))}
        if not floors.filter(pk=1).update(**raise_to):
            floors.bulk_create([self.floor_model(pk=1, value=token)], ignore_conflicts=True)
            floors.filter(pk=1).update(**raise_to)  # in case a concurrent purge created it

    # -- system checks -------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The system check messages about this database (Django's check
        arguments; see ``django_dlock.backends.checks``). A vendor runs its own."""
        return BackendChecks(self.using).check(**kwargs)


def expired_q(older_than: float = 0) -> Q:
    """Locks that expired or were released at least ``older_than`` seconds ago,
    by the database's clock."""
    return Q(expires_at__lte=expired_before(older_than))
