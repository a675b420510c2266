"""Celery tasks that run under a lock. The only module of django-dlock that imports Celery.

```python
from celery import shared_task
from django_dlock.contrib.celery import locked_task

@shared_task(max_retries=10)
@locked_task("report:{month}", ttl=300, on_locked="retry")
def build_report(month: str, fencing_token: int) -> None:
    ...
```

``throttled_task("email:{user_id}", rate="10/m")`` runs each call as one use
of a throttle instead, and retries a refused run when the throttle frees.

It never creates a Celery app: it wraps the function that your app's
``@app.task``/``@shared_task`` registers (so it goes underneath them). See
docs/celery.md.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from celery import Task, current_task
from celery.local import Proxy

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
    holds_own_lock,
    owner_for_task,
    task_skipped,
)
from django_dlock.exceptions import LockNotAcquired, Throttled
from django_dlock.locking import LockHandle
from django_dlock.locking.names import ResourceName
from django_dlock.throttles import Rate, throttle
from django_dlock.throttles.parsing import resolve_rate

if TYPE_CHECKING:
    from django_dlock.locking import lock

__all__ = [
    "FENCING_TOKEN_ARG",
    "HANDLE_ARG",
    "SKIPPED",
    "locked_task",
    "task_skipped",
    "throttled_task",
]

logger = logging.getLogger("django_dlock.tasks")

_R = TypeVar("_R")

OnLocked = Literal["skip", "retry", "raise"]
OnThrottled = Literal["skip", "retry", "raise"]


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
    min_countdown: float = 1.0,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Run each call of the task function holding the lock named by ``key``.

    ``key`` is a template filled from the task's arguments by name
    (``"report:{month}"``; ``{{``/``}}`` for literal braces), or a function of
    those arguments returning the resource. The lock is taken with ``ttl``,
    renewed every ttl/3 while the task runs (``auto_renew``) and released when
    it returns or raises. A body with a ``fencing_token`` parameter gets the
    lock's token there, one with a ``held`` parameter the ``LockHandle``; the
    task's callers (``.delay()``) see the signature without them.

    The owner of the lock is derived from the task id: a redelivered task
    (``acks_late`` and a worker that died) takes its own lock back.

    ``shared``, ``limit``, ``reentrant`` and ``label`` are ``lock()``'s: a run
    holds the lock as one of many readers, as one of ``limit`` permits, or
    re-enters a lock its own thread holds; ``label`` names it in public.

    When another owner holds the lock, it waits up to ``timeout`` seconds in
    the lock's queue (``None``: one try; 5 s with ``"retry"``), then
    ``on_locked`` says what happens:

    - ``"skip"``: the run returns ``SKIPPED`` without running the body, logs it
      with the task id and arguments and sends ``task_skipped``;
    - ``"retry"``: ``task.retry()`` after an exponential backoff from
      ``min_countdown`` seconds, with jitter, capped at the holder's expiry; the
      task's ``max_retries`` applies, after which ``LockNotAcquired`` is raised;
    - ``"raise"``: ``LockNotAcquired`` (the task fails).

    If the lock is lost while the task runs, the task fails with
    ``LockExpired``/``LockNotOwned`` saying why; ``on_lost="stop"`` raises it in
    the body as soon as the loss is found (within ttl/3), rather than at its end.
    """
    if on_locked not in ("skip", "retry", "raise"):
        raise ValueError(f"on_locked must be 'skip', 'retry' or 'raise', not {on_locked!r}")
    wait = RETRY_WAIT if timeout is None and on_locked == "retry" else timeout

    def decorate(function: Callable[..., _R]) -> Callable[..., _R]:
        if issubclass(type(function), (Task, Proxy)):
            raise TypeError(
                f"@locked_task is above @shared_task/@app.task on {function!r}: put it "
                "underneath, so that Celery registers the locked function."
            )
        if inspect.iscoroutinefunction(function):
            raise TypeError(f"Celery runs sync task functions; {function!r} is async.")
        locked = LockedFunction(
            function,
            key,
            ttl=ttl,
            auto_renew=auto_renew,
            on_lost=on_lost,
            kind=LockKind.from_flags(shared=shared, limit=limit, reentrant=reentrant),
            label=label,
        )

        def run_locked(*args: Any, **kwargs: Any) -> Any:
            resource = locked.resource(args, kwargs)
            task = _running_task(run_locked)
            task_id = task.request.id if task is not None else None
            owner = owner_for_task(task_id, resource) if task_id else None
            with contextlib.ExitStack() as stack:
                # Only taking the task's lock is guarded: a LockNotAcquired from the
                # body (a lock it takes itself) fails the task as raised.
                try:
                    held: LockHandle = stack.enter_context(_take(locked, resource, owner, wait))
                except LockNotAcquired as error:
                    return _on_locked(on_locked, task, resource, error, min_countdown, args, kwargs)
                return locked.run(held, args, kwargs)

        return locked.wraps(run_locked)

    return decorate


