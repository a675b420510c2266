"""``contrib.tasks``'s enqueue-time de-duplication (``on_duplicate`` with ``@enqueue_once``):
the database backend of django-tasks-db, with real ``db_worker`` processes where calls run,
and the ImmediateBackend in this process."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django_tasks_db")

from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from django_dlock.contrib.tasks import AlreadyQueued, enqueue_once, locked_task, task_framework
from django_dlock.models import DistributedLock
from tests.docs_utils import example
from tests.task_processes import DbWorkers, finished
from tests.utils import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects
framework = task_framework()
Status = framework.TaskResultStatus


def test_return_gives_the_queued_call_and_a_new_call_once_it_ran(db_workers: DbWorkers) -> None:
    from tests.workers_tasks import once_returning

    first = once_returning.enqueue("a", False)
    again = once_returning.enqueue("a", False)
    other = once_returning.enqueue("b", False)
    assert again.id == first.id and again.status == Status.READY
    assert other.id != first.id
    assert [hold.label for hold in Locks.holders("queued:once:a")] == [str(first.id)]
    db_workers.start(1)
    assert finished(first).return_value == "ran"
    finished(other)
    assert sorted(run["key"] for run in db_workers.runs("once_returning")) == ["a", "b"]
    assert not Locks.holders("queued:once:a") and not Locks.holders("once:a")
    third = once_returning.enqueue("a", False)  # the run ended: not a duplicate
    assert third.id != first.id
    assert finished(third).return_value == "ran"


def test_return_gives_the_running_call(db_workers: DbWorkers) -> None:
    from tests.workers_tasks import once_returning

    first = once_returning.enqueue("r", True)
    db_workers.start(1)
    wait_for(lambda: db_workers.runs("once_returning"), 60, "the run to begin")
    [hold] = Locks.holders("once:r")
    assert hold.label == str(first.id)
    assert not Locks.holders("queued:once:r")  # the run gave its mark up
    again = once_returning.enqueue("r", True)
    assert again.id == first.id and again.status == Status.RUNNING
    Path(f"{db_workers.runs_file}.gate").touch()
    assert finished(first).return_value == "ran"
    assert len(db_workers.runs("once_returning")) == 1


def test_a_deferred_call_takes_the_mark_over(db_workers: DbWorkers) -> None:
    from django_dlock.contrib.tasks import deferred_to
    from tests.workers_tasks import once_deferring

    first = once_deferring.enqueue("g")
    Locks.acquire("once:g", "someone-else", ttl=60)  # taken after the enqueue: the run defers
    db_workers.start(1)
    assert deferred_to(finished(first).return_value) is not None
    again = once_deferring.enqueue("g")  # the deferred call (or a later deferral of it)
    assert again.id != first.id
    assert once_deferring.get_result(again.id).kwargs["dlock_attempt"] >= 2
    assert Locks.release("once:g", "someone-else").value == "released"
    outcome = finished(once_deferring.get_result(again.id)).return_value
    while (next_id := deferred_to(outcome)) is not None:
        outcome = finished(once_deferring.get_result(next_id)).return_value
    assert outcome == "ran"
    assert len(db_workers.runs("once_deferring")) == 1


def test_a_run_that_began_before_the_mark_was_handed_over_leaves_no_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_tasks_db.models import DBTaskResult

    from django_dlock.contrib import tasks_once
    from tests.workers_tasks import once_raising

    backend_enqueue = tasks_once._TaskBase.enqueue

    def taken_at_once(task: Any, *args: Any, **kwargs: Any) -> Any:
        result = backend_enqueue(task, *args, **kwargs)
        # A worker claims it before the enqueue hands the mark over: its run looked for a
        # mark of its own to give up, and found none yet.
        DBTaskResult.objects.filter(id=result.id).update(status="RUNNING")
        return result

    monkeypatch.setattr(tasks_once._TaskBase, "enqueue", taken_at_once)
    once_raising.enqueue("j")
    assert not Locks.holders("queued:once:j")


def test_raise_and_skip_name_the_queued_or_running_call() -> None:
    from tests.workers_tasks import once_raising, once_returning, once_skipping

    first = once_raising.enqueue("c")
    with pytest.raises(AlreadyQueued) as refused:
        once_raising.enqueue("c")
    assert (refused.value.task_id, refused.value.running) == (str(first.id), False)
    assert f"task {first.id} is queued" in str(refused.value)
    assert once_skipping.enqueue("c") is None  # another task, the same lock
    with pytest.raises(AlreadyQueued):  # "return": the queued call is another task's
        once_returning.enqueue("c", False)
    Locks.acquire("once:d", "someone-else", ttl=30, label="web-3")
    with pytest.raises(AlreadyQueued) as refused:
        once_raising.enqueue("d")
    assert (refused.value.task_id, refused.value.running) == (None, True)
    with pytest.raises(AlreadyQueued):  # "return": the holder is no call of this task
        once_returning.enqueue("d", False)
    assert not Locks.holders("queued:once:d")  # each refusal gave its mark back


def test_the_immediate_backend_runs_each_call_and_leaves_no_mark() -> None:
    from tests.workers_tasks import once_immediate

    assert once_immediate.enqueue("e").return_value == "ran"
    assert once_immediate.enqueue("e").return_value == "ran"
    assert not Locks.active().filter(resource__startswith="queued:").exists()
    Locks.acquire("once-immediate:e", "someone-else", ttl=30)
    with pytest.raises(AlreadyQueued):
        once_immediate.enqueue("e")


def test_aenqueue_and_an_async_task() -> None:
    from tests.workers_tasks import once_immediate_async, once_raising

    async def enqueue() -> None:
        try:
            first = await once_raising.aenqueue("h")
            with pytest.raises(AlreadyQueued) as refused:
                await once_raising.aenqueue("h")
            assert refused.value.task_id == str(first.id)
            result = await once_immediate_async.aenqueue("i")
            assert result.return_value == str(result.id)  # the run's lock is labelled with its id
        finally:  # the connection of sync_to_async's thread, which the test database outlives
            await sync_to_async(connections.close_all)()

    asyncio.run(enqueue())
    assert not Locks.active().filter(resource__startswith="queued:once-immediate").exists()


def test_on_duplicate_without_enqueue_once_fails_each_run() -> None:
    from tests.workers_tasks import once_unwrapped

    result = once_unwrapped.enqueue("f")
    assert result.status == Status.FAILED
    assert "put @enqueue_once above @task()" in result.errors[0].traceback


def plain(key: str) -> None: ...


def returning(key: str) -> None: ...


def test_what_cannot_work_is_refused_when_the_task_is_made() -> None:
    task = framework.task
    with pytest.raises(ValueError, match="'raise', 'skip' or 'return'"):
        locked_task("k:{key}", on_duplicate="again")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exclusive lock"):
        locked_task("k:{key}", shared=True, on_duplicate="return")
    with pytest.raises(ValueError, match="queued_ttl"):
        locked_task("k:{key}", queued_ttl=5)
    with pytest.raises(TypeError, match="no @locked_task"):
        enqueue_once(task()(plain))
    with pytest.raises(TypeError, match="is no task"):
        enqueue_once(plain)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keeps no results"):  # the ImmediateBackend
        enqueue_once(task()(locked_task("k:{key}", on_duplicate="return")(returning)))


def test_the_docs_example(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page imports django.tasks (Django 6.0+); on 5.2 that is the backport.
    monkeypatch.setitem(sys.modules, "django.tasks", framework)
    # A module of its own, which the backend imports the task from by its path.
    page, code = example("enqueue once")
    module = types.ModuleType("docs_enqueue_once")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    database = {"BACKEND": "django_tasks_db.DatabaseBackend"}
    with override_settings(TASKS={"default": database}):
        exec(compile(code, page, "exec"), module.__dict__)  # noqa: S102 - our docs
    assert module.again.id == module.first.id
    assert [hold.label for hold in Locks.holders("queued:reindex:7")] == [str(module.first.id)]
