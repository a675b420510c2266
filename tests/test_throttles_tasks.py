"""``django_dlock.contrib.tasks.throttled_task``: a db_worker that defers a refused run until
the throttle frees, and the ImmediateBackend in this process."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

import pytest

pytest.importorskip("django_tasks_db")

from django_dlock.contrib.tasks import SKIPPED, deferred_to, throttled_task
from tests.task_processes import DbWorkers, finished

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_refused_run_is_deferred_until_the_throttle_frees(db_workers: DbWorkers) -> None:
    from tests.workers_throttled_tasks import deferring

    first, second = deferring.enqueue("mail"), deferring.enqueue("mail")
    db_workers.start(1)

    outcomes = [finished(first).return_value, finished(second).return_value]
    [granted] = [outcome for outcome in outcomes if not deferred_to(outcome)]
    [deferred] = [outcome for outcome in outcomes if deferred_to(outcome)]
    assert deferred["attempt"] == 2
    outcome = deferred
    while (next_id := deferred_to(outcome)) is not None:
        outcome = finished(deferring.get_result(next_id)).return_value
    # The deferred run's use came a period (1 s) or more after the first, by the database's clock.
    used = [datetime.fromisoformat(when) for when in (granted, outcome)]
    assert used[1] - used[0] >= timedelta(seconds=1)


def test_skip_and_raise_on_the_immediate_backend() -> None:
    from tests.workers_throttled_tasks import raising, skipping

    assert skipping.enqueue("a").return_value == "ran"
    assert skipping.enqueue("a").return_value == SKIPPED
    assert raising.enqueue("b").return_value == "ran"
    failed = raising.enqueue("b")
    assert failed.status.name == "FAILED"
    assert "Throttled" in failed.errors[0].exception_class_path


def test_defer_without_run_after_raises() -> None:
    from tests.workers_throttled_tasks import deferring_immediately

    assert deferring_immediately.enqueue("c").return_value == "ran"
    assert "Throttled" in deferring_immediately.enqueue("c").errors[0].exception_class_path


def test_an_async_task_and_a_direct_call() -> None:
    from tests.workers_throttled_tasks import skipping, skipping_async

    # The framework awaits the coroutine; its result is what the function returns.
    results: list[Any] = [skipping_async.enqueue("d") for _ in range(2)]
    assert [result.return_value for result in results] == ["ran", SKIPPED]
    assert skipping.func("e") == "ran"
    assert skipping.func("e") == SKIPPED


def test_bad_arguments_are_refused_when_decorating() -> None:
    from tests.workers_throttled_tasks import raising

    with pytest.raises(ValueError, match="on_throttled"):
        throttled_task("x", rate="1/m", on_throttled="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_attempts"):
        throttled_task("x", rate="1/m", max_attempts=0)
    with pytest.raises(ValueError, match="is not a throttle rate"):
        throttled_task("x", rate="often")
    with pytest.raises(TypeError, match="underneath"):
        throttled_task("x", rate="1/m")(cast(Any, raising))
