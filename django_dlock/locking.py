"""``lock()``: blocking acquire, a context manager and decorator, automatic renewal.

The layer above the manager's non-blocking calls. ``timeout=None`` tries once;
a number of seconds waits in a queue of waiters kept in the database
(``LockWaiter``), polling with capped exponential backoff and full jitter.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.models import DurationField, Value

from django_dlock import signals
from django_dlock.conf import conf
from django_dlock.db import (
    DatabaseNow,
    compile_expression,
    lock_transaction,
    refuse_callers_transaction,
)
from django_dlock.exceptions import LockExpired, LockNotAcquired, LockNotOwned
from django_dlock.managers import (
    new_owner_token,
    release_if_cancelled,
    run_in_lock_thread,
    run_in_own_thread,
)
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult
from django_dlock.validators import validate_owner, validate_resource, validate_ttl

__all__ = ["LockHandle", "lock"]

logger = logging.getLogger("django_dlock")

_F = TypeVar("_F", bound=Callable[..., Any])

# A waiter's row counts for this long (seconds) unless refreshed, so a waiter
# that crashed holds up the queue at most this long.
WAITER_TTL = 10.0

EXPIRED_LOCALLY = "it expired: its ttl passed without a renewal"


class LockHandle:
    """What ``with lock(...) as handle`` gives the holder.

    ``resource``, ``owner``, ``fencing_token`` and ``expires_at`` (as of the
    last acquire or renew) describe the lock. ``lost`` is a ``threading.Event``
    set when the holder can no longer count on the lock: an automatic renewal
    failed (expired and maybe taken over, released or purged, or a database
    error), its ttl passed without a renewal, or releasing it on exit found it
    gone. ``check()`` raises then.
    """

    def __init__(self, lock: DistributedLock, ttl: float, using: str, started: float) -> None:
        self.resource: str = lock.resource
        self.owner: str = lock.owner
        self.fencing_token: int = lock.fencing_token
        self.expires_at: datetime = lock.expires_at
        self.ttl = ttl
        self.lost: threading.Event = _LostEvent(self)
        self.lost_reason: str | None = None
        self._using = using
        self._lost_lock = threading.Lock()
        # The local, conservative view of expiry: ``started`` is this process's
        # monotonic clock read before the acquire (or last renewal) was sent, so
        # the database's expiry is never earlier. Without auto_renew nothing else
        # would tell the holder that the lock expired and maybe was taken over.
        self._deadline = started + ttl

    def __repr__(self) -> str:
        state = "lost" if self.is_lost else "held"
        return f"<LockHandle {self.resource!r} token={self.fencing_token} {state}>"

    @property
    def is_lost(self) -> bool:
        return self.lost.is_set()

    def check(self) -> None:
        """Raise ``LockExpired`` if the lock was lost; call it between steps of long work."""
        if self.is_lost:
            raise LockExpired(f"The lock on {self.resource!r} was lost: {self.lost_reason}")

    def renew(self, ttl: float | None = None) -> None:
        """Extend the lock by ``ttl`` seconds (default: the ttl it was taken with).

        Raises ``LockExpired`` when it expired, was released or purged, and
        ``LockNotOwned`` when another owner holds it; either marks it lost.
        """
        ttl = ttl or self.ttl
        started = time.monotonic()
        self._apply_renewal(_renew(self._using, self.resource, self.owner, ttl), started, ttl)

    async def arenew(self, ttl: float | None = None) -> None:
        """``renew()`` for async code."""
        ttl = ttl or self.ttl
        started = time.monotonic()
        outcome = await run_in_lock_thread(
            self._using, _renew, self._using, self.resource, self.owner, ttl
        )
        self._apply_renewal(outcome, started, ttl)

    def _apply_renewal(self, outcome: DistributedLock | str, started: float, ttl: float) -> None:
        if isinstance(outcome, str):
            self._mark_lost(outcome)
            exception = LockNotOwned if "another owner" in outcome else LockExpired
            raise exception(f"Cannot renew the lock on {self.resource!r}: {outcome}")
        self.expires_at = outcome.expires_at
        self._deadline = started + ttl

    def _check_deadline(self) -> None:
        if time.monotonic() >= self._deadline:
            self._mark_lost(EXPIRED_LOCALLY)

    def _mark_lost(self, reason: str) -> None:
        """Flag the lock as lost, log it and send ``lock_lost``, once."""
        with self._lost_lock:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
            self.lost.set()
        logger.warning("Lost the lock on %r (owner %s): %s", self.resource, self.owner, reason)
        signals.lock_lost.send(
            sender=DistributedLock, resource=self.resource, owner=self.owner, reason=reason
        )


class _LostEvent(threading.Event):
    """``handle.lost``: set by a failed renewal, and also, when looked at or
    waited for, once the handle's local deadline has passed."""

    def __init__(self, handle: LockHandle) -> None:
        super().__init__()
        self._handle = handle

    def is_set(self) -> bool:
        self._handle._check_deadline()
        return super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        end = math.inf if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            now = time.monotonic()
            if now >= end:
                return False
            # Wake at the deadline too (a renewal may move it meanwhile).
            super().wait(min(end - now, self._handle._deadline - now, threading.TIMEOUT_MAX))
        return True


