from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections, models
from django.db.models import DurationField, F, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Greatest
from django.db.models.sql import Query

from django_dlock import signals
from django_dlock.conf import conf
from django_dlock.db import DatabaseNow, after_commit, lock_transaction
from django_dlock.statements import LockStatements, statements_for
from django_dlock.validators import validate_owner, validate_resource, validate_ttl

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock, ReleaseResult

_T = TypeVar("_T")
_Acquired = TypeVar("_Acquired", bound="DistributedLock | None")


def new_owner_token() -> str:
    """A random 128-bit owner token, for callers that name no owner."""
    return secrets.token_hex(16)


class DistributedLockQuerySet(models.QuerySet["DistributedLock"]):
    def active(self) -> DistributedLockQuerySet:
        """Locks that are held now, by the database's clock."""
        return self.filter(expires_at__gt=DatabaseNow())

    def expired(self) -> DistributedLockQuerySet:
        """Locks that expired or were released, by the database's clock."""
        return self.filter(expires_at__lte=DatabaseNow())

    def owned_by(self, owner: str) -> DistributedLockQuerySet:
        """Locks whose current (or last, if expired) holder is ``owner``."""
        return self.filter(owner=owner)

    def with_resource_prefix(self, prefix: str) -> DistributedLockQuerySet:
        """Locks whose resource starts with ``prefix`` (case-sensitive)."""
        return self.filter(resource__startswith=prefix)


