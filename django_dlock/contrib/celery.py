"""Celery tasks that run under a lock. The only module of django-dlock that imports Celery.

```python
from celery import shared_task
from django_dlock.contrib.celery import locked_task

@shared_task(max_retries=10)
@locked_task("report:{month}", ttl=300, on_locked="retry")
def build_report(month: str, fencing_token: int) -> None:
    ...
```

It never creates a Celery app: it wraps the function that your app's
``@app.task``/``@shared_task`` registers.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from celery import current_task

from django_dlock.backends.clock import DatabaseNow, time_left
from django_dlock.conf import conf
from django_dlock.exceptions import LockNotAcquired
from django_dlock.locking import lock
from django_dlock.models import DistributedLock

if TYPE_CHECKING:
    from celery import Task

__all__ = ["locked_task"]

logger = logging.getLogger("django_dlock.celery")

_F = TypeVar("_F", bound=Callable[..., Any])

OnLocked = Literal["skip", "retry", "raise"]

#: The parameter a task names to be given the lock's fencing token.
FENCING_TOKEN_ARG = "fencing_token"  # noqa: S105 - a parameter name


def locked_task(
    key: str | Callable[..., str],
    *,
    ttl: float | None = None,
    timeout: float | None = None,
    on_locked: OnLocked = "skip",
    auto_renew: bool = True,
    min_countdown: float = 1.0,
) -> Callable[[_F], _F]:
    """Run each call of the task function holding the lock named by ``key``.

    ``key`` is a ``str.format`` template filled with the task's arguments by
    name (``"report:{month}"``), or a function of those arguments that returns
    the resource. The lock is taken with ``ttl``, waiting up to ``timeout``
    seconds (``None``: one try), renewed every ttl/3 while the task runs
    (``auto_renew``), and released when it returns or raises. A task function
    with a ``fencing_token`` parameter gets the lock's token there.

    When another owner holds the lock, ``on_locked`` says what happens:

    - ``"skip"``: log it and return ``None`` without running the task;
    - ``"retry"``: ``task.retry()`` with a countdown until the holder's lock
      expires (at least ``min_countdown`` seconds, plus up to 10% jitter);
      the task's ``max_retries`` applies, after which ``LockNotAcquired`` is
      raised;
    - ``"raise"``: raise ``LockNotAcquired`` (the task fails).

    If the lock is lost while the task runs (renewal failed), the task ends by
    raising ``LockExpired``/``LockNotOwned`` (see ``lock()``).
    """
    if on_locked not in ("skip", "retry", "raise"):
        raise ValueError(f"on_locked must be 'skip', 'retry' or 'raise', not {on_locked!r}")

    def decorate(function: _F) -> _F:
        signature = inspect.signature(function)
        wants_token = FENCING_TOKEN_ARG in signature.parameters

        @functools.wraps(function)
        def run_locked(*args: Any, **kwargs: Any) -> Any:
            resource = _resource(key, signature, args, kwargs)
            with contextlib.ExitStack() as stack:
                # Only taking the task's lock is guarded: a LockNotAcquired from the
                # task's own code (a lock it takes itself) fails the task as raised.
                try:
                    held = stack.enter_context(
                        lock(resource, ttl=ttl, timeout=timeout, auto_renew=auto_renew)
                    )
                except LockNotAcquired as error:
                    return _on_locked(on_locked, resource, error, min_countdown)
                if wants_token:
                    kwargs[FENCING_TOKEN_ARG] = held.fencing_token
                return function(*args, **kwargs)

        return run_locked  # type: ignore[return-value]

    return decorate


def _resource(
    key: str | Callable[..., str],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    if callable(key):
        return key(*args, **kwargs)
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    arguments = {name: value for name, value in bound.arguments.items() if name != "self"}
    return key.format(**arguments)


def _on_locked(
    policy: OnLocked, resource: str, error: LockNotAcquired, min_countdown: float
) -> Any:
    # current_task is a proxy: falsy outside a task, never None. (celery-types
    # types it as the Task itself, without the proxy's methods.)
    task: Task[Any, Any] | None = (
        current_task._get_current_object()  # type: ignore[attr-defined]
        if current_task
        else None
    )
    name = task.name if task is not None else "(not a task)"
    if policy == "skip":
        logger.info("Skipped task %s: the lock on %r is held by another owner.", name, resource)
        return None
    if policy == "retry" and task is not None and task.request.id is not None:
        countdown = _countdown(resource, min_countdown)
        logger.info(
            "Retrying task %s in %.1f s: the lock on %r is held by another owner.",
            name,
            countdown,
            resource,
        )
        raise task.retry(countdown=countdown, exc=error)
    raise error


def _countdown(resource: str, minimum: float) -> float:
    """Seconds until the holder's lock on ``resource`` expires, with jitter."""
    row = (
        DistributedLock.objects.using(conf.DATABASE)
        .active()
        .filter(resource=resource)
        .annotate(db_now=DatabaseNow())
        .values_list("expires_at", "db_now")
        .first()
    )
    left = time_left(*row) if row else 0.0
    left = max(left, minimum)
    return math.ceil(left * 10 * (1 + random.uniform(0, 0.1))) / 10  # noqa: S311 - jitter
