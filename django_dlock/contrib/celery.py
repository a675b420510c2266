"""Celery tasks that run under a lock, and ``LeaderScheduler`` (from ``contrib.beat``), a
failover-safe beat. It and ``contrib.beat``/``beat_runs`` are the only modules importing Celery.

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
``locked_task(..., on_duplicate="raise")`` with ``@shared_task(base=EnqueueOnce)``
refuses to send a call whose lock is queued or running already.

It never creates a Celery app: it wraps the function that your app's
``@app.task``/``@shared_task`` registers (so it goes underneath them). See
docs/celery.md.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from django_dlock.contrib import extra_missing

try:
    import celery  # noqa: F401 - the imports below need it
except ModuleNotFoundError as error:
    raise extra_missing(error, "celery", __name__, 'pip install "django-dlock[celery]"') from None

from celery import Task, current_task, uuid
from celery.exceptions import Retry
from celery.local import Proxy
from celery.result import AsyncResult

from django_dlock.contrib.beat import LeaderScheduler
from django_dlock.contrib.enqueue_once import AlreadyQueued, Deduplication, OnDuplicate
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
    "AlreadyQueued",
    "EnqueueOnce",
    "LeaderScheduler",
    "locked_task",
    "task_skipped",
    "throttled_task",
]

logger = logging.getLogger("django_dlock.tasks")

_R = TypeVar("_R")

OnLocked = Literal["skip", "retry", "raise"]
OnThrottled = Literal["skip", "retry", "raise"]

# The attribute of a locked task function that holds its ``Deduplication``
# (and its ``LockedFunction``) for ``EnqueueOnce``.
_DEDUPLICATION = "_dlock_deduplication"


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
    on_duplicate: OnDuplicate | None = None,
    queued_ttl: float | None = None,
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

    ``on_duplicate`` (with ``@shared_task(base=EnqueueOnce)``) refuses to send
    a call while one with the same lock is queued or running: ``"raise"``
    raises ``AlreadyQueued`` at the caller, ``"skip"`` returns ``None`` from
    ``apply_async()``/``delay()``. A queued call is marked for ``queued_ttl``
    seconds (default ``DLOCK_DEFAULT_TTL``) plus its countdown; see
    ``contrib.enqueue_once`` and docs/celery.md.
    """
    if on_locked not in ("skip", "retry", "raise"):
        raise ValueError(f"on_locked must be 'skip', 'retry' or 'raise', not {on_locked!r}")
    wait = RETRY_WAIT if timeout is None and on_locked == "retry" else timeout
    kind = LockKind.from_flags(shared=shared, limit=limit, reentrant=reentrant)
    deduplication = Deduplication.of(on_duplicate, queued_ttl, kind)

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
            kind=kind,
            label=label,
        )

        def run_locked(*args: Any, **kwargs: Any) -> Any:
            resource = locked.resource(args, kwargs)
            task = _running_task(run_locked)
            task_id = task.request.id if task is not None else None
            owner = owner_for_task(task_id, resource) if task_id else None
            unmark = _unmark(deduplication, task, resource)
            with contextlib.ExitStack() as stack:
                # Only taking the task's lock is guarded: a LockNotAcquired from the
                # body (a lock it takes itself) fails the task as raised.
                try:
                    held: LockHandle = stack.enter_context(_take(locked, resource, owner, wait))
                except LockNotAcquired as error:
                    with _unless_retried(unmark):
                        return _on_locked(
                            on_locked, task, resource, error, min_countdown, args, kwargs
                        )
                unmark()  # from now on the lock itself says that a run is on
                return locked.run(held, args, kwargs)

        wrapped = locked.wraps(run_locked)
        if deduplication is not None:
            setattr(wrapped, _DEDUPLICATION, (deduplication, locked))
        return wrapped

    return decorate