class DistributedLockManager(models.Manager.from_queryset(DistributedLockQuerySet)):  # type: ignore[misc]
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
        duration = _duration(ttl)
        using = self._alias()
        with lock_transaction(using):
            lock, previous_owner, renewed = self._take(resource, owner, duration, using)
        if lock is not None:
            after_commit(using, partial(self._announce, lock, owner, previous_owner, renewed))
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
        self, resource: str, owner: str, duration: timedelta, using: str
    ) -> tuple[DistributedLock | None, str | None, bool]:
        """Acquire inside the lock transaction. Returns the lock (``None`` when
        another owner holds it), the owner of the row before (``None`` for a new
        row) and whether this was the holder re-acquiring (same token)."""
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
            if lock.owner != owner:
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
        duration = _duration(ttl)
        using = self._alias()
        with lock_transaction(using):
            lock = self._select_for_update(resource, using)
            if lock is None or lock.is_released:
                raise self.model.DoesNotExist(f"There is no lock on {resource!r}.")
            now: datetime = lock.db_now  # type: ignore[attr-defined]
            if lock.owner != owner or not _holds(lock, now):
                return None
            lock.expires_at = now + duration
            self._write(lock, using, ["expires_at"])
        after_commit(using, partial(signals.lock_renewed.send, sender=self.model, lock=lock))
        return lock

    def release(self, resource: str, owner: str) -> ReleaseResult:
        """Give up the lock that ``owner`` holds on ``resource``.

        Returns ``RELEASED``; ``NOT_FOUND`` when there is no valid lock (never
        acquired, expired, or released already); ``FORBIDDEN`` when another
        owner holds it, which leaves it untouched.
        """
        from django_dlock.models import ReleaseResult

        validate_resource(resource)
        validate_owner(owner)
        using = self._alias()
        with lock_transaction(using):
            lock = self._select_for_update(resource, using)
            if lock is None or not _holds(lock, lock.db_now):  # type: ignore[attr-defined]
                return ReleaseResult.NOT_FOUND
            if lock.owner != owner:
                return ReleaseResult.FORBIDDEN
            self._mark_released(lock, using)
        after_commit(
            using,
            partial(
                signals.lock_released.send, sender=self.model, lock=lock, owner=owner, forced=False
            ),
        )
        return ReleaseResult.RELEASED

    def force_release(self, resource: str) -> bool:
        """Release the lock on ``resource`` whoever holds it (for operators).

        Returns whether a valid lock was released. Its fencing token stays
        counted, so the next holder still gets a larger one.
        """
        validate_resource(resource)
        using = self._alias()
        with lock_transaction(using):
            lock = self._select_for_update(resource, using)
            if lock is None or not _holds(lock, lock.db_now):  # type: ignore[attr-defined]
                return False
            owner = lock.owner
            self._mark_released(lock, using)
        after_commit(
            using,
            partial(
                signals.lock_released.send, sender=self.model, lock=lock, owner=owner, forced=True
            ),
        )
        return True

    def purge_expired(
        self, *, older_than: float = 0, batch_size: int = 10_000, prefix: str = ""
    ) -> int:
        """Delete one batch of at most ``batch_size`` locks that expired at least
        ``older_than`` seconds ago; return how many were deleted.

        Each batch is one transaction whose ``DELETE`` checks expiry again, so a
        lock renewed or taken meanwhile survives. The batch's largest fencing
        token is kept (``FencingFloor``) so a purged resource that is locked
        again gets a larger token than any it had.
        """
        using = self._alias()
        connection = connections[using]
        expired_before = DatabaseNow() - Value(
            timedelta(seconds=older_than), output_field=DurationField()
        )
        candidates = self.using(using).filter(expires_at__lte=expired_before)
        if prefix:
            candidates = candidates.with_resource_prefix(prefix)
        where_sql, where_params = _compile_where(self.model, using, expired_before)
        qn = connection.ops.quote_name
        table = qn(self.model._meta.db_table)
        token = qn("fencing_token")
        if connection.vendor == "postgresql":
            # The batch is chosen by physical row address (ctid): a TID scan reaches
            # each row without an index lookup, and "id IN (subquery)" would be planned
            # as a full scan per batch (MEASURED.md). A row updated meanwhile (renewed,
            # re-acquired) has a new ctid and a new expiry, so the DELETE skips it.
            # The database counts the batch and takes its largest token, instead of
            # sending every deleted token back. Together: about half the time per batch.
            rows_query = (
                candidates.order_by().annotate(row=RawSQL("ctid", ())).values("row")[:batch_size]
            )
            rows_sql, rows_params = rows_query.query.get_compiler(using=using).as_sql()
            sql = (
                f"WITH purged AS (DELETE FROM {table} "  # noqa: S608 - only compiled SQL is formatted in
                f"WHERE ctid = ANY(ARRAY({rows_sql})) AND {where_sql} RETURNING {token}) "
                f"SELECT COUNT(*), MAX({token}) FROM purged"
            )
            with lock_transaction(using), connection.cursor() as cursor:
                cursor.execute(sql, [*rows_params, *where_params])
                count, largest = cursor.fetchone()
                if count:
                    _raise_fencing_floor(using, largest)
            return int(count)
        ids_query = candidates.order_by().values("pk")[:batch_size].query
        ids_sql, ids_params = ids_query.get_compiler(using=using).as_sql()
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"DELETE FROM {table} WHERE {qn('id')} IN ({ids_sql}) AND {where_sql} "  # noqa: S608
            f"RETURNING {token}"
        )
        with lock_transaction(using), connection.cursor() as cursor:
            cursor.execute(sql, [*ids_params, *where_params])
            tokens = [token for (token,) in cursor.fetchall()]
            if tokens:
                _raise_fencing_floor(using, max(tokens))
        return len(tokens)

    # -- the statements ------------------------------------------------------

    def _select_for_update(self, resource: str, using: str) -> DistributedLock | None:
        return _statements(using).select_for_update(resource)

    def _write(self, lock: DistributedLock, using: str, fields: list[str]) -> None:
        _statements(using).update(lock, fields)

    def _mark_released(self, lock: DistributedLock, using: str) -> None:
        # The row stays, expired and ownerless, to keep the fencing token counting.
        lock.owner = ""
        lock.expires_at = lock.db_now  # type: ignore[attr-defined]
        self._write(lock, using, ["owner", "expires_at"])

    def _insert(
        self, resource: str, owner: str, duration: timedelta, using: str
    ) -> DistributedLock | None:
        return _statements(using).insert(resource, owner, duration)

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
        acquiring = run_in_lock_thread(self._alias(), self.acquire, resource, owner, ttl)
        return await release_if_cancelled(self, acquiring)

    async def arenew(
        self, resource: str, owner: str, ttl: float | None = None
    ) -> DistributedLock | None:
        """``renew()`` for async code; raises ``DoesNotExist`` when there is no lock."""
        return await run_in_lock_thread(self._alias(), self.renew, resource, owner, ttl)

    async def arelease(self, resource: str, owner: str) -> ReleaseResult:
        """``release()`` for async code."""
        return await run_in_lock_thread(self._alias(), self.release, resource, owner)


