"""``django_dlock.contrib.celery.throttled_task``, run by Celery in this process (``apply()``)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("celery")

from celery import Celery, Task

from django_dlock import Throttled
from django_dlock.contrib.celery import SKIPPED, throttled_task

pytestmark = pytest.mark.django_db

app = Celery("dlock-throttle-tests")
sent: list[tuple[int, str]] = []


@app.task(name="tests.throttled.retry", max_retries=2)
@throttled_task("email:{user_id}", rate="1/m")
def send_retry(user_id: int, subject: str) -> int:
    sent.append((user_id, subject))
    return user_id


@app.task(name="tests.throttled.skip")
@throttled_task("email:{user_id}", rate="1/m", on_throttled="skip")
def send_skip(user_id: int, subject: str) -> int:
    sent.append((user_id, subject))
    return user_id


@app.task(name="tests.throttled.raise")
@throttled_task("email:{user_id}", rate="1/m", on_throttled="raise")
def send_raise(user_id: int, subject: str) -> int:
    sent.append((user_id, subject))
    return user_id


@pytest.fixture(autouse=True)
def _nothing_sent() -> None:
    sent.clear()


def test_a_refused_run_retries_when_the_throttle_frees(monkeypatch: pytest.MonkeyPatch) -> None:
    countdowns: list[float] = []
    retry = Task.retry

    def recording_retry(self: Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        countdowns.append(kwargs["countdown"])
        return retry(self, *args, **kwargs)

    monkeypatch.setattr(Task, "retry", recording_retry)

    assert send_retry.apply((1, "first")).get() == 1
    refused = send_retry.apply((1, "second"))

    # apply() runs each retry at once (no countdown): two retries, then the task fails.
    assert refused.state == "FAILURE"
    assert isinstance(refused.result, Throttled)
    assert refused.result.key == "email:1"
    assert len(countdowns) == 3
    assert all(0 < countdown <= 60 for countdown in countdowns)
    assert sent == [(1, "first")]


def test_skip_returns_the_sentinel_and_raise_fails_the_task() -> None:
    assert send_skip.apply((1, "first")).get() == 1
    assert send_skip.apply((1, "second")).get() == SKIPPED
    assert send_skip.apply((2, "first")).get() == 2

    assert send_raise.apply((3, "first")).get() == 3
    failed = send_raise.apply((3, "second"))
    assert failed.state == "FAILURE" and isinstance(failed.result, Throttled)
    assert sent == [(1, "first"), (2, "first"), (3, "first")]


def test_a_direct_call_raises_when_throttled() -> None:
    assert send_retry(4, "first") == 4
    with pytest.raises(Throttled):
        send_retry(4, "second")


def test_bad_arguments_are_refused_when_decorating() -> None:
    with pytest.raises(ValueError, match="on_throttled"):
        throttled_task("x", rate="1/m", on_throttled="wait")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not a throttle rate"):
        throttled_task("x", rate="1/w")
    with pytest.raises(ValueError, match="has no parameter 'user'"):
        throttled_task("email:{user}", rate="1/m")(lambda user_id: None)
    with pytest.raises(TypeError, match="underneath"):
        throttled_task("x", rate="1/m")(send_retry)
