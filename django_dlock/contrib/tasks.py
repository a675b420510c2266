"""Django's tasks framework under a lock: ``django.tasks`` (Django 6.0+), or the
``django-tasks`` backport on Django 5.2 (``pip install django-tasks``).

```python
from django.tasks import task  # django_tasks on Django 5.2
from django_dlock.contrib.tasks import locked_task

@task()
@locked_task("order:{order_id}", ttl=60, on_locked="defer")
def ship(order_id: int, fencing_token: int) -> None:
    ...
```

``locked_task`` goes underneath ``@task``; so does ``throttled_task``, which
runs each call as one use of a throttle and defers a refused run until the
throttle frees. See docs/tasks.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from asgiref.sync import sync_to_async
from django.utils import timezone

from django_dlock.contrib.enqueue_once import AlreadyQueued
from django_dlock.contrib.task_locks import (
    FENCING_TOKEN_ARG,
    HANDLE_ARG,
    RETRY_WAIT,
    SKIPPED,
    LockedFunction,
    LockKind,
    OnLost,
    announce_skip,
    backoff,
    task_skipped,
)
from django_dlock.contrib.tasks_framework import (
    ATTEMPT_ARG,
    DEFERRED,
    deferred_to,
    running_result,
    task_framework,
)
from django_dlock.contrib.tasks_once import (
    EnqueueOnceTask,
    OnDuplicate,
    TaskDeduplication,
    deduplicate,
    enqueue_once,
    requeueing,
    run_marks,
)
from django_dlock.exceptions import LockNotAcquired, Throttled
from django_dlock.locking import LockHandle
from django_dlock.locking.names import ResourceName
from django_dlock.throttles import Rate, ThrottleDecision, throttle
from django_dlock.throttles.parsing import resolve_rate

if TYPE_CHECKING:
    from django.tasks import TaskResult

__all__ = [
    "ATTEMPT_ARG",
    "AlreadyQueued",
    "EnqueueOnceTask",
    "FENCING_TOKEN_ARG",
    "HANDLE_ARG",
    "SKIPPED",
    "deferred_to",
    "enqueue_once",
    "locked_task",
    "task_framework",
    "task_skipped",
    "throttled_task",
]

logger = logging.getLogger("django_dlock.tasks")

_R = TypeVar("_R")

OnLocked = Literal["skip", "defer", "raise"]
OnThrottled = Literal["skip", "defer", "raise"]


def locked_task(
    key: str | Callable[..., str],
    *,
    ttl: float | None = None,
    timeout: float | None = None,
    on_locked: OnLocked = "skip",
    auto_renew: bool = True,
    on_lost: OnLost = "raise",
    shared: bool = False,
    limit: int | None = None,
    reentrant: bool = False,
    label: str = "",
    max_attempts: int = 10,
    min_delay: float = 1.0,
    on_duplicate: OnDuplicate | None = None,
    queued_ttl: float | None = None,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Run each call of the task function holding the lock named by ``key``.

    ``key`` is a template filled from the task's arguments by name
    (``"order:{order_id}"``; ``{{``/``}}`` for literal braces), or a function
    of those arguments returning the resource. The lock is taken with ``ttl``,
    renewed every ttl/3 (``auto_renew``) and released when the body returns or
    raises. A body with a ``fencing_token`` parameter gets the lock's token,
    one with a ``held`` parameter the ``LockHandle``.

    ``shared``, ``limit``, ``reentrant`` and ``label`` are ``lock()``'s: a run
    holds the lock as one of many readers, as one of ``limit`` permits, or
    re-enters a lock its own thread holds; ``label`` names it in public.

    When another owner holds the lock, it waits up to ``timeout`` seconds in
    the lock's queue (``None``: one try; 5 s with ``"defer"``), then:

    - ``"skip"``: the run returns ``SKIPPED`` without running the body, logs it
      with the result id and arguments, and sends ``task_skipped``;
    - ``"defer"``: the task is enqueued again with ``run_after`` an exponential
      backoff from ``min_delay`` seconds (with jitter, capped at the holder's
      expiry) and its attempt number; this run returns
      ``{"django_dlock": "deferred", "result_id": ..., "attempt": ...}``. The
      run of attempt ``max_attempts`` raises ``LockNotAcquired`` instead. The
      backend must support ``run_after`` (``supports_defer``);
    - ``"raise"``: ``LockNotAcquired`` (the task fails).

    A lost lock fails the task with ``LockExpired``/``LockNotOwned`` saying
    why; ``on_lost="stop"`` raises it in the body as soon as it is found.

    ``on_duplicate`` (with ``@enqueue_once`` above ``@task()``) refuses to
    enqueue a call while one with the same lock is queued or running:
    ``"raise"`` ``AlreadyQueued``, ``"skip"`` (``enqueue()`` returns ``None``)
    or ``"return"`` (the ``TaskResult`` of that call). ``queued_ttl``: how long
    an enqueued call counts as queued at most. See ``contrib.tasks_once``.
    """
    if on_locked not in ("skip", "defer", "raise"):
        raise ValueError(f"on_locked must be 'skip', 'defer' or 'raise', not {on_locked!r}")
    if not (isinstance(max_attempts, int) and max_attempts >= 1):
        raise ValueError(f"max_attempts must be a whole number >= 1, not {max_attempts!r}")
    wait = RETRY_WAIT if timeout is None and on_locked == "defer" else timeout
    task_class = importlib.import_module(f"{task_framework().__name__}.base").Task
    kind = LockKind.from_flags(shared=shared, limit=limit, reentrant=reentrant)
    deduplication = TaskDeduplication.of(on_duplicate, queued_ttl, kind)

    def decorate(function: Callable[..., _R]) -> Callable[..., _R]:
        if isinstance(function, task_class):
            raise TypeError(
                f"@locked_task is above @task on {function!r}: put it underneath, so that "
                "the task runs the locked function."
            )
        locked = LockedFunction(
            function, key, ttl=ttl, auto_renew=auto_renew, on_lost=on_lost, kind=kind, label=label
        )
        policy = _Policy(on_locked, max_attempts, min_delay, function.__name__)

        if inspect.iscoroutinefunction(function):
            if on_lost == "stop":
                raise ValueError(
                    f"on_lost='stop' stops sync task functions; {function.__name__}() is async: "
                    "let it look at held.lost instead."
                )

            async def arun_locked(*args: Any, **kwargs: Any) -> Any:
                attempt = kwargs.pop(ATTEMPT_ARG, 1)
                resource = locked.resource(args, kwargs)
                result = running_result(arun_locked)
                owner, mark_label, unmark = run_marks(deduplication, result, resource)
                async with contextlib.AsyncExitStack() as stack:
                    try:
                        held = await stack.enter_async_context(
                            locked.hold(resource, owner, wait, mark_label)
                        )
                    except LockNotAcquired as error:
                        try:
                            return await sync_to_async(policy.apply)(
                                result, resource, error, attempt, args, kwargs
                            )
                        finally:
                            await sync_to_async(unmark)()
                    await sync_to_async(unmark)()  # from now on the lock says a run is on
                    return await locked.arun(held, args, kwargs)

            return _marked(locked.wraps(arun_locked), deduplication, locked)

        def run_locked(*args: Any, **kwargs: Any) -> Any:
            attempt = kwargs.pop(ATTEMPT_ARG, 1)
            resource = locked.resource(args, kwargs)
            result = running_result(run_locked)
            owner, mark_label, unmark = run_marks(deduplication, result, resource)
            with contextlib.ExitStack() as stack:
                # Only taking the task's lock is guarded: a LockNotAcquired from the
                # body (a lock it takes itself) fails the task as raised.
                try:
                    held: LockHandle = stack.enter_context(
                        locked.hold(resource, owner, wait, mark_label)
                    )
                except LockNotAcquired as error:
                    try:
                        return policy.apply(result, resource, error, attempt, args, kwargs)
                    finally:
                        unmark()
                unmark()  # from now on the lock itself says that a run is on
                return locked.run(held, args, kwargs)

        return _marked(locked.wraps(run_locked), deduplication, locked)

    return decorate


