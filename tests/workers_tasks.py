"""The tasks of tests/test_contrib_tasks.py, and the db_worker processes that run them.

``python -c "from tests.workers_tasks import serve; serve()" ARGS`` runs django-tasks-db's
``db_worker`` with ARGS against the test database (its name in DLOCK_TEST_DB_NAME). Each
run appends a JSON line to the file that DLOCK_TEST_RUNS names.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import django
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
if os.environ.get("DLOCK_TEST_DB_NAME"):
    settings.DATABASES["default"]["NAME"] = os.environ["DLOCK_TEST_DB_NAME"]
django.setup()

from django_dlock.contrib.tasks import enqueue_once, locked_task, task_framework  # noqa: E402
from django_dlock.locking import LockHandle, lock  # noqa: E402

if TYPE_CHECKING:
    from django.tasks import task
else:
    task = task_framework().task  # django.tasks, or the backport on Django 5.2


def record(kind: str, key: str, **details: Any) -> None:
    path = os.environ.get("DLOCK_TEST_RUNS")
    if not path:
        return
    entry = {"kind": kind, "key": key, "pid": os.getpid(), **details}
    # One write of a short line to a file opened for appending: lines never interleave.
    with open(path, "a") as runs:
        runs.write(json.dumps(entry) + "\n")


@task(backend="db")
@locked_task("tasks:{key}", ttl=10, timeout=60, on_locked="raise")
def exclusive(key: str, hold: float, fencing_token: int) -> int:
    began = time.time()
    time.sleep(hold)
    record("exclusive", key, began=began, ended=time.time(), token=fencing_token)
    return fencing_token


@task(backend="db")
@locked_task("tasks:{key}", ttl=10, on_locked="skip")
def skipping(key: str, hold: float) -> str:
    began = time.time()
    time.sleep(hold)
    record("skipping", key, began=began, ended=time.time())
    return "ran"


@task(backend="db")
@locked_task("tasks:{key}", ttl=10, timeout=0, on_locked="defer", max_attempts=3, min_delay=0.2)
def deferring(key: str, held: LockHandle) -> list[Any]:
    record("deferring", key, began=time.time(), token=held.fencing_token)
    return [held.resource, held.fencing_token]


@task(backend="db")
@locked_task("tasks:{key}", ttl=10, timeout=0, on_locked="defer", max_attempts=200, min_delay=0.2)
def deferring_patiently(key: str, held: LockHandle) -> list[Any]:
    """``deferring`` with attempts enough for a loaded machine's slow release."""
    record("deferring_patiently", key, began=time.time(), token=held.fencing_token)
    return [held.resource, held.fencing_token]


@task(backend="db")
@locked_task("tasks:{key}", ttl=10, timeout=0, on_locked="defer", max_attempts=200, min_delay=0.2)
def deferring_work(key: str, hold: float) -> str:
    began = time.time()
    time.sleep(hold)
    record("deferring_work", key, began=began, ended=time.time())
    return "ran"


@task(backend="db", takes_context=True)
@locked_task("tasks:{key}", ttl=10, timeout=30, on_locked="defer")
def with_context(context: Any, key: str, fencing_token: int) -> list[Any]:
    return [context.attempt, fencing_token]


@task(backend="db")
@locked_task("tasks:{key}", ttl=3, on_lost="stop")
def stoppable(key: str, hold: float) -> str:
    record("stoppable", key, began=time.time())
    try:
        time.sleep(hold)
    except BaseException as error:
        record("stopped", key, at=time.time(), error=type(error).__name__, message=str(error))
        raise
    return "slept"


# -- enqueue once (on_duplicate) ---------------------------------------------------------


@enqueue_once
@task(backend="db")
@locked_task("once:{key}", ttl=10, on_duplicate="return", queued_ttl=60)
def once_returning(key: str, gate: bool) -> str:
    record("once_returning", key, began=time.time())
    if gate:  # runs until the test creates the file DLOCK_TEST_RUNS + ".gate"
        opened = os.environ["DLOCK_TEST_RUNS"] + ".gate"
        deadline = time.monotonic() + 60
        while not os.path.exists(opened) and time.monotonic() < deadline:
            time.sleep(0.02)
    return "ran"


@enqueue_once
@task(backend="db")
@locked_task("once:{key}", ttl=10, on_duplicate="raise")
def once_raising(key: str) -> str:
    return "ran"


@enqueue_once
@task(backend="db")
@locked_task("once:{key}", ttl=10, on_duplicate="skip")
def once_skipping(key: str) -> str:
    return "ran"


@enqueue_once
@task(backend="db")
@locked_task(
    "once:{key}", ttl=10, timeout=0, on_locked="defer", max_attempts=200, min_delay=0.2,
    on_duplicate="return",
)  # fmt: skip
def once_deferring(key: str) -> str:
    record("once_deferring", key, began=time.time())
    return "ran"


# -- ImmediateBackend (the default backend), in the test process ------------------------


@enqueue_once
@task()
@locked_task("once-immediate:{key}", ttl=10, on_duplicate="raise")
def once_immediate(key: str) -> str:
    return "ran"


@enqueue_once
@task()
@locked_task("once-immediate:{key}", ttl=10, on_duplicate="raise")
async def once_immediate_async(key: str, held: LockHandle) -> str:
    return held.label


@task()
@locked_task("once-immediate:{key}", ttl=10, on_duplicate="skip")
def once_unwrapped(key: str) -> str:
    return "ran"


@task()
@locked_task("immediate:{key}", ttl=10)
def immediate(key: str, fencing_token: int) -> int:
    return fencing_token


@task()
@locked_task("immediate:{key}", ttl=10, timeout=0, on_locked="defer")
def immediate_defer(key: str) -> str:
    return "ran"


@task()
@locked_task("immediate:{key}", ttl=0.6)
def force_released(key: str, held: LockHandle) -> bool:
    """Its lock is force-released under it; it waits until a renewal finds that out."""
    from django_dlock.models import DistributedLock

    DistributedLock.objects.force_release(held.resource)
    return held.lost.wait(5)


@task()
@locked_task("immediate:{key}", ttl=10, on_locked="skip")
async def immediate_async(key: str, held: LockHandle) -> list[Any]:
    from django_dlock.models import DistributedLock

    held_now = DistributedLock.objects.active().filter(resource=held.resource).aexists()
    return [held.resource, await held_now]


@task()
@lock("order:{order_id}", ttl=10)
def ship(order_id: int) -> list[str]:
    from django_dlock.models import DistributedLock

    return list(DistributedLock.objects.active().values_list("resource", flat=True))


def serve() -> None:
    """Run db_worker with the command line's arguments, django-dlock's INFO lines shown."""
    import logging

    from django.core.management import call_command

    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")

    call_command("db_worker", *sys.argv[1:])
