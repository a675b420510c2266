"""``throttle()``: at most N uses of a key per period, across processes and hosts.

A context manager (``with``, ``async with``) and a decorator (of sync and
async functions) that raise ``Throttled`` when the rate allows no use now, and
``try_use()``, which answers instead of raising. The decision is the
database's (``slots``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from django_dlock.conf import conf
from django_dlock.exceptions import Throttled
from django_dlock.locking.names import ResourceName
from django_dlock.threads import run_in_lock_thread
from django_dlock.throttles.parsing import resolve_rate
from django_dlock.throttles.rate import Rate
from django_dlock.throttles.slots import ThrottleDecision, decide
from django_dlock.validators import validate_throttle_key

__all__ = ["throttle"]

_F = TypeVar("_F", bound=Callable[..., Any])


class throttle:
    """Allow at most ``rate`` uses of ``key``: ``"10/m"``, ``"100/h"``, ``"5/10m"``,
    or the name of a rate in ``DLOCK_THROTTLE_RATES``.

    ``with throttle("email:42", rate="10/m"):`` records a use and runs the
    block, or raises ``Throttled`` (with ``retry_after``) and runs nothing.
    The use counts from the moment it is granted, also when the block raises:
    there is nothing to give back on exit. ``try_use()`` records a use when
    allowed and answers a ``ThrottleDecision`` (true when granted) instead of
    raising.

    As a decorator, ``{name}`` placeholders in the key are filled from each
    call's arguments (``@throttle("email:{user_id}", rate="10/m")``), as
    ``lock()`` fills its resource; ``key`` may also be a function of the
    call's arguments. An invalid key or rate raises ``InvalidArgument`` at
    once. Each use runs in a transaction of its own on ``using`` (default
    ``DLOCK_DATABASE``) and raises ``LockTransactionError`` inside one the
    caller has open.
    """

    def __init__(
        self, key: str | Callable[..., str], rate: str | Rate, *, using: str | None = None
    ) -> None:
        if isinstance(key, str):
            validate_throttle_key(key)
        elif not callable(key):
            raise TypeError(f"A throttle key must be a string or a function, not {key!r}.")
        resolve_rate(rate)  # refuse a bad rate now, not at the first use
        self.key = key
        self.rate_name = rate
        self.using = using

    def __repr__(self) -> str:
        return f"throttle({self.key!r}, rate={str(self.rate_name)!r})"

    @property
    def rate(self) -> Rate:
        """The rate, as the settings say now when it is a name."""
        return resolve_rate(self.rate_name)

    # -- one use ------------------------------------------------------------------

    def try_use(self) -> ThrottleDecision:
        """Record a use if the rate allows one now; the decision (true when granted)."""
        if not isinstance(self.key, str):
            raise TypeError(
                "A throttle whose key is a function takes its key from a decorated call."
            )
        return decide(self.key, self.rate, self.using or conf.DATABASE)

    async def atry_use(self) -> ThrottleDecision:
        """``try_use()`` for async code, in one of django-dlock's threads (never
        on the caller's connection)."""
        return await run_in_lock_thread(self.using or conf.DATABASE, self.try_use)

    def __enter__(self) -> ThrottleDecision:
        return _granted(self.try_use())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None  # the use was recorded on entry and stays counted

    async def __aenter__(self) -> ThrottleDecision:
        return _granted(await self.atry_use())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    # -- decorator ----------------------------------------------------------------

    def __call__(self, function: _F) -> _F:
        """Run each call of ``function`` (sync or async) as one use of the key
        its arguments name; a refused call raises ``Throttled`` and does not run."""
        name = ResourceName(self.key, function, what="throttle key")

        def for_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> throttle:
            return throttle(name.format(args, kwargs), self.rate_name, using=self.using)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_throttled(*args: Any, **kwargs: Any) -> Any:
                async with for_call(args, kwargs):
                    return await function(*args, **kwargs)

            return async_throttled  # type: ignore[return-value]

        @functools.wraps(function)
        def throttled(*args: Any, **kwargs: Any) -> Any:
            with for_call(args, kwargs):
                return function(*args, **kwargs)

        return throttled  # type: ignore[return-value]


def _granted(decision: ThrottleDecision) -> ThrottleDecision:
    if not decision.granted:
        raise Throttled(decision.key, decision.rate, decision.retry_after)
    return decision