def _renew(using: str, resource: str, owner: str, ttl: float) -> DistributedLock | str:
    """The renewed lock, or why it could not be renewed (a sentence)."""
    try:
        renewed = DistributedLock.objects.db_manager(using).renew(resource, owner, ttl)
    except DistributedLock.DoesNotExist:
        return "it was released or purged"
    if renewed is None:
        # The manager does not say which; read the row to tell the holder.
        holder = (
            DistributedLock.objects.using(using)
            .filter(resource=resource)
            .values_list("owner", flat=True)
            .first()
        )
        if holder not in (None, "", owner):
            return "it expired and another owner holds it now"
        return "it expired"
    return renewed


class _Renewer(threading.Thread):
    """Renews ``handle``'s lock every ``interval`` seconds until stopped or lost.

    The thread has its own database connection, closed when it ends. Any
    failed renewal — expired, taken over, released, purged, or a database error
    — marks the handle lost and ends the thread: past that point the holder
    cannot know that it still holds the lock.
    """

    def __init__(self, handle: LockHandle) -> None:
        super().__init__(name=f"django-dlock renewer {handle.resource}", daemon=True)
        self.handle = handle
        self.interval = handle.ttl / 3
        self.stopped = threading.Event()

    def run(self) -> None:
        handle = self.handle
        try:
            while not self.stopped.wait(self.interval):
                started = time.monotonic()
                try:
                    outcome = _renew(handle._using, handle.resource, handle.owner, handle.ttl)
                except DatabaseError as error:
                    outcome = f"renewing it failed with a database error: {error}"
                if self.stopped.is_set():
                    return  # the holder released it meanwhile; its outcome is the holder's
                if isinstance(outcome, str):
                    handle._mark_lost(outcome)
                    return
                handle._apply_renewal(outcome, started, handle.ttl)
        finally:
            connections[handle._using].close()

    def stop(self) -> None:
        self.stopped.set()
        if self is not threading.current_thread():
            self.join()


# -- waiting -----------------------------------------------------------------------


