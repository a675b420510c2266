"""``lock()``: blocking acquire, a context manager and decorator, automatic renewal.

The layer above the manager's non-blocking calls. ``timeout=None`` tries once;
a number of seconds waits in a queue of waiters kept in the database
(``LockWaiter``), woken by the release where the database can push it, and
polling with backoff elsewhere (see ``waiting``). A list of resources takes
them all or none (see ``several``).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from django_dlock.conf import conf
from django_dlock.exceptions import (
    InvalidArgument,
)
from django_dlock.kinds import LockKind
from django_dlock.locking.handle import LockHandle, report_release
from django_dlock.locking.min_hold import release_or_keep, validate_min_hold
from django_dlock.locking.names import ResourceName
from django_dlock.locking.reentry import Entered, check_reentry, current_holder, held_here
from django_dlock.locking.refusals import refusal
from django_dlock.locking.renewer import start_renewer
from django_dlock.locking.several import HeldLocks, LockItems, hold_several
from django_dlock.locking.told import Lease, Taken
from django_dlock.locking.until_commit import (
    COMMIT,
    EXIT,
    bind_to_transaction,
    not_in_async_code,
    released_if_rolled_back,
    validate_until,
)
from django_dlock.locking.wait_loops import wait_here, wait_on_loop
from django_dlock.locking.waiting import Wait
from django_dlock.locking.wakeup import Wakeup
from django_dlock.models import DistributedLock
from django_dlock.rules import Hold, ReleaseResult, new_owner_token
from django_dlock.rules.claim import Claim, claim_for
from django_dlock.service import Refusal, service_for
from django_dlock.threads import release_if_cancelled, run_in_lock_thread
from django_dlock.validators import (
    validate_label,
    validate_lock_delay,
    validate_owner,
    validate_priority,
    validate_resource,
    validate_ttl,
)

__all__ = ["lock"]

_F = TypeVar("_F", bound=Callable[..., Any])


class lock:
    """Hold the lock on ``resource`` for a block (``with``, ``async with``) or a call (``@lock``).

    Gives a ``LockHandle`` (``HeldLocks`` for a list of resources). The exit releases the lock,
    also when the block raised. Each acquire and release is a transaction of its own, never the
    caller's: inside ``atomic()`` it raises ``LockTransactionError`` (but see ``until``).

    Args:
        resource: The lock's name, or a list (``["a", ("b", "shared")]``) to hold all or none.
            As a decorator, ``{name}`` placeholders are filled from each call's arguments.
        owner: The holder's secret; a random token per entry when ``None`` (leave it out).
        ttl: Seconds until the lock expires by itself; ``DLOCK_DEFAULT_TTL`` when ``None``.
        timeout: ``None`` or ``0`` tries once; seconds wait in a first come, first served
            queue, ``float("inf")`` without end.
        auto_renew: Renew every ttl/3 in a background thread until the block ends.
        using: The database alias; ``DLOCK_DATABASE`` when ``None``.
        reentrant: The same thread or asyncio task may enter it again, counting holds.
        shared: Hold it as one of many readers (a writer excludes them).
        limit: Hold one of at most ``limit`` permits of a semaphore.
        label: The holder's public name (``holders()``, the admin, the API).
        on_lost: Called with the handle when the lock is found lost.
        min_hold: Seconds or a ``timedelta``: a lock taken less than that long ago is kept on
            exit and expires then, without waiting (ShedLock's lockAtLeastFor).
        lock_delay: Seconds or a ``timedelta``, exclusive locks: a hold lost rather than
            released leaves the resource refused to everyone that long (Chubby's lock-delay).
        until: ``"exit"``, or ``"commit"`` inside ``atomic()``: held until the transaction
            commits or rolls back, not released at the block's exit.
        priority: -1000 to 1000, the wait queue's order: higher first; a step is worth a
            minute of waiting, so no waiter starves.

    Raises:
        InvalidArgument: An argument is invalid; raised at once, before anything runs.
        LockNotAcquired: The lock stayed held (``LockDeadlock``: the wait would never end;
            ``LockHeldByCaller``: a lock that is not reentrant, held by this thread or task).
        LockExpired: On exit, the lock was lost meanwhile (``LockNotOwned``: another owner
            holds it); ``lock_lost`` is sent. Not raised when the block raised.
    """

    def __init__(
        self,
        resource: str | LockItems,
        *,
        owner: str | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
        auto_renew: bool = False,
        using: str | None = None,
        reentrant: bool = False,
        shared: bool = False,
        limit: int | None = None,
        label: str = "",
        on_lost: Callable[[LockHandle], object] | None = None,
        min_hold: float | timedelta | None = None,
        lock_delay: float | timedelta | None = None,
        until: str = EXIT,
        priority: int = 0,
    ) -> None:
        self.items: LockItems | None = None
        if isinstance(resource, str) or not isinstance(resource, Iterable):
            validate_resource(resource)  # anything but a list of names: "must be a string"
        else:
            if reentrant or shared or limit is not None:
                raise ValueError(
                    "A lock() of several resources names each one's mode in its list "
                    '(["a", ("b", "shared")]); reentrant and limit are for one resource.'
                )
            self.items = list(resource)
        if owner is not None:
            validate_owner(owner)
        self.kind = LockKind.from_flags(shared=shared, limit=limit, reentrant=reentrant)
        validate_label(label)
        self.ttl = float(validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl))
        if timeout is not None and not timeout >= 0:
            raise InvalidArgument(
                f"timeout must be None or a number of seconds >= 0, not {timeout!r}",
                code="timeout",
            )
        self.resource = resource if isinstance(resource, str) else ""
        self.owner = owner
        self.timeout = timeout
        self.auto_renew = auto_renew
        self.using = using or conf.DATABASE
        self.reentrant = reentrant
        self.shared = shared
        self.limit = limit
        self.label = label
        self.on_lost = on_lost
        self._entered: list[Entered | HeldLocks] = []
        self._claimed: Claim | None = None
        self.min_hold = validate_min_hold(min_hold, several=self.items is not None)
        exclusive = self.items is None and self.kind.is_exclusive
        self.lock_delay = (
            None if lock_delay is None else validate_lock_delay(lock_delay, exclusive=exclusive)
        )
        self.priority = validate_priority(priority)
        self.until = validate_until(
            until, several=self.items is not None, reentrant=reentrant, min_hold=bool(min_hold)
        )
        if self.until == COMMIT:
            self.auto_renew = True  # held until the commit, however long that takes

    def __repr__(self) -> str:
        what = repr(self.resource) if self.items is None else repr(self.items)
        return f"lock({what}, ttl={self.ttl:g}, timeout={self.timeout!r})"

    # -- sync ---------------------------------------------------------------------

    def __enter__(self) -> Any:
        if self.items is not None:
            held = hold_several(self, self.items)
            self._entered.append(held)
            return held
        holder = current_holder()
        entered = held_here.get(self.using, self.resource, holder)
        if entered is not None and not released_if_rolled_back(entered):
            self._check_reentry(entered)
            handle = entered.handle
            return self._reenter(entered, self._take(handle.owner, handle.fencing_token)).handle
        if self.until == COMMIT:  # (never reentrant: the check above raised)
            return bind_to_transaction(
                self.using,
                # Acquired in another thread: the holds its ticket names are this one's.
                acquire=functools.partial(self._acquire, self._holding()),
                hold=functools.partial(self._hold, holder),
                end=functools.partial(self._end, failed=True),  # raised to nobody
            )
        return self._hold(holder, *self._acquire()).handle

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        entered = self._entered.pop()
        if isinstance(entered, HeldLocks):
            entered.release(failed=exc_type is not None)
            return
        if self.until != COMMIT:  # else held until the transaction ends (``until_commit``)
            self._end(entered, failed=exc_type is not None)

    def _end(self, entered: Entered, *, failed: bool) -> None:
        """Release one entry of ``entered``: a loss found is reported, and raised
        unless the block ``failed`` (its exception goes on)."""
        try:
            result = self._release(entered)
        finally:
            held_here.leave(self.using, self.resource, entered)  # also after a database error
        report_release(entered.handle, result, last=entered.depth == 0, failed=failed)

    def _acquire(self, holding: tuple[tuple[str, str], ...] | None = None) -> Taken:
        """The hold, when it was asked for, its lease (``Taken``); a wait names
        ``holding`` (by default the calling thread's holds) on its ticket."""
        owner = self.owner or new_owner_token()
        if not self.timeout:
            started = time.monotonic()
            acquired = self._take(owner)
            if isinstance(acquired, Refusal):
                raise refusal(self.resource, acquired)
            return acquired, started, None
        holding = self._holding() if holding is None else holding
        wait = Wait(self._claim(owner), self.timeout, self.using, holding=holding)
        return wait_here(wait), wait.started, wait.lease

    # -- async --------------------------------------------------------------------

    async def __aenter__(self) -> Any:
        if self.until == COMMIT:
            raise not_in_async_code()
        if self.items is not None:
            items = self.items
            held = await run_in_lock_thread(self.using, hold_several, self, items)
            self._entered.append(held)
            return held
        holder = current_holder()
        entered = held_here.get(self.using, self.resource, holder)
        if entered is not None:
            self._check_reentry(entered)
            handle = entered.handle
            acquired = await self._atake(handle.owner, handle.fencing_token)
            return self._reenter(entered, acquired).handle
        return self._hold(holder, *await self._aacquire()).handle

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        entered = self._entered.pop()
        if isinstance(entered, HeldLocks):
            await run_in_lock_thread(self.using, entered.release_quietly)
            entered.report(failed=exc_type is not None)
            return
        # One thread call: a cancellation here cannot stop the renewals but
        # skip the release (the thread runs both to the end).
        try:
            result = await run_in_lock_thread(self.using, self._release, entered)
        finally:
            held_here.leave(self.using, self.resource, entered)  # also after a database error
        report_release(entered.handle, result, last=entered.depth == 0, failed=exc_type is not None)

    async def _aacquire(self) -> Taken:
        owner = self.owner or new_owner_token()
        manager = DistributedLock.objects.db_manager(self.using)
        started = time.monotonic()
        if not self.timeout:
            acquired = await self._atake(owner)
            if isinstance(acquired, Refusal):
                raise refusal(self.resource, acquired)
            return acquired, started, None
        wait = Wait(
            self._claim(owner), self.timeout, self.using, Wakeup.on_loop(), holding=self._holding()
        )
        acquired = await release_if_cancelled(
            self.using,
            wait_on_loop(wait),
            lambda: manager.release(self.resource, owner),
            stop=wait.cancel,
        )
        return acquired, wait.started, wait.lease

    async def _atake(self, owner: str, held_token: int | None = None) -> Hold | Refusal:
        manager = DistributedLock.objects.db_manager(self.using)
        return await release_if_cancelled(
            self.using,
            run_in_lock_thread(self.using, self._take, owner, held_token),
            lambda: manager.release(self.resource, owner),
        )

    # -- decorator ----------------------------------------------------------------

    def __call__(self, function: _F) -> _F:
        """Run each call of ``function`` (sync or async) holding the lock.

        ``{name}`` placeholders in the resource are filled from each call's
        arguments (``@lock("order:{order_id}")``); ``{{`` and ``}}`` are literal
        braces (see ``names``).
        """
        name = ResourceName(self.resource, function)

        def resources(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | LockItems:
            return name.format(args, kwargs) if self.items is None else self.items

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_locked(*args: Any, **kwargs: Any) -> Any:
                async with self._copy(resources(args, kwargs)):
                    return await function(*args, **kwargs)

            return async_locked  # type: ignore[return-value]

        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._copy(resources(args, kwargs)):
                return function(*args, **kwargs)

        return locked  # type: ignore[return-value]

    # -- shared -------------------------------------------------------------------

    def _copy(self, resource: str | LockItems) -> lock:
        """A fresh context for one call (decorated functions may run concurrently)."""
        return lock(
            resource,
            owner=self.owner,
            ttl=self.ttl,
            timeout=self.timeout,
            auto_renew=self.auto_renew,
            using=self.using,
            reentrant=self.reentrant,
            shared=self.shared,
            limit=self.limit,
            label=self.label,
            on_lost=self.on_lost,
            min_hold=self.min_hold,
            lock_delay=self.lock_delay,
            until=self.until,
            priority=self.priority,
        )

    def _claim(self, owner: str, held_token: int | None = None) -> Claim:
        """The claim for ``owner``: made and checked once, then only the owner changes."""
        if self._claimed is None:
            self._claimed = claim_for(
                self.resource,
                owner,
                self.ttl,
                kind=self.kind,
                label=self.label,
                lock_delay=self.lock_delay,
                priority=self.priority,
            )
        return replace(self._claimed, owner=owner, held_token=held_token)

    def _take(self, owner: str, held_token: int | None = None) -> Hold | Refusal:
        """One non-blocking acquisition, or why it was refused; with
        ``held_token``, a re-entry of that grant."""
        return service_for(self.using).try_take(self._claim(owner, held_token), instance=False)

    def _holding(self) -> tuple[tuple[str, str], ...]:
        """What the calling thread or task holds with lock() on this database,
        which a waiter writes on its ticket (``locking.deadlock``)."""
        return tuple(held_here.held_by(self.using, current_holder()))

    def _hold(self, holder: object, acquired: Hold, started: float, lease: Lease = None) -> Entered:
        handle = LockHandle(acquired, self.ttl, self.using, started, on_lost=self.on_lost)
        renewer = start_renewer(handle, auto_renew=self.auto_renew, lease=lease, started=started)
        entered = Entered(holder, handle, renewer, reentrant=self.reentrant)
        held_here.add(self.using, self.resource, entered)
        self._entered.append(entered)
        return entered

    def _check_reentry(self, entered: Entered) -> None:
        check_reentry(entered, self.resource, reentrant=self.reentrant, kind=self.kind)

    def _reenter(self, entered: Entered, acquired: Hold | Refusal) -> Entered:
        """Enter again a hold that this thread or task has entered already."""
        if isinstance(acquired, Refusal):  # the re-entry of a grant is refused only when lost
            raise entered.handle.lost_before("a re-entry")
        entered.depth += 1
        entered.handle.expires_at = acquired.expires_at
        self._entered.append(entered)
        return entered

    def _release(self, entered: Entered) -> ReleaseResult:
        last = entered.depth == 1
        if last and entered.renewer is not None:
            entered.renewer.stop()
        return release_or_keep(self.using, entered.handle, self.min_hold if last else None)
