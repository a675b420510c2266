"""``django_dlock.contrib.tasks`` with Django's tasks framework: real ``db_worker``
processes (django-tasks-db) on the test database, and the ImmediateBackend in this process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django_tasks_db")

from django.db import transaction

from django_dlock.exceptions import LockTransactionError
from django_dlock.models import DistributedLock
from tests.task_processes import DbWorkers, finished, overlaps
from tests.utils import import_without, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
Locks = DistributedLock.objects


def test_tasks_on_two_keys_across_four_db_workers_never_overlap(db_workers: DbWorkers) -> None:
    from tests.workers_tasks import exclusive

    results = [exclusive.enqueue(f"key-{number % 2}", 0.05) for number in range(24)]
    db_workers.start(4)
    tokens = [finished(result, 120).return_value for result in results]
    runs = db_workers.runs("exclusive")
    assert len(runs) == 24
    assert len({entry["pid"] for entry in runs}) >= 2, "several workers should have run some"
    assert overlaps(runs) == []
    for key in ("key-0", "key-1"):  # each run its own, increasing, fencing token
        key_runs = sorted((e for e in runs if e["key"] == key), key=lambda e: e["began"])
        assert [e["token"] for e in key_runs] == sorted({e["token"] for e in key_runs})
    assert len(tokens) == 24
    assert not Locks.active().exists()


def test_skip_returns_the_sentinel_and_logs_the_result_id(db_workers: DbWorkers) -> None:
    from django_dlock.contrib.tasks import SKIPPED
    from tests.workers_tasks import skipping

    Locks.acquire("tasks:skipped", "someone-else", ttl=60)
    result = skipping.enqueue("skipped", 0)
    db_workers.start(1)
    assert finished(result).return_value == SKIPPED
    assert db_workers.runs("skipping") == []
    [line] = [line for line in db_workers.logs().splitlines() if "Skipped task" in line]
    assert str(result.id) in line and "'skipped'" in line and "tasks:skipped" in line
    assert "someone-else" not in db_workers.logs()


def test_defer_enqueues_again_with_the_attempt_then_runs_once_the_lock_is_free(
    db_workers: DbWorkers,
) -> None:
    from django_dlock.contrib.tasks import deferred_to
    from tests.workers_tasks import deferring_patiently as deferring

    Locks.acquire("tasks:deferred", "someone-else", ttl=60)
    first = deferring.enqueue("deferred")
    db_workers.start(2)
    next_id = deferred_to(finished(first).return_value)
    assert next_id is not None
    second = deferring.get_result(next_id)
    assert second.kwargs == {"dlock_attempt": 2}
    assert second.args == ["deferred"]
    assert Locks.release("tasks:deferred", "someone-else").value == "released"
    # The second attempt may have come before the release, and deferred again
    # (its attempts are many: a third could come before the release too).
    outcome = finished(second).return_value
    while (next_id := deferred_to(outcome)) is not None:
        outcome = finished(deferring.get_result(next_id)).return_value
    resource, token = outcome
    assert resource == "tasks:deferred" and token > 1
    assert len(db_workers.runs("deferring_patiently")) == 1


def test_defer_gives_up_at_max_attempts(db_workers: DbWorkers) -> None:
    from django_dlock.contrib.tasks import deferred_to
    from tests.workers_tasks import deferring

    Locks.acquire("tasks:never", "someone-else", ttl=60)
    result = deferring.enqueue("never")
    db_workers.start(2)
    attempts = 1
    while finished(result).status == "SUCCESSFUL":
        next_id = deferred_to(result.return_value)
        assert next_id is not None
        result = deferring.get_result(next_id)
        attempts += 1
    assert attempts == 3  # max_attempts
    assert result.status == "FAILED"
    assert result.errors[0].exception_class.__name__ == "LockNotAcquired"
    assert "Gave up after 3 attempts" in result.errors[0].traceback
    assert db_workers.runs("deferring") == []


def test_a_task_that_takes_the_context_gets_it_and_its_lock(db_workers: DbWorkers) -> None:
    from tests.workers_tasks import with_context

    result = with_context.enqueue("context")
    db_workers.start(1)
    attempt, token = finished(result).return_value
    assert attempt == 1 and token >= 1


def test_on_lost_stop_ends_the_body_in_a_db_worker(db_workers: DbWorkers) -> None:
    from tests.workers_tasks import stoppable

    result = stoppable.enqueue("stop", 60)
    db_workers.start(1)
    wait_for(lambda: db_workers.runs("stoppable"), 60, "the run to start")
    assert Locks.force_release("tasks:stop")
    released = time.time()
    assert finished(result).status == "FAILED"
    [stopped] = db_workers.runs("stopped")
    assert stopped["error"] == "LockExpired"
    assert "it was released or purged" in stopped["message"]
    assert stopped["at"] - released <= 3 / 3 + 1 + 0.5  # ttl/3 + 1 s, and some slack


# -- in this process: the ImmediateBackend, transactions, decorator checks ---------------


def test_the_immediate_backend_runs_the_task_under_its_lock() -> None:
    from tests.workers_tasks import immediate

    result = immediate.enqueue("now")
    assert result.status == "SUCCESSFUL"
    assert result.return_value >= 1
    assert not Locks.active().exists()


def test_an_async_task_runs_under_its_lock_or_is_skipped() -> None:
    from django_dlock.contrib.tasks import SKIPPED
    from tests.workers_tasks import immediate_async

    # (The stubs type an async task's result as its coroutine: Any reads the value.)
    result = immediate_async.enqueue("async")
    assert result.status == "SUCCESSFUL", result.errors[0].traceback if result.errors else ""
    ran: Any = result.return_value
    assert ran == ["immediate:async", True]
    Locks.acquire("immediate:async", "someone-else", ttl=60)
    result = immediate_async.enqueue("async")
    assert result.status == "SUCCESSFUL", result.errors[0].traceback if result.errors else ""
    skipped: Any = result.return_value
    assert skipped == SKIPPED


def test_on_lost_stop_is_refused_for_an_async_task_function() -> None:
    from django_dlock.contrib.tasks import locked_task

    async def body(key: str) -> None: ...

    with pytest.raises(ValueError, match="async"):
        locked_task("x:{key}", on_lost="stop")(body)


def test_a_lost_lock_fails_the_task_with_the_reason_found_first() -> None:
    from tests.workers_tasks import force_released

    result = force_released.enqueue("lost")
    assert result.status == "FAILED"
    assert result.errors[0].exception_class.__name__ == "LockExpired"
    # What the renewal found, not what the release at the end found.
    assert "was lost before the end: it was released or purged." in result.errors[0].traceback


def test_defer_on_the_immediate_backend_fails_saying_why() -> None:
    from tests.workers_tasks import immediate_defer

    Locks.acquire("immediate:held", "someone-else", ttl=60)
    result = immediate_defer.enqueue("held")
    assert result.status == "FAILED"
    assert result.errors[0].exception_class.__name__ == "LockNotAcquired"
    assert "does not support run_after" in result.errors[0].traceback


def test_enqueuing_on_the_immediate_backend_inside_atomic_refuses_and_on_commit_works() -> None:
    from tests.workers_tasks import immediate

    with transaction.atomic():
        result = immediate.enqueue("in-atomic")
    assert result.status == "FAILED"  # the backend records the task's exception
    assert result.errors[0].exception_class is LockTransactionError

    results: list[Any] = []
    with transaction.atomic():
        transaction.on_commit(lambda: results.append(immediate.enqueue("on-commit")))
    [after_commit] = results
    assert after_commit.status == "SUCCESSFUL"


def test_lock_as_a_decorator_under_task_locks_the_formatted_name() -> None:
    from tests.workers_tasks import ship

    assert ship.enqueue(42).return_value == ["order:42"]
    assert ship.enqueue(order_id=7).return_value == ["order:7"]


def test_locked_task_above_task_is_refused() -> None:
    from django_dlock.contrib.tasks import locked_task
    from tests.workers_tasks import immediate

    with pytest.raises(TypeError, match="underneath"):
        locked_task("x:{key}")(immediate)  # type: ignore[arg-type]


def test_the_task_signature_leaves_out_the_injected_parameters() -> None:
    import inspect

    from tests.workers_tasks import deferring, with_context

    assert list(inspect.signature(deferring.func).parameters) == ["key"]
    assert list(inspect.signature(with_context.func).parameters) == ["context", "key"]


def test_policies_and_attempts_are_checked() -> None:
    from django_dlock.contrib.tasks import locked_task

    with pytest.raises(ValueError, match="on_locked"):
        locked_task("x", on_locked="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_attempts"):
        locked_task("x", max_attempts=0)
    with pytest.raises(ValueError, match="on_lost"):
        locked_task("x", on_lost="kill")(len)  # type: ignore[arg-type]


def test_without_a_tasks_framework_the_import_names_what_to_install() -> None:
    # Not a bare "No module named ...": the error says which extra brings the package.
    error = import_without("django_dlock.contrib.tasks", "django_tasks", "django.tasks")
    assert error.startswith("ModuleNotFoundError: "), error
    assert "pip install django-tasks" in error, error