def _take(locked: LockedFunction, resource: str, owner: str | None, wait: float | None) -> lock:
    """The run's lock: taken back at once when an earlier delivery of the same
    task holds it (its worker died), else with the wait."""
    if owner is not None and holds_own_lock(resource, owner):
        return locked.hold(resource, owner, None)
    return locked.hold(resource, owner, wait)


def _unmark(
    deduplication: Deduplication | None, task: Task[Any, Any] | None, resource: str
) -> Callable[[], None]:
    """What gives up the mark of the running task's enqueue (a no-op without one)."""
    if deduplication is None or task is None or not task.request.id:
        return lambda: None
    if not isinstance(task, EnqueueOnce):
        raise TypeError(
            f"{task.name} has locked_task(on_duplicate=...) but is not an EnqueueOnce: "
            "declare it with @shared_task(base=EnqueueOnce) (or @app.task(base=EnqueueOnce)), "
            "else its enqueues are never de-duplicated."
        )
    task_id: str = task.request.id
    return lambda: deduplication.release(resource, task_id)


@contextlib.contextmanager
def _unless_retried(unmark: Callable[[], None]) -> Iterator[None]:
    """Run ``unmark`` when the block ends, unless it ends in a retry: the retry's
    enqueue renewed the mark, for the task queued again."""
    try:
        yield
    except Retry:
        raise
    except BaseException:
        unmark()
        raise
    unmark()


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
        countdown = backoff(retries, min_countdown, error)
        raise task.retry(countdown=countdown, exc=error)
    raise error


class EnqueueOnce(Task):  # type: ignore[type-arg]
    """The task class of a ``locked_task(..., on_duplicate=...)``: its
    ``apply_async()`` (and ``delay()``, and a retry's) marks the call as queued,
    or refuses it when a call with the same lock is queued or running."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is None:  # a class between EnqueueOnce and the tasks
            return
        function = run.__func__ if isinstance(run, staticmethod) else run
        if not hasattr(function, _DEDUPLICATION):
            raise TypeError(
                f"base=EnqueueOnce on {cls.__name__}: its function must be decorated with "
                "@locked_task(..., on_duplicate='raise' or 'skip') underneath the task decorator."
            )
        cls._dlock_bound = not isinstance(run, staticmethod)

    _dlock_bound = False

    def apply_async(  # type: ignore[override]
        self,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
        *more: Any,
        **options: Any,
    ) -> AsyncResult[Any] | None:
        deduplication, locked = getattr(self.run, _DEDUPLICATION)
        call_args = (self, *(args or ())) if self._dlock_bound else tuple(args or ())
        resource = locked.resource(call_args, dict(kwargs or {}))
        # Celery's retry sends the running task again under its own id.
        requeued = task_id is not None and task_id == self.request.id
        task_id = task_id or uuid()
        delay = _delay(options.get("countdown"), options.get("eta"))
        duplicate = deduplication.claim(self.name, resource, task_id, delay, requeued=requeued)
        if duplicate is not None:
            if deduplication.on_duplicate == "raise":
                raise duplicate
            logger.info("%s", duplicate)  # on_duplicate="skip"
            return None
        try:
            return super().apply_async(args, kwargs, task_id, *more, **options)
        except BaseException:
            deduplication.release(resource, task_id)
            raise

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult[Any] | None:  # type: ignore[override]
        """``apply_async(args, kwargs)``: ``None`` when ``on_duplicate="skip"`` refused it."""
        return self.apply_async(args, kwargs)


def _delay(countdown: float | None, eta: datetime | str | None) -> float:
    """Seconds until a call sent with ``countdown`` or ``eta`` is due (0: now)."""
    if countdown:
        return float(countdown)
    if isinstance(eta, str):
        eta = datetime.fromisoformat(eta)
    if isinstance(eta, datetime):
        due = eta if eta.tzinfo else eta.replace(tzinfo=UTC)
        return (due - datetime.now(UTC)).total_seconds()
    return 0.0


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
