"""The interface every database backend of django-dlock implements, and the
parts that the ORM writes the same way for every vendor.

A lock operation is a handful of statements, and at this size Django's query
building costs more than the round trips: compiling ``select_for_update()``
and ``update()`` on every call ran at a quarter of the raw-SQL floor. So the
ORM writes each statement once per alias, and the operations execute that SQL
and convert the rows with the converters Django chose for them.

The interface is one method per operation (not one per SQL string), so that a
vendor may answer an operation with fewer statements, or fuse several.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from django.apps import apps
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.db.models.sql import Query

from django_dlock.backends.clock import DatabaseNow, compile_expression, expired_before, now_plus
from django_dlock.backends.queue import WaiterQueue

if TYPE_CHECKING:
    from django_dlock.managers import DistributedLockQuerySet
    from django_dlock.models import DistributedLock

_PLACEHOLDER = "django-dlock:placeholder"

# Locks per statement of renew_many(): well under every database's parameter limit.
RENEW_CHUNK = 500


@dataclass(frozen=True)
class Written:
    """What a lock operation in one statement found and wrote (``fuses_operations``)."""

    before: Found | None  # the row as SELECT ... FOR UPDATE found it; None without one
    after: DistributedLock | None  # the row as written; None when nothing was written


@dataclass(frozen=True)
class Found:
    """What a lock operation needs to know of the row it locked."""

    owner: str  # "" once released
    held: bool  # validly held at the database's now

    @property
    def released(self) -> bool:
        return self.owner == ""


class LockBackend(WaiterQueue):
    """The SQL of the lock operations on one database alias.

    ``select_for_update``, ``insert`` and ``update`` run inside the lock
    transaction the caller opened with ``transaction()`` (see
    ``django_dlock.transactions.lock_transaction``); ``purge_batch`` too;
    ``queue_state`` runs alone, in autocommit.
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

    #: Whether the backend does acquire, renew, release and force_release in one
    #: statement each (``take``, ``extend``, ``give_up``), deciding in SQL; otherwise
    #: the manager selects the row FOR UPDATE, decides, and writes.
    fuses_operations: bool = False

    def __init__(self, using: str) -> None:
        self.using = using
        self.model: type[DistributedLock] = apps.get_model("django_dlock", "DistributedLock")
        self.floor_model = apps.get_model("django_dlock", "FencingFloor")
        self.waiter_model = apps.get_model("django_dlock", "LockWaiter")
        connection = connections[using]
        fields = self.model._meta.concrete_fields
        self.attnames = [field.attname for field in fields]
        self.fields = {field.attname: field for field in fields}
        qn = connection.ops.quote_name
        self.qn = qn
        self.table = qn(self.model._meta.db_table)
        self.floor_table = qn(self.floor_model._meta.db_table)
        # {attname: quoted column}, in the model's field order
        self.column_sql = {
            field.attname: qn(field.column) for field in fields if field.column is not None
        }
        self.columns = list(self.column_sql.values())
        self.pk_column = self.column_sql[self.model._meta.pk.attname]

    @cached_property
    def _select(self) -> tuple[str, dict[int, tuple[list[Any], Any]]]:
        """The SELECT ... FOR UPDATE and the converters of its columns, compiled on
        first use: Django compiles ``select_for_update()`` only inside a transaction."""
        queryset = (
            self.model._default_manager.using(self.using)
            .select_for_update()
            .filter(resource=_PLACEHOLDER)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        compiler = queryset.query.get_compiler(using=self.using)
        sql, params = compiler.as_sql()
        selected = [expression for expression, _, _ in compiler.select]
        if list(params) != [_PLACEHOLDER] or len(selected) != len(self.attnames) + 1:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        # {column index: (converters, expression)}; called with the caller's
        # connection, since a connection belongs to one thread.
        return sql, compiler.get_converters(selected)

    def can_listen(self) -> bool:
        """Whether releases can wake this process's waiters (``listener_class``)."""
        return self.listener_class is not None

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

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

    # -- acquire, renew, release -------------------------------------------------

    def select_for_update(self, resource: str) -> DistributedLock | None:
        """The resource's row, locked until commit, with ``db_now`` set to the
        database's time; ``None`` if there is no row."""
        return self._fetch_lock(self._select[0], [resource])

    def _fetch_lock(self, sql: str, params: Sequence[Any]) -> DistributedLock | None:
        """The lock row ``sql`` (the columns of ``_select``) returns, with ``db_now``."""
        connection = self.connection
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        values = self._convert(row, connection)
        lock = self.model.from_db(self.using, self.attnames, values[:-1])
        lock.db_now = values[-1]  # type: ignore[attr-defined]
        return lock

    def insert(self, resource: str, owner: str, duration: timedelta) -> DistributedLock | None:
        """Insert the first row of ``resource``; ``None`` if another process won.

        ``ON CONFLICT DO NOTHING`` makes a lost race an empty result rather than
        an IntegrityError that would abort the transaction (a savepoint around
        it would cost two more round trips). The token starts above the largest
        one ever purged.
        """
        connection = self.connection
        columns, placeholders, params = self._insert_values(resource, owner, duration)
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) "  # noqa: S608
            f"ON CONFLICT ({self.column_sql['resource']}) DO NOTHING "
            f"RETURNING {', '.join(self.columns)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        lock = self.model.from_db(self.using, self.attnames, self._convert(row, connection))
        lock.db_now = lock.acquired_at  # type: ignore[attr-defined]
        return lock

    def _insert_values(
        self, resource: str, owner: str, duration: timedelta
    ) -> tuple[str, str, list[Any]]:
        """The column list, VALUES and parameters of a first row of ``resource``:
        the database's time, and a token above the largest one ever purged."""
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, now_plus(duration))
        # Each column named with its value: the model's field order does not matter.
        values: dict[str, tuple[str, list[Any]]] = {
            "resource": ("%s", [resource]),
            "owner": ("%s", [owner]),
            "acquired_at": (now_sql, now_params),
            "expires_at": (expires_sql, expires_params),
            "fencing_token": (
                f"COALESCE(({self._floor_sql()}), 0) + 1",
                [],
            ),
        }
        columns = ", ".join(self.column_sql[name] for name in values)
        placeholders = ", ".join(sql for sql, _ in values.values())
        params = [param for _, value_params in values.values() for param in value_params]
        return columns, placeholders, params

    def _floor_sql(self) -> str:
        """A SELECT of the fencing floor: the largest token ever purged."""
        return f"SELECT MAX({self.qn('value')}) FROM {self.floor_table}"  # noqa: S608

    def update(self, lock: DistributedLock, attnames: Sequence[str]) -> None:
        """Write ``lock``'s values of ``attnames`` to its row."""
        connection = self.connection
        assignments = ", ".join(f"{self.column_sql[name]} = %s" for name in attnames)
        sql = f"UPDATE {self.table} SET {assignments} WHERE {self.pk_column} = %s"  # noqa: S608
        values = [
            self.fields[name].get_db_prep_save(getattr(lock, name), connection) for name in attnames
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, lock.pk])

    # -- the same in one statement each (backends that set fuses_operations) --------

    def take(
        self, resource: str, owner: str, duration: timedelta, *, leaving: int | None = None
    ) -> Written:
        """Acquire: write the row when it is free (a new holder, a larger token)
        or held by ``owner`` (a later expiry), or insert it when there is none.
        With the lock taken, the waiter ticket ``leaving`` leaves its queue."""
        raise NotImplementedError

    def extend(self, resource: str, owner: str, duration: timedelta) -> Written:
        """Renew: a later expiry when ``owner`` validly holds the lock."""
        raise NotImplementedError

    def give_up(self, resource: str, owner: str | None) -> Written:
        """Release (``owner=None``: whoever holds it): mark the row released when
        the lock is valid and held by ``owner``."""
        raise NotImplementedError

    # -- purge ---------------------------------------------------------------------

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> int:
        """Delete at most ``batch_size`` locks that expired at least ``older_than``
        seconds ago (and whose resource starts with ``prefix``); return how many.

        The ``DELETE`` checks expiry again, so a lock renewed or taken since the
        batch was chosen survives, and the batch's largest fencing token raises
        the floor. Runs inside the caller's lock transaction.
        """
        raise NotImplementedError

    def _purge_candidates(self, older_than: float, prefix: str) -> DistributedLockQuerySet:
        candidates: DistributedLockQuerySet = (
            self.model._default_manager.using(self.using).expired(older_than).order_by()
        )
        if prefix:
            candidates = candidates.with_resource_prefix(prefix)
        return candidates

    def _still_expired_sql(self, older_than: float) -> tuple[str, list[Any]]:
        """``expires_at <= now - older_than`` as SQL, for the DELETE to check again."""
        query = Query(self.model)
        where = query.build_where(models.Q(expires_at__lte=expired_before(older_than)))
        compiler = query.get_compiler(using=self.using)
        sql, params = where.as_sql(compiler, self.connection)
        return sql, list(params)

    def _raise_fencing_floor(self, token: int) -> None:
        """Raise the floor to at least ``token``, creating its one row if missing
        (``manage.py flush`` or a test's truncation empties the table)."""
        floors = self.floor_model._default_manager.using(self.using)
        raise_to = {"value": Greatest(F("value"), Value(token))}
        if not floors.filter(pk=1).update(**raise_to):
            floors.bulk_create([self.floor_model(pk=1, value=token)], ignore_conflicts=True)
            floors.filter(pk=1).update(**raise_to)  # in case a concurrent purge created it

    def granted(self, resource: str, owner: str, ticket: int) -> DistributedLock | None:
        """The lock, if a release handed it to the waiter of ``ticket`` (one
        ``SELECT``, no transaction): held by ``owner``, the ticket gone."""
        return None

    def mark_released(self, lock: DistributedLock) -> None:
        """Write the released ``lock`` (no owner, expired) inside its lock transaction."""
        self.update(lock, ["owner", "expires_at"])

    def _released_values(self, lock: DistributedLock) -> list[Any]:
        """The released ``lock``'s owner and expiry, as parameters of a hand-written
        ``UPDATE`` (a vendor's ``mark_released`` that also wakes the head)."""
        return [
            self.fields[name].get_db_prep_save(getattr(lock, name), self.connection)
            for name in ("owner", "expires_at")
        ]

    def renew_many(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], DistributedLock]:
        """Extend each (resource, owner) lock that owner validly holds to
        ``seconds`` from now; the renewed locks. One statement per
        ``RENEW_CHUNK`` locks, in autocommit."""
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        manager = self.model._default_manager.db_manager(self.using)
        renewed: dict[tuple[str, str], DistributedLock] = {}
        for start in range(0, len(pairs), RENEW_CHUNK):
            chunk = pairs[start : start + RENEW_CHUNK]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            sql = (
                f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
                f"WHERE ({qn('resource')}, {qn('owner')}) IN (VALUES {values}) "
                f"AND {qn('expires_at')} > {now_sql} RETURNING {', '.join(self.columns)}"
            )
            params = [*expires_params, *(value for pair in chunk for value in pair), *now_params]
            for lock in manager.raw(sql, params):
                renewed[(lock.resource, lock.owner)] = lock
        return renewed

    # -- rows --------------------------------------------------------------------------

    def _convert(self, row: Sequence[Any], connection: BaseDatabaseWrapper) -> list[Any]:
        values = list(row)
        for index, (converters, expression) in self._select[1].items():
            if index < len(values):
                for converter in converters:
                    values[index] = converter(values[index], expression, connection)
        return values