@dataclass
class _Wait:
    """One blocking acquisition: the queue ticket and the backoff state.

    ``step()`` does one round of database work and returns the lock, or how
    long to sleep before the next round; the sync and async loops share it.
    """

    resource: str
    owner: str
    ttl: float
    timeout: float
    using: str
    deadline: float = 0.0
    ticket: int | None = None
    ticket_refreshed: float = 0.0
    attempt: int = 0
    ahead: int | None = None
    holder: str | None = None
    moved_at: float = 0.0
    turn: float | None = None  # seconds per turn of the queue, as observed
    tries: int = 0
    started: float = 0.0  # monotonic time before the last acquire was sent
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        # Queue rows written in the caller's transaction would be invisible to
        # the other waiters; fail as the manager's calls do.
        refuse_callers_transaction(self.using)

    def step(self) -> DistributedLock | float:
        manager = DistributedLock.objects.db_manager(self.using)
        if self.ticket is None:
            # Take the lock straight away only when nobody is queued for it.
            state = _LockState.read(self.using, self.resource, None)
            if state.free and state.ahead == 0:
                self.tries += 1
                self.started = time.monotonic()
                acquired = manager.acquire(self.resource, self.owner, self.ttl)
                if acquired is not None:
                    return acquired
            self.ticket = self._enqueue()
            if state.free:  # taken meanwhile, or came free: look again, as a waiter
                state = _LockState.read(self.using, self.resource, self.ticket)
            # Otherwise we are queued behind those counted just now (or a few
            # more): no need to look again before sleeping.
        else:
            state = _LockState.read(self.using, self.resource, self.ticket)
        if state.free and state.ahead == 0:
            self.tries += 1
            self.started = time.monotonic()
            # Take the lock and leave the queue in one transaction (one commit,
            # and no moment where the next waiter sees us ahead of it).
            with lock_transaction(self.using):
                acquired = manager.acquire(self.resource, self.owner, self.ttl)
                if acquired is not None:
                    self.leave_queue()
            if acquired is not None:
                return acquired
            self.attempt = 0  # a non-waiting caller took it: poll again soon
        now = time.monotonic()
        if self.ahead is not None and state.ahead < self.ahead:
            # The queue moved: learn how long a turn takes, and look again soon.
            per_turn = (now - self.moved_at) / (self.ahead - state.ahead)
            # Observed turns include our own lag in noticing them; lean towards
            # the fastest, so that slow looks cannot make turns seem ever slower.
            if self.turn is None or per_turn < self.turn:
                self.turn = per_turn
            else:
                self.turn = 0.9 * self.turn + 0.1 * per_turn
            self.moved_at = now
            self.attempt = 0
        elif self.ahead is None:
            self.moved_at = now
        if state.holder != self.holder:
            self.attempt = 0  # a new holder: its turn may be short
        self.ahead, self.holder = state.ahead, state.holder
        if now - self.ticket_refreshed > self._ticket_ttl() / 3:
            self._refresh_ticket()
        window = min(conf.BACKOFF_MAX, conf.BACKOFF_BASE * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        if state.ahead and self.turn is not None:
            # Nothing to do before those ahead have had their turns: sleep a
            # quarter to half of that, so that looking costs little while the
            # queue moves. (Longer feeds back: turns seem slower, waits grow.)
            sleep = self.rng.uniform(0.25, 0.5) * state.ahead * self.turn
            sleep = min(sleep, conf.BACKOFF_MAX)
            sleep = max(sleep, self.rng.uniform(0, conf.BACKOFF_BASE))
        else:
            # The first in line (or a waiter that has not seen the queue move):
            # capped exponential backoff with full jitter.
            sleep = self.rng.uniform(0, window)
        if state.holder_left is not None:
            sleep = min(sleep, max(state.holder_left, 0.0))  # never past the holder's expiry
        return min(sleep, max(self.deadline - now, 0.0))

    def timed_out(self) -> bool:
        return time.monotonic() >= self.deadline

    def failure(self) -> LockNotAcquired:
        return LockNotAcquired(
            f"Could not acquire the lock on {self.resource!r} within {self.timeout:g} s "
            f"({self.tries} tries): another owner held it."
        )

    def _ticket_ttl(self) -> float:
        return min(WAITER_TTL, max(self.deadline - time.monotonic(), 0.0) + 1.0)

    def _expiry(self) -> Any:
        return DatabaseNow() + Value(
            timedelta(seconds=self._ticket_ttl()), output_field=DurationField()
        )

    def _enqueue(self) -> int:
        # One INSERT in autocommit: no transaction of its own to wait for.
        waiters = LockWaiter.objects.using(self.using)
        if self.rng.random() < 0.05:
            # Now and then, drop the rows of waiters that crashed (they no
            # longer count anyway) so that the table stays small.
            waiters.filter(resource=self.resource, expires_at__lte=DatabaseNow()).delete()
        waiter = waiters.create(resource=self.resource, owner=self.owner, expires_at=self._expiry())
        self.ticket_refreshed = time.monotonic()
        return waiter.pk

    def _refresh_ticket(self) -> None:
        LockWaiter.objects.using(self.using).filter(pk=self.ticket).update(
            expires_at=self._expiry()
        )
        self.ticket_refreshed = time.monotonic()

    def leave_queue(self) -> None:
        if self.ticket is not None:
            LockWaiter.objects.using(self.using).filter(pk=self.ticket).delete()
            self.ticket = None


@dataclass
class _LockState:
    holder: str | None  # the owner holding the lock, None when it is free
    free: bool
    holder_left: float | None  # seconds until the holder's lock expires
    ahead: int  # live waiters queued before the ticket (all of them without one)

    @classmethod
    def read(cls, using: str, resource: str, ticket: int | None) -> _LockState:
        """One statement, no transaction: whether the lock is free and who is ahead.

        Waiters run this in a loop, so it is one hand-written SELECT rather than
        ORM queries (a third of the cost, measured).
        """
        connection = connections[using]
        sql = _STATE_SQL.get(connection.vendor)
        if sql is None:
            sql = _STATE_SQL[connection.vendor] = _state_sql(using)
        with connection.cursor() as cursor:
            cursor.execute(sql, [resource, ticket or _NO_TICKET, resource])
            owner, expires_at, now, ahead = cursor.fetchone()
        if owner is None or owner == "":
            return cls(holder=None, free=True, holder_left=None, ahead=ahead)
        expires_at = _to_datetime(connection, expires_at)
        now = _to_datetime(connection, now)
        if now >= expires_at:
            return cls(holder=None, free=True, holder_left=None, ahead=ahead)
        left = (expires_at - now).total_seconds()
        return cls(holder=owner, free=False, holder_left=left, ahead=ahead)


_NO_TICKET = 2**62  # "no ticket yet": every queued waiter is ahead
_STATE_SQL: dict[str, str] = {}


def _state_sql(using: str) -> str:
    connection = connections[using]
    qn = connection.ops.quote_name
    now_sql, now_params = compile_expression(using, DatabaseNow())
    assert not now_params  # noqa: S101 - DatabaseNow() is plain SQL
    locks, waiters = DistributedLock._meta.db_table, LockWaiter._meta.db_table
    # A one-row SELECT of the queue count, LEFT JOINed to the lock row (there is
    # none before the first acquisition of the resource).
    # Table and column names only; the values are parameters.
    return (
        f"SELECT l.{qn('owner')}, l.{qn('expires_at')}, {now_sql}, q.n FROM "  # noqa: S608
        f"(SELECT COUNT(*) AS n FROM {qn(waiters)} w WHERE w.{qn('resource')} = %s "
        f"AND w.{qn('id')} < %s AND w.{qn('expires_at')} > {now_sql}) q "
        f"LEFT JOIN {qn(locks)} l ON l.{qn('resource')} = %s"
    )


def _to_datetime(connection: Any, value: Any) -> datetime:
    """A timestamp as the backend returned it (SQLite: text) as an aware datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


# -- lock() ------------------------------------------------------------------------


class lock:  # noqa: N801 - used like a function, as contextlib's are
    """Hold the lock on ``resource`` for a block or a function call.

    ``with lock("report:2026-05", ttl=60, timeout=10) as held:`` (or ``async
    with``, or ``@lock(...)`` on a sync or async function). ``timeout=None``
    tries once; a number of seconds waits up to that long. Either raises
    ``LockNotAcquired`` when the lock stays held by another owner. Without
    ``owner`` each entry gets a random one. ``auto_renew=True`` renews the lock
    every ttl/3 in a background thread until the block ends.

    On exit the lock is released, also when the block raised. If it was lost
    meanwhile (expired, taken over, released by someone else), ``lock_lost`` is
    sent and, when the block itself succeeded, ``LockExpired`` (or
    ``LockNotOwned`` when another owner holds it) is raised: the work ran
    without the lock for a while, and the caller must know.
    """

    def __init__(
        self,
        resource: str,
        *,
        owner: str | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
        auto_renew: bool = False,
        using: str | None = None,
    ) -> None:
        validate_resource(resource)
        if owner is not None:
            validate_owner(owner)
        self.ttl = float(validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl))
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
        self.resource = resource
        self.owner = owner
        self.timeout = timeout
        self.auto_renew = auto_renew
        self.using = using or conf.DATABASE
        self._entered: list[tuple[LockHandle, _Renewer | None]] = []

    def __repr__(self) -> str:
        return f"lock({self.resource!r}, ttl={self.ttl:g}, timeout={self.timeout!r})"

    # -- sync ---------------------------------------------------------------------

    def __enter__(self) -> LockHandle:
        return self._hold(*self._acquire())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        handle, renewer = self._entered.pop()
        self._after_release(handle, self._release(handle, renewer), failed=exc_type is not None)

    def _acquire(self) -> tuple[DistributedLock, float]:
        """The lock, and the monotonic time before its acquire was sent."""
        owner = self.owner or new_owner_token()
        if not self.timeout:
            started = time.monotonic()
            acquired = DistributedLock.objects.db_manager(self.using).acquire(
                self.resource, owner, self.ttl
            )
            if acquired is None:
                raise self._held()
            return acquired, started
        wait = _Wait(self.resource, owner, self.ttl, self.timeout, self.using)
        return self._wait(wait, threading.Event()), wait.started

    def _wait(self, wait: _Wait, cancelled: threading.Event) -> DistributedLock:
        """Look until the lock is taken or the time is up; ``cancelled`` (set
        when an async caller is cancelled) ends the wait early."""
        try:
            while True:
                outcome = wait.step()
                if not isinstance(outcome, float):
                    return outcome
                if wait.timed_out() or cancelled.wait(outcome):
                    raise wait.failure()
        finally:
            wait.leave_queue()

    # -- async --------------------------------------------------------------------

    async def __aenter__(self) -> LockHandle:
        return self._hold(*await self._aacquire())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        handle, renewer = self._entered.pop()
        # One thread call: a cancellation here cannot stop the renewals but
        # skip the release (the thread runs both to the end).
        result = await run_in_lock_thread(self.using, self._release, handle, renewer)
        self._after_release(handle, result, failed=exc_type is not None)

    async def _aacquire(self) -> tuple[DistributedLock, float]:
        owner = self.owner or new_owner_token()
        manager = DistributedLock.objects.db_manager(self.using)
        started = time.monotonic()
        if not self.timeout:
            acquired = await manager.aacquire(self.resource, owner, self.ttl)
            if acquired is None:
                raise self._held()
            return acquired, started
        wait = _Wait(self.resource, owner, self.ttl, self.timeout, self.using)
        # The whole wait in one thread: one connection for it, not one per look.
        cancelled = threading.Event()
        waiting = run_in_own_thread(self.using, self._wait, wait, cancelled)
        acquired = await release_if_cancelled(manager, waiting, stop=cancelled.set)
        return acquired, wait.started

    # -- decorator ----------------------------------------------------------------

    def __call__(self, function: _F) -> _F:
        """Run each call of ``function`` (sync or async) holding the lock."""
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_locked(*args: Any, **kwargs: Any) -> Any:
                async with self._copy():
                    return await function(*args, **kwargs)

            return async_locked  # type: ignore[return-value]

        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._copy():
                return function(*args, **kwargs)

        return locked  # type: ignore[return-value]

    # -- shared -------------------------------------------------------------------

    def _copy(self) -> lock:
        """A fresh context for one call (decorated functions may run concurrently)."""
        return lock(
            self.resource,
            owner=self.owner,
            ttl=self.ttl,
            timeout=self.timeout,
            auto_renew=self.auto_renew,
            using=self.using,
        )

    def _held(self) -> LockNotAcquired:
        return LockNotAcquired(f"The lock on {self.resource!r} is held by another owner.")

    def _hold(self, acquired: DistributedLock, started: float) -> LockHandle:
        handle = LockHandle(acquired, self.ttl, self.using, started)
        renewer = _Renewer(handle) if self.auto_renew else None
        if renewer is not None:
            renewer.start()
        self._entered.append((handle, renewer))
        return handle

    def _release(self, handle: LockHandle, renewer: _Renewer | None) -> ReleaseResult:
        if renewer is not None:
            renewer.stop()
        return DistributedLock.objects.db_manager(self.using).release(handle.resource, handle.owner)

    def _after_release(self, handle: LockHandle, result: ReleaseResult, *, failed: bool) -> None:
        if result is ReleaseResult.RELEASED:
            handle._deadline = math.inf  # released, it can no longer expire on the holder
            return
        if result is ReleaseResult.FORBIDDEN:
            reason, exception = "another owner held it when it was released", LockNotOwned
        else:
            reason, exception = "it had expired when it was released", LockExpired
        handle._mark_lost(reason)
        if not failed:  # never hide the block's own exception behind this one
            raise exception(f"The lock on {handle.resource!r} was lost before the end: {reason}.")
