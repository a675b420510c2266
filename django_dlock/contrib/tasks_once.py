"""Enqueue-time de-duplication for Django's tasks framework: what
``contrib.celery``'s ``on_duplicate`` does for Celery (see ``enqueue_once``
there for the marks), for ``task.enqueue()``.

```python
@enqueue_once
@task()
@locked_task("reindex:{site_id}", ttl=60, on_duplicate="return", queued_ttl=600)
def reindex(site_id: int) -> None: ...
```

Celery's task id is chosen before the message is sent, so its mark is owned by
that id from the start. The framework's backend chooses the result id as it
enqueues: the mark is first taken by an owner of the enqueue's own, and handed
to the result id once the backend answered (``_settle``). A run takes its lock
as the owner derived from its result id, labelled with the id, so that an
enqueue that finds the lock held can tell a run of the task (and which) from
another holder.
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_dlock.conf import conf
from django_dlock.contrib.enqueue_once import QUEUED_PREFIX, AlreadyQueued, Deduplication, as_label
from django_dlock.contrib.task_locks import LockedFunction, owner_for_task
from django_dlock.contrib.tasks_framework import ATTEMPT_ARG, task_framework
from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock

if TYPE_CHECKING:
    from django.tasks import Task, TaskResult

    from django_dlock.rules import Hold

__all__ = ["EnqueueOnceTask", "OnDuplicate", "TaskDeduplication", "enqueue_once"]

logger = logging.getLogger("django_dlock.tasks")

OnDuplicate = Literal["raise", "skip", "return"]

_DEDUPLICATION = "_dlock_deduplication"
_framework = task_framework().__name__
_base = importlib.import_module(f"{_framework}.base")
_TaskBase: Any = _base.Task
_exceptions = importlib.import_module(f"{_framework}.exceptions")
# What asking the backend for a result that is not this task's may raise.
_NOT_A_RESULT = (
    _exceptions.TaskResultDoesNotExist,
    _exceptions.TaskResultMismatch,
    ValidationError,
    ValueError,
)
_READY = _base.TaskResultStatus.READY

# The result id of the run whose deferral enqueues now (``requeueing``): that
# enqueue is the same call queued again, never a duplicate, and takes its mark.
_requeued: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "django_dlock_requeued", default=None
)


@contextmanager
def requeueing(result_id: str) -> Iterator[None]:
    """The enqueues of the block queue again the call of ``result_id`` (a deferral)."""
    token = _requeued.set(result_id)
    try:
        yield
    finally:
        _requeued.reset(token)


@dataclasses.dataclass(frozen=True)
class TaskDeduplication:
    """What ``locked_task(..., on_duplicate=...)`` asks of a Django task."""

    on_duplicate: OnDuplicate
    queued_ttl: float | None

    @classmethod
    def of(
        cls, on_duplicate: OnDuplicate | None, queued_ttl: float | None, kind: LockKind
    ) -> TaskDeduplication | None:
        """The task's de-duplication, or ``None`` without ``on_duplicate``;
        ``ValueError`` for arguments that cannot work (at decoration)."""
        if on_duplicate not in (None, "raise", "skip", "return"):
            raise ValueError(
                f"on_duplicate must be None, 'raise', 'skip' or 'return', not {on_duplicate!r}"
            )
        # The checks Celery's on_duplicate has (kind, queued_ttl), once.
        policy = "raise" if on_duplicate == "return" else on_duplicate
        if Deduplication.of(policy, queued_ttl, kind) is None or on_duplicate is None:
            return None
        return cls(on_duplicate, queued_ttl)

    def ttl(self, delay: float) -> float:
        """A mark's ttl: ``queued_ttl`` (default ``DLOCK_DEFAULT_TTL``) plus the delay."""
        base = conf.DEFAULT_TTL if self.queued_ttl is None else self.queued_ttl
        return min(base + max(delay, 0.0), conf.MAX_TTL)


class EnqueueOnceTask(_TaskBase):  # type: ignore[misc]
    """The framework's ``Task`` whose ``enqueue()`` refuses a duplicate (``enqueue_once``)."""

    __slots__ = ()

    def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        return _enqueue(self, args, kwargs)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(_enqueue)(self, args, kwargs)


def enqueue_once(task: Task[Any, Any]) -> EnqueueOnceTask:
    """The task (above ``@task()``), its enqueues de-duplicated as its
    ``locked_task(..., on_duplicate=...)`` says. ``TypeError`` without it;
    ``ValueError`` for ``"return"`` on a backend that keeps no results."""
    if not isinstance(task, _TaskBase):
        raise TypeError(f"@enqueue_once goes above @task(), on the task: {task!r} is no task.")
    found = getattr(task.func, _DEDUPLICATION, None)
    if found is None:
        raise TypeError(
            f"@enqueue_once on {task.name}: its function has no "
            "@locked_task(..., on_duplicate='raise', 'skip' or 'return') underneath @task()."
        )
    if found[0].on_duplicate == "return" and not task.get_backend().supports_get_result:
        raise ValueError(
            f"on_duplicate='return' on {task.name}: its backend {task.backend!r} keeps no "
            "results (supports_get_result) to return; use 'raise' or 'skip'."
        )
    fields = dataclasses.fields(task)
    return EnqueueOnceTask(
        **{field.name: getattr(task, field.name) for field in fields if field.init}
    )