def _statements(using: str) -> LockStatements:
    return statements_for(using, connections[using].vendor)


def _raise_fencing_floor(using: str, token: int) -> None:
    """Raise the floor to at least ``token``, creating its one row if missing
    (``manage.py flush`` or a test's truncation empties the table)."""
    from django_dlock.models import FencingFloor

    floors = FencingFloor.objects.using(using)
    raise_to = {"value": Greatest(F("value"), Value(token))}
    if not floors.filter(pk=1).update(**raise_to):
        floors.bulk_create([FencingFloor(pk=1, value=token)], ignore_conflicts=True)
        floors.filter(pk=1).update(**raise_to)  # in case a concurrent purge created it


_lock_threads: ThreadPoolExecutor | None = None


async def run_in_lock_thread(using: str, function: Callable[..., _T], *args: Any) -> _T:
    """Run ``function(*args)`` in a django-dlock worker thread, with that
    thread's own connection to ``using``, which is checked before and after the
    call and closed or kept as CONN_MAX_AGE says (as Django does at the start
    and end of a request: an idle thread's connection may have grown too old)."""
    global _lock_threads
    if _lock_threads is None:
        _lock_threads = ThreadPoolExecutor(thread_name_prefix="django-dlock")

    def call() -> _T:
        connections[using].close_if_unusable_or_obsolete()
        try:
            return function(*args)
        finally:
            connections[using].close_if_unusable_or_obsolete()

    return await sync_to_async(call, thread_sensitive=False, executor=_lock_threads)()


async def run_in_own_thread(using: str, function: Callable[..., _T], *args: Any) -> _T:
    """Run ``function(*args)`` in a new thread, with one connection to ``using``
    for the whole call, closed when it ends.

    For calls that may take long (a blocking acquire waits up to its timeout):
    in the shared worker threads, a few of them would hold up every other lock
    operation, the releases they wait for included.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="django-dlock-wait")

    def call() -> _T:
        try:
            return function(*args)
        finally:
            connections[using].close()

    try:
        return await sync_to_async(call, thread_sensitive=False, executor=executor)()
    finally:
        executor.shutdown(wait=False)  # the thread ends once the call does


async def release_if_cancelled(
    manager: DistributedLockManager,
    acquiring: Awaitable[_Acquired],
    stop: Callable[[], object] | None = None,
) -> _Acquired:
    """Await ``acquiring``, an acquisition running in a thread.

    Cancelling the awaiting task cannot stop a thread: it would take the lock
    anyway, for an owner nobody knows, until its ttl. So on cancellation
    ``stop()`` asks the thread to give up early, the lock it took (if any) is
    released once it finishes, and then the cancellation goes on.
    """
    task = asyncio.ensure_future(acquiring)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if stop is not None:
            stop()
        # Shielded too: a second cancellation must not skip the release.
        await asyncio.shield(_release_when_done(manager, task))
        raise


async def _release_when_done(
    manager: DistributedLockManager, task: asyncio.Future[_Acquired]
) -> None:
    await asyncio.wait([task])
    if task.cancelled() or task.exception() is not None:
        return  # it took nothing (e.g. a waiter that gave up)
    acquired = task.result()
    if acquired is not None:
        await run_in_lock_thread(
            manager._alias(), manager.release, acquired.resource, acquired.owner
        )


def _holds(lock: DistributedLock, now: datetime) -> bool:
    """Whether the lock has a holder at the database time ``now``."""
    return not lock.is_released and now < lock.expires_at


# SQLite's clock counts milliseconds: a shorter lock would expire as it is made.
SHORTEST_TTL = 0.001


def _duration(ttl: float | None) -> timedelta:
    seconds = validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl)
    return timedelta(seconds=max(seconds, SHORTEST_TTL))


def _compile_where(
    model: type[models.Model], using: str, expired_before: Any
) -> tuple[str, list[Any]]:
    """``expires_at <= expired_before`` as SQL, re-checked by the DELETE itself."""
    query = Query(model)
    where = query.build_where(models.Q(expires_at__lte=expired_before))
    compiler = query.get_compiler(using=using)
    sql, params = where.as_sql(compiler, connections[using])
    return sql, list(params)
