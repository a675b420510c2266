"""Purging expired locks and holds, in batches (``manage.py purge_locks``).

Every batch is a lock transaction of its own whose ``DELETE`` checks expiry
again, so a lock renewed or taken since the batch was chosen survives; the
batch's largest fencing token raises the floor (``FencingFloor``), so that a
purged resource that is locked again gets a larger token than any it had. A
vendor answers ``_delete_locks`` with its own statements."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet, Value
from django.db.models.functions import Greatest

from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_where
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules.clock import expired_before


class PurgedBatch(NamedTuple):
    """What one purge batch did."""

    chosen: int  # expired locks chosen for the batch (0: none left)
    deleted: int  # of those, deleted (the others were renewed or taken meanwhile)


def expired_q(older_than: float = 0) -> Q:
    """Locks that expired or were released at least ``older_than`` seconds ago,
    by the database's clock."""
    return Q(expires_at__lte=expired_before(older_than))


def purgeable_q(older_than: float = 0) -> Q:
    """Locks a purge may delete: expired or released at least ``older_than``
    seconds ago, and past a lock-delay kept after an involuntary loss by as
    long (deleting the row would end the delay early)."""
    since = ExpressionWrapper(expired_before(older_than) - F("expires_at"), DurationField())
    return expired_q(older_than) & (Q(lock_delay__isnull=True) | Q(lock_delay__lte=since))


class Purge:
    """The purge of one alias's expired locks and holds; a vendor answers
    ``_delete_locks`` with its own statements."""

    def __init__(self, tables: LockTables) -> None:
        self.tables = tables

    def run(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        """Delete at most ``batch_size`` locks that expired at least ``older_than``
        seconds ago (and whose resource starts with ``prefix``), with their
        holds, and the expired holds of locks still held; inside the batch's
        lock transaction (``LockBackend.purge_batch``)."""
        batch = self._delete_locks(older_than, batch_size, prefix)
        self._delete_holds(older_than, prefix)
        return batch

    def _delete_locks(self, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        raise NotImplementedError

    def _delete_holds(self, older_than: float, prefix: str) -> None:
        """Delete the shared holds that expired at least ``older_than`` seconds
        ago: of a purged lock (the lock's row was the last to expire), and the
        crashed holders' among live ones. Their tokens need no floor: the
        lock's row counts every token granted on its resource."""
        tables = self.tables
        where, params = compile_where(tables.hold_model, tables.using, expired_q(older_than))
        if prefix:
            prefixed, prefix_params = compile_where(
                tables.hold_model, tables.using, resource_prefix_q(prefix)
            )
            where, params = f"{where} AND {prefixed}", [*params, *prefix_params]
        self._delete_expired_holds(where, params)

    def _delete_expired_holds(self, where: str, params: list[Any]) -> None:
        """Delete the holds that match ``where``. A vendor with row locks skips
        those a lock operation holds (it may be waiting for a lock row this
        purge holds)."""
        with self.tables.connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.tables.holds_table} WHERE {where}", params)  # noqa: S608

    def _candidates(self, older_than: float, prefix: str) -> QuerySet[Any]:
        """The expired locks a batch chooses from (``DistributedLockQuerySet.expired``)."""
        tables = self.tables
        candidates = (
            tables.model._default_manager.using(tables.using)
            .filter(purgeable_q(older_than))
            .order_by()
        )
        return candidates.filter(resource_prefix_q(prefix)) if prefix else candidates

    def _still_expired_sql(self, older_than: float) -> tuple[str, list[Any]]:
        """``purgeable_q`` as SQL, for the DELETE to check again."""
        return compile_where(self.tables.model, self.tables.using, purgeable_q(older_than))

    def _raise_fencing_floor(self, token: int) -> None:
        """Raise the floor to at least ``token``, creating its one row if missing
        (``manage.py flush`` or a test's truncation empties the table)."""
        floor_model = self.tables.floor_model
        floors = floor_model._default_manager.using(self.tables.using)
        raise_to = {"value": Greatest(F("value"), Value(token))}
        if not floors.filter(pk=1).update(**raise_to):
            floors.bulk_create([floor_model(pk=1, value=token)], ignore_conflicts=True)
            floors.filter(pk=1).update(**raise_to)  # in case a concurrent purge created it