def deduplicate(
    wrapped: Callable[..., Any], found: TaskDeduplication, locked: LockedFunction
) -> None:
    """Mark a ``locked_task`` function for ``enqueue_once``."""
    setattr(wrapped, _DEDUPLICATION, (found, locked))


def run_marks(
    found: TaskDeduplication | None, result: TaskResult[..., Any] | None, resource: str
) -> tuple[str | None, str, Callable[[], None]]:
    """For the run of ``result``: its lock's owner and label, and what gives its
    mark up (nothing for a direct call or without ``on_duplicate``)."""
    if found is None or result is None:
        return None, "", lambda: None
    if not isinstance(result.task, EnqueueOnceTask):
        raise TypeError(
            f"{result.task.name} has locked_task(on_duplicate=...) but is not an enqueue_once "
            "task: put @enqueue_once above @task(), else its enqueues are never de-duplicated."
        )
    result_id = str(result.id)
    mark = QUEUED_PREFIX + resource
    owner = owner_for_task(result_id, mark)
    return (
        owner_for_task(result_id, resource),
        as_label(result_id),
        lambda: _release(mark, owner),
    )


def _release(mark: str, owner: str) -> None:
    DistributedLock.objects.release(mark, owner)


def _enqueue(task: EnqueueOnceTask, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    found, locked = getattr(task.func, _DEDUPLICATION)
    call = {name: value for name, value in kwargs.items() if name != ATTEMPT_ARG}
    resource = locked.resource(args, call)
    mark = QUEUED_PREFIX + resource
    delay = (task.run_after - timezone.now()).total_seconds() if task.run_after else 0.0
    requeued = _requeued.get()
    if requeued is not None:  # a deferral: hand the mark of the run to its next attempt
        result = _TaskBase.enqueue(task, *args, **kwargs)
        _release(mark, owner_for_task(requeued, mark))
        _settle(found, task, mark, result, delay)
        return result
    provisional = f"dlock-enqueue-{secrets.token_hex(16)}"
    duplicate = _claim(found, task, resource, provisional, delay)
    if duplicate is not None:
        return _refuse(found, task, duplicate)
    try:
        result = _TaskBase.enqueue(task, *args, **kwargs)
    finally:
        _release(mark, provisional)
    _settle(found, task, mark, result, delay)
    return result


def _claim(
    found: TaskDeduplication, task: EnqueueOnceTask, resource: str, owner: str, delay: float
) -> AlreadyQueued | None:
    """Take the mark of ``resource`` for the enqueue's ``owner``; the duplicate found instead."""
    mark = QUEUED_PREFIX + resource
    if DistributedLock.objects.acquire(mark, owner, found.ttl(delay)) is None:
        queued = DistributedLock.objects.holders(mark)
        return AlreadyQueued(task.name, resource, _result_id(queued, mark))
    running = DistributedLock.objects.holders(resource)
    if running:
        _release(mark, owner)
        return AlreadyQueued(task.name, resource, _result_id(running, resource), running=True)
    return None


def _result_id(holds: list[Hold], resource: str) -> str | None:
    """The result id of the run or queued call that holds ``resource``, when the
    holder is one (its owner is the one derived from its label, the id)."""
    for hold in holds:
        if hold.label and hold.owner == owner_for_task(hold.label, resource):
            return hold.label
    return None


def _settle(
    found: TaskDeduplication, task: EnqueueOnceTask, mark: str, result: Any, delay: float
) -> None:
    """Give the mark to the queued ``result``, unless its run began (or ended)
    meanwhile: a run gives up its mark once it holds its lock, and this one may
    have looked before the mark was its own."""
    backend = task.get_backend()
    if not backend.supports_get_result and result.status != _READY:
        return  # it ran as it was enqueued (an immediate backend): nothing is queued
    result_id = str(result.id)
    owner = owner_for_task(result_id, mark)
    DistributedLock.objects.acquire(mark, owner, found.ttl(delay), label=as_label(result_id))
    if backend.supports_get_result:
        result = backend.get_result(result_id)
    if result.status != _READY:
        _release(mark, owner)


def _refuse(found: TaskDeduplication, task: EnqueueOnceTask, duplicate: AlreadyQueued) -> Any:
    """What the enqueue of a duplicate answers, as ``on_duplicate`` says."""
    if found.on_duplicate == "skip":
        logger.info("%s", duplicate)
        return None
    if found.on_duplicate == "return" and duplicate.task_id is not None:
        try:
            return task.get_result(duplicate.task_id)
        except _NOT_A_RESULT:
            pass  # another task's call with the same lock: nothing of this task to return
    raise duplicate