def _take(locked: LockedFunction, resource: str, owner: str | None, wait: float | None) -> lock:
    """The run's lock: taken back at once when an earlier delivery of the same
    task holds it (its worker died), else with the wait."""
    if owner is not None and holds_own_lock(resource, owner):
        return locked.hold(resource, owner, None)
    return locked.hold(resource, owner, wait)


def _running_task(run_locked: Callable[..., Any]) -> Task[Any, Any] | None:
    """The task whose body is ``run_locked``, if a worker (or ``apply()``) runs it
    now; ``None`` for a direct call, also one made inside another task."""
    # current_task is a proxy: falsy outside a task, never None. (celery-types
    # types it as the Task itself, without the proxy's methods.)
    if not current_task:
        return None
    task: Task[Any, Any] = current_task._get_current_object()  # type: ignore[attr-defined]
    # Celery's task class keeps the registered function in __wrapped__ (a bound
    # method when bind=True).
    wrapped = getattr(task, "__wrapped__", None)
    if getattr(wrapped, "__func__", wrapped) is not run_locked or task.request.called_directly:
        return None
    return task


def _on_locked(
    policy: OnLocked,
    task: Task[Any, Any] | None,
    resource: str,
    error: LockNotAcquired,
    min_countdown: float,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if policy == "skip":
        name = task.name if task is not None else "(called directly)"
        return announce_skip(resource, name, task.request.id if task else None, args, kwargs)
    if policy == "retry" and task is not None:
        retries = task.request.retries or 0
        countdown = backoff(retries, min_countdown, resource)
        raise task.retry(countdown=countdown, exc=error)
    raise error


def throttled_task(
    key: str | Callable[..., str],
    rate: str | Rate,
    *,
    on_throttled: OnThrottled = "retry",
    using: str | None = None,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Run each call of the task function as one use of ``throttle(key, rate)``.

    ``key`` is a template filled from the task's arguments by name
    (``"email:{user_id}"``), or a function of them returning the key; ``rate``
    is the throttle's (``"10/m"``, or a name in ``DLOCK_THROTTLE_RATES``). The
    use is recorded before the body runs and counts also when it fails. When
    the rate allows no use now, ``on_throttled`` says what happens:

    - ``"retry"``: ``task.retry()`` with a countdown of the throttle's
      ``retry_after`` (when its oldest use leaves the window); the task's
      ``max_retries`` applies, after which ``Throttled`` is raised. Called
      directly, outside a worker, it raises ``Throttled``;
    - ``"skip"``: the run returns ``SKIPPED`` without running the body, and
      logs it with the task id and the time until the next use;
    - ``"raise"``: ``Throttled`` (the task fails).
    """
    if on_throttled not in ("skip", "retry", "raise"):
        raise ValueError(f"on_throttled must be 'skip', 'retry' or 'raise', not {on_throttled!r}")
    resolve_rate(rate)  # refuse a bad rate at import, not at the first run

    def decorate(function: Callable[..., _R]) -> Callable[..., _R]:
        if issubclass(type(function), (Task, Proxy)):
            raise TypeError(
                f"@throttled_task is above @shared_task/@app.task on {function!r}: put it "
                "underneath, so that Celery registers the throttled function."
            )
        if inspect.iscoroutinefunction(function):
            raise TypeError(f"Celery runs sync task functions; {function!r} is async.")
        name = ResourceName(key, function, what="throttle key")

        @functools.wraps(function)
        def run_throttled(*args: Any, **kwargs: Any) -> Any:
            decision = throttle(name.format(args, kwargs), rate, using=using).try_use()
            if decision:
                return function(*args, **kwargs)
            error = Throttled(decision.key, decision.rate, decision.retry_after)
            task = _running_task(run_throttled)
            if on_throttled == "skip":
                logger.info(
                    "Skipped task %s[%s]: %s",
                    task.name if task is not None else function.__qualname__,
                    task.request.id if task is not None else None,
                    error,
                )
                return SKIPPED
            if on_throttled == "retry" and task is not None:
                raise task.retry(countdown=decision.retry_after.total_seconds(), exc=error)
            raise error

        return run_throttled

    return decorate