def _marked(
    wrapped: Callable[..., _R], deduplication: TaskDeduplication | None, locked: LockedFunction
) -> Callable[..., _R]:
    """``wrapped``, marked for ``enqueue_once`` when it has ``on_duplicate``."""
    if deduplication is not None:
        deduplicate(wrapped, deduplication, locked)
    return wrapped


@dataclass(frozen=True)
class _Policy:
    """What a run does when another owner holds its lock (``on_locked``)."""

    on_locked: OnLocked
    max_attempts: int
    min_delay: float
    function_name: str

    def apply(
        self,
        result: TaskResult[..., Any] | None,
        resource: str,
        error: LockNotAcquired,
        attempt: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if self.on_locked == "skip":
            name = result.task.name if result is not None else self.function_name
            task_id = result.id if result is not None else None
            return announce_skip(resource, name, task_id, args, kwargs)
        if self.on_locked == "defer" and result is not None:
            return self.defer(result, resource, error, attempt)
        raise error

    def defer(
        self, result: TaskResult[..., Any], resource: str, error: LockNotAcquired, attempt: int
    ) -> dict[str, Any]:
        task = result.task
        if attempt >= self.max_attempts:
            raise LockNotAcquired(f"{error} Gave up after {attempt} attempts (max_attempts).")
        if not task.get_backend().supports_defer:
            raise LockNotAcquired(
                f"{error} Cannot defer the task: its backend {task.backend!r} does not support "
                "run_after (ImmediateBackend runs each task as it is enqueued)."
            )
        delay = backoff(attempt - 1, self.min_delay, error)
        run_after = timezone.now() + timedelta(seconds=delay)
        with requeueing(str(result.id)):  # the same call, queued again: never a duplicate
            again = task.using(run_after=run_after).enqueue(
                *result.args, **{**result.kwargs, ATTEMPT_ARG: attempt + 1}
            )
        logger.info(
            "Deferred task %s[%s] by %.1f s as %s (attempt %d of %d): the lock on %r is held "
            "by another owner.",
            task.name,
            result.id,
            delay,
            again.id,
            attempt + 1,
            self.max_attempts,
            resource,
        )
        return {"django_dlock": DEFERRED, "result_id": str(again.id), "attempt": attempt + 1}


def throttled_task(
    key: str | Callable[..., str],
    rate: str | Rate,
    *,
    on_throttled: OnThrottled = "defer",
    max_attempts: int = 10,
    using: str | None = None,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Run each call of the task function (sync or async) as one use of
    ``throttle(key, rate)``.

    ``key`` is a template filled from the task's arguments by name
    (``"email:{user_id}"``), or a function of them returning the key; ``rate``
    is the throttle's (``"10/m"``, or a name in ``DLOCK_THROTTLE_RATES``). The
    use is recorded before the body runs and counts also when it fails. When
    the rate allows no use now, ``on_throttled`` says what happens:

    - ``"defer"``: the task is enqueued again with ``run_after`` the throttle's
      ``retry_after`` from now (when its oldest use leaves the window) and its
      attempt number; this run returns ``{"django_dlock": "deferred",
      "result_id": ..., "attempt": ...}`` (``deferred_to``). The run of attempt
      ``max_attempts``, a direct call, or a backend without ``run_after``
      (``supports_defer``) raises ``Throttled`` instead;
    - ``"skip"``: the run returns ``SKIPPED`` without running the body, and
      logs it with the result id and the time until the next use;
    - ``"raise"``: ``Throttled`` (the task fails).
    """
    if on_throttled not in ("skip", "defer", "raise"):
        raise ValueError(f"on_throttled must be 'skip', 'defer' or 'raise', not {on_throttled!r}")
    if not (isinstance(max_attempts, int) and max_attempts >= 1):
        raise ValueError(f"max_attempts must be a whole number >= 1, not {max_attempts!r}")
    resolve_rate(rate)  # refuse a bad rate at import, not at the first run
    task_class = importlib.import_module(f"{task_framework().__name__}.base").Task

    def decorate(function: Callable[..., _R]) -> Callable[..., _R]:
        if isinstance(function, task_class):
            raise TypeError(
                f"@throttled_task is above @task on {function!r}: put it underneath, so that "
                "the task runs the throttled function."
            )
        name = ResourceName(key, function, what="throttle key")
        refused = _Throttled(on_throttled, max_attempts, function.__name__)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def arun_throttled(*args: Any, **kwargs: Any) -> Any:
                attempt = kwargs.pop(ATTEMPT_ARG, 1)
                limiter = throttle(name.format(args, kwargs), rate, using=using)
                decision = await limiter.atry_use()
                if decision:
                    return await function(*args, **kwargs)
                result = running_result(arun_throttled)
                return await sync_to_async(refused.apply)(result, decision, attempt)

            return arun_throttled  # type: ignore[return-value]

        @functools.wraps(function)
        def run_throttled(*args: Any, **kwargs: Any) -> Any:
            attempt = kwargs.pop(ATTEMPT_ARG, 1)
            decision = throttle(name.format(args, kwargs), rate, using=using).try_use()
            if decision:
                return function(*args, **kwargs)
            return refused.apply(running_result(run_throttled), decision, attempt)

        return run_throttled

    return decorate


@dataclass(frozen=True)
class _Throttled:
    """What a run does when its throttle refused it (``on_throttled``)."""

    on_throttled: OnThrottled
    max_attempts: int
    function_name: str

    def apply(
        self, result: TaskResult[..., Any] | None, decision: ThrottleDecision, attempt: int
    ) -> Any:
        error = Throttled(decision.key, decision.rate, decision.retry_after)
        if self.on_throttled == "skip":
            name = result.task.name if result is not None else self.function_name
            logger.info("Skipped task %s[%s]: %s", name, result.id if result else None, error)
            return SKIPPED
        if self.on_throttled != "defer" or result is None or attempt >= self.max_attempts:
            raise error
        task = result.task
        if not task.get_backend().supports_defer:
            raise error
        again = task.using(run_after=timezone.now() + decision.retry_after).enqueue(
            *result.args, **{**result.kwargs, ATTEMPT_ARG: attempt + 1}
        )
        logger.info(
            "Deferred task %s[%s] by %.3f s as %s (attempt %d of %d): %s",
            task.name,
            result.id,
            decision.retry_after.total_seconds(),
            again.id,
            attempt + 1,
            self.max_attempts,
            error,
        )
        return {"django_dlock": DEFERRED, "result_id": str(again.id), "attempt": attempt + 1}
