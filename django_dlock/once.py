"""``once_per()``: run a body at most once per window, across processes and hosts.

For the job that every host's cron (or every worker's beat) starts: the first
to come takes the lock and runs the body; the lock then stays held until
``every`` after it was taken, so every other run within that window finds it
held and skips the body. It is ``lock(..., min_hold=every)`` that never waits,
and that says "not due" instead of raising ``LockNotAcquired``.

The window starts when the lock is taken, by the database's clock, and ends
``every`` later, by the database's clock: clients whose clocks are hours apart
decide alike (see ``locking.min_hold`` for how the client measures the time left).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from django_dlock.exceptions import InvalidArgument, LockHeldByCaller, LockNotAcquired
from django_dlock.locking.context import lock
from django_dlock.locking.min_hold import validate_min_hold
from django_dlock.locking.names import ResourceName
from django_dlock.validators import validate_label, validate_resource

__all__ = ["once_per"]

_F = TypeVar("_F", bound=Callable[..., Any])


class once_per:
    """Run a body at most once per ``every`` (a ``timedelta`` or seconds) on
    ``resource``, whichever process or host comes first.

    ``with once_per("report:daily", every=timedelta(hours=23)) as due:`` gives
    ``True`` to the one that took the window, which runs the body, and ``False``
    to the others, which skip it (``if due:``); ``async with`` alike. As a
    decorator (sync or async, ``{name}`` placeholders as in ``lock()``), a call
    that is not due returns ``None`` without calling the function. It never waits.

    The lock is taken with a ttl of ``every`` and renewed in the background while
    the body runs, and kept on exit until ``every`` after it was taken. A body
    that raises still used its window (the lock is kept all the same): it may have
    done part of its work, and at most once is the promise; to retry sooner,
    ``DistributedLock.objects.force_release(resource)``. A host that dies in the
    body leaves the window held to its end too. A body that outlasts ``every``
    releases the lock when it ends. ``every`` is at most ``DLOCK_MAX_TTL``.
    Invalid arguments raise ``InvalidArgument``; a database error is raised,
    never taken for "not due"; a lock lost during the body raises as ``lock()``
    does (``LockExpired``, ``LockNotOwned``).
    """

    def __init__(
        self,
        resource: str,
        every: timedelta | float,
        *,
        using: str | None = None,
        label: str = "",
    ) -> None:
        seconds = None if every is None else validate_min_hold(every, what="every")
        if seconds is None:
            raise InvalidArgument("every must be a timedelta or a number of seconds.", code="every")
        validate_resource(resource)
        validate_label(label)
        self.resource = resource
        self.every = seconds
        self.using = using
        self.label = label
        self._entered: list[lock | None] = []

    def __repr__(self) -> str:
        return f"once_per({self.resource!r}, every={self.every:g})"

    def _lock(self, resource: str) -> lock:
        return lock(
            resource,
            ttl=self.every,
            auto_renew=True,
            using=self.using,
            label=self.label,
            min_hold=self.every,
        )

    def __enter__(self) -> bool:
        held = self._lock(self.resource)
        try:
            held.__enter__()
        except LockHeldByCaller:
            raise  # nested in itself: a mistake, not a window taken by someone else
        except LockNotAcquired:
            self._entered.append(None)
            return False
        self._entered.append(held)
        return True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        held = self._entered.pop()
        if held is not None:
            held.__exit__(exc_type, exc, traceback)

    async def __aenter__(self) -> bool:
        held = self._lock(self.resource)
        try:
            await held.__aenter__()
        except LockHeldByCaller:
            raise
        except LockNotAcquired:
            self._entered.append(None)
            return False
        self._entered.append(held)
        return True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        held = self._entered.pop()
        if held is not None:
            await held.__aexit__(exc_type, exc, traceback)

    def __call__(self, function: _F) -> _F:
        """Call ``function`` only when due; a call that is not returns ``None``."""
        name = ResourceName(self.resource, function, what="once_per")

        def window(args: tuple[Any, ...], kwargs: dict[str, Any]) -> once_per:
            # A fresh context per call: decorated functions may run concurrently.
            return once_per(
                name.format(args, kwargs), self.every, using=self.using, label=self.label
            )

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_once(*args: Any, **kwargs: Any) -> Any:
                async with window(args, kwargs) as due:
                    return await function(*args, **kwargs) if due else None

            return async_once  # type: ignore[return-value]

        @functools.wraps(function)
        def once(*args: Any, **kwargs: Any) -> Any:
            with window(args, kwargs) as due:
                return function(*args, **kwargs) if due else None

        return once  # type: ignore[return-value]
