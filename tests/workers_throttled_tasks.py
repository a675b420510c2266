"""The throttled tasks of tests/test_throttles_tasks.py: on the ``db`` backend for
db_worker processes (``tests.workers_tasks.serve``), and on the ImmediateBackend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_dlock.contrib.tasks import task_framework, throttled_task

if TYPE_CHECKING:
    from django.tasks import task
else:
    task = task_framework().task  # django.tasks, or the backport on Django 5.2


@task(backend="db")
@throttled_task("tasks:{key}", rate="1/s", max_attempts=20)
def deferring(key: str) -> str:
    """The database's time of this run's use (the key's one slot holds it now)."""
    from django_dlock.models import ThrottleSlot

    used_at = ThrottleSlot.objects.get(key=f"tasks:{key}").used_at
    assert used_at is not None
    return used_at.isoformat()


@task()
@throttled_task("immediate:{key}", rate="1/m", on_throttled="skip")
def skipping(key: str) -> str:
    return "ran"


@task()
@throttled_task("immediate:{key}", rate="1/m", on_throttled="raise")
def raising(key: str) -> str:
    return "ran"


@task()
@throttled_task("immediate:{key}", rate="1/m")
def deferring_immediately(key: str) -> str:
    return "ran"


@task()
@throttled_task("immediate:{key}", rate="1/m", on_throttled="skip")
async def skipping_async(key: str) -> str:
    return "ran"
