"""Enqueue-time de-duplication of ``locked_task(..., on_duplicate=...)``: the mark
of a queued task, a lease in the locks table (no Celery here: ``contrib.celery``
calls it from ``EnqueueOnce.apply_async`` and from the run).

An enqueue of a call whose lock is ``R`` takes the lock ``queued:R`` for the new
task id (its owner derived from the id as the run's is, its label the id), with
a ttl of ``queued_ttl`` plus the call's countdown. It is a duplicate when that
mark is held by another task id (a call queued and not yet running), or when
``R`` itself is held (a run). The run gives the mark up once it holds ``R``, or
when it ends without it, unless it retries: the retry's enqueue renewed the mark.
So from an enqueue to the end of its run, ``queued:R`` or ``R`` is held, and a
dead worker or a lost message leaves neither held past its ttl.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django_dlock.conf import conf
from django_dlock.contrib.task_locks import owner_for_task
from django_dlock.exceptions import DlockError, InvalidArgument
from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock
from django_dlock.validators import validate_label, validate_ttl

__all__ = ["QUEUED_PREFIX", "AlreadyQueued", "Deduplication", "OnDuplicate"]

OnDuplicate = Literal["raise", "skip"]

#: The start of a mark's resource name: ``queued:`` and the task's lock.
QUEUED_PREFIX = "queued:"


class AlreadyQueued(DlockError):
    """An enqueue of a ``locked_task(..., on_duplicate="raise")`` was refused: a
    call with the same lock is queued (``task_id`` is its id) or running
    (``running``; ``task_id`` is ``None``: a run holds ``resource``, except
    Django tasks, whose runs name their result id). Nothing was sent."""

    def __init__(
        self, task_name: str, resource: str, task_id: str | None, running: bool = False
    ) -> None:
        self.task_name = task_name
        self.resource = resource
        self.task_id = task_id
        self.running = running
        if task_id is None:
            what = "a run holds its lock" if running else "a call with its lock is queued or runs"
        else:
            what = f"task {task_id} runs" if running else f"task {task_id} is queued"
        super().__init__(f"{task_name} was not sent: {what} ({resource!r}).")

    def __reduce__(self) -> tuple[type[AlreadyQueued], tuple[str, str, str | None, bool]]:
        return (type(self), (self.task_name, self.resource, self.task_id, self.running))


@dataclass(frozen=True)
class Deduplication:
    """What ``on_duplicate`` asks of a locked task: a policy and the marks' ttl."""

    on_duplicate: OnDuplicate
    queued_ttl: float | None

    @classmethod
    def of(
        cls, on_duplicate: OnDuplicate | None, queued_ttl: float | None, kind: LockKind
    ) -> Deduplication | None:
        """The task's de-duplication, or ``None`` without ``on_duplicate``;
        ``ValueError`` for arguments that cannot work (at decoration)."""
        if on_duplicate is None:
            if queued_ttl is not None:
                raise ValueError(
                    "queued_ttl is the ttl of on_duplicate's marks: give on_duplicate."
                )
            return None
        if on_duplicate not in ("raise", "skip"):
            raise ValueError(f"on_duplicate must be None, 'raise' or 'skip', not {on_duplicate!r}")
        if kind.shared or kind.limit is not None:
            raise ValueError(
                "on_duplicate is for an exclusive lock: runs of a shared lock or a semaphore "
                "may overlap, so there is no one queued or running call to be a duplicate of."
            )
        if queued_ttl is not None:
            validate_ttl(queued_ttl)
        return cls(on_duplicate, queued_ttl)

    def claim(
        self, task_name: str, resource: str, task_id: str, delay: float, *, requeued: bool
    ) -> AlreadyQueued | None:
        """Take the mark of ``resource`` for ``task_id``, for ``queued_ttl`` plus
        ``delay`` (a countdown); the duplicate found instead, if any. A task that
        ``requeued`` itself (a retry) takes it when it can and is never refused."""
        mark = QUEUED_PREFIX + resource
        base = conf.DEFAULT_TTL if self.queued_ttl is None else self.queued_ttl
        ttl = min(base + max(delay, 0.0), conf.MAX_TTL)
        taken = DistributedLock.objects.acquire(
            mark, owner_for_task(task_id, mark), ttl, label=as_label(task_id)
        )
        if requeued:
            return None
        if taken is None:
            queued = DistributedLock.objects.holders(mark)
            return AlreadyQueued(task_name, resource, (queued[0].label or None) if queued else None)
        if DistributedLock.objects.holders(resource):
            self.release(resource, task_id)
            return AlreadyQueued(task_name, resource, None, running=True)
        return None

    def release(self, resource: str, task_id: str) -> None:
        """Give up ``task_id``'s mark of ``resource`` (nothing if it holds none)."""
        mark = QUEUED_PREFIX + resource
        DistributedLock.objects.release(mark, owner_for_task(task_id, mark))


def as_label(task_id: str) -> str:
    """The mark's public label: the task id, when it is a valid label (Celery's are)."""
    try:
        return validate_label(task_id)
    except InvalidArgument:
        return ""
