"""``lock()``: blocking acquire, a context manager and decorator, automatic renewal.

The layer above the manager's non-blocking calls. ``timeout=None`` tries once;
a number of seconds waits in a queue of waiters kept in the database
(``LockWaiter``), woken by the release where the database can push it, and
polling with backoff elsewhere (see ``waiting``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from django_dlock.conf import conf
from django_dlock.exceptions import LockExpired, LockNotAcquired, LockNotOwned
from django_dlock.locking.handle import LockHandle
from django_dlock.locking.renewer import Renewer
from django_dlock.locking.waiting import Wait
from django_dlock.locking.waiting_thread import waiting_thread
from django_dlock.locking.wakeup import Wakeup
from django_dlock.models import DistributedLock
from django_dlock.rules import ReleaseResult, new_owner_token
from django_dlock.threads import release_if_cancelled, run_in_lock_thread
from django_dlock.validators import validate_owner, validate_resource, validate_ttl

__all__ = ["lock"]

_F = TypeVar("_F", bound=Callable[..., Any])


class lock:
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
        self._entered: list[tuple[LockHandle, Renewer | None]] = []

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
        wait = Wait(self.resource, owner, self.ttl, self.timeout, self.using)
        return self._wait(wait), wait.started

    def _wait(self, wait: Wait) -> DistributedLock:
        """Look until the lock is taken or the time is up, sleeping in this
        thread between looks (a release may wake it early)."""
        try:
            while True:
                outcome = wait.step()
                if not isinstance(outcome, float):
                    return outcome
                if wait.timed_out():
                    raise wait.failure()
                wait.wakeup.wait(outcome)
        finally:
            wait.finish()

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
        wait = Wait(self.resource, owner, self.ttl, self.timeout, self.using, Wakeup.on_loop())
        acquired = await release_if_cancelled(
            self.using,
            self._await(wait),
            lambda: manager.release(self.resource, owner),
            stop=wait.cancel,
        )
        return acquired, wait.started

    async def _await(self, wait: Wait) -> DistributedLock:
        """``_wait()`` on the event loop: it sleeps there, holding no thread and
        no connection; each look runs in the process's waiting thread."""
        thread = waiting_thread(self.using)
        thread.enter()
        try:
            while True:
                outcome = await thread.run(wait.step)
                if not isinstance(outcome, float):
                    return outcome
                if wait.timed_out():
                    raise wait.failure()
                await wait.wakeup.sleep(outcome)
        finally:
            try:
                await asyncio.shield(thread.run(wait.finish))
            finally:
                thread.exit()

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
        renewer = Renewer(handle) if self.auto_renew else None
        if renewer is not None:
            renewer.start()
        self._entered.append((handle, renewer))
        return handle

    def _release(self, handle: LockHandle, renewer: Renewer | None) -> ReleaseResult:
        if renewer is not None:
            renewer.stop()
        return DistributedLock.objects.db_manager(self.using).release(handle.resource, handle.owner)

    def _after_release(self, handle: LockHandle, result: ReleaseResult, *, failed: bool) -> None:
        if result is ReleaseResult.RELEASED:
            handle.mark_released()
            return
        exception: type[LockExpired | LockNotOwned]
        if result is ReleaseResult.FORBIDDEN:
            reason, exception = "another owner held it when it was released", LockNotOwned
        else:
            reason, exception = "it had expired when it was released", LockExpired
        handle.check_deadline()  # a ttl that passed first is the reason it was lost
        handle.mark_lost(reason)
        if not failed:  # never hide the block's own exception behind this one
            raise exception(f"The lock on {handle.resource!r} was lost before the end: {reason}.")
