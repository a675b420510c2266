"""``throttle()``: at most N uses of a key in any period, decided on the database's clock."""

from __future__ import annotations

import asyncio
import pickle
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from django_dlock import DlockError, InvalidArgument, LockTransactionError, Throttled, throttle
from django_dlock.models import ThrottleSlot
from django_dlock.signals import throttle_used
from django_dlock.throttles import Rate, ThrottleDecision
from django_dlock.throttles.parsing import parse_rate
from tests import workers_throttles
from tests.throttle_utils import kept, used_ago
from tests.utils import database_settings, run_in_processes, spawn


def use(key: str, rate: str, times: int) -> list[ThrottleDecision]:
    limiter = throttle(key, rate=rate)
    return [limiter.try_use() for _ in range(times)]


# -- rates ---------------------------------------------------------------------------------------


@pytest.mark.vendor_independent
@pytest.mark.parametrize(
    ("text", "limit", "seconds"),
    [
        ("10/s", 10, 1),
        ("10/m", 10, 60),
        ("100/h", 100, 3600),
        ("1/d", 1, 86400),
        ("5/10m", 5, 600),
        ("3/minute", 3, 60),
        ("7/2hours", 7, 7200),
        ("2/30sec", 2, 30),
        (" 4 / 15 M ", 4, 900),
    ],
)
def test_a_rate_is_uses_per_period(text: str, limit: int, seconds: int) -> None:
    rate = parse_rate(text)
    assert (rate.limit, rate.period) == (limit, timedelta(seconds=seconds))
    assert str(rate) == text.strip()


@pytest.mark.vendor_independent
@pytest.mark.parametrize(
    "text",
    [
        *("", "10", "10/", "/m", "0/m", "10/0m", "10/w", "ten/m", "10/m/2", "-1/m", "10001/s"),
        *("1/3651d", "1/99999999999999999999d", "1/" + "0" * 40 + "1m"),
    ],
)
def test_anything_else_is_not_a_rate(text: str) -> None:
    with pytest.raises(InvalidArgument, match="is not a throttle rate"):
        throttle("key", rate=text)


@pytest.mark.vendor_independent
def test_a_rate_may_name_a_setting(settings: Any) -> None:
    settings.DLOCK_THROTTLE_RATES = {"email": "2/m"}
    assert throttle("k", rate="email").rate == Rate(2, timedelta(minutes=1), "2/m")
    with pytest.raises(InvalidArgument, match="DLOCK_THROTTLE_RATES has no rate of that name"):
        throttle("k", rate="sms")


@pytest.mark.vendor_independent
def test_a_bad_key_is_refused_at_once() -> None:
    with pytest.raises(InvalidArgument, match="A throttle key may not contain whitespace"):
        throttle("email 42", rate="1/m")
    with pytest.raises(TypeError):
        throttle(42, rate="1/m")  # type: ignore[arg-type]


@pytest.mark.vendor_independent
def test_throttled_is_a_dlock_error_with_key_rate_and_retry_after() -> None:
    error = Throttled("email:42", parse_rate("10/m"), timedelta(seconds=1.5))
    assert isinstance(error, DlockError)
    assert (error.key, str(error.rate), error.retry_after) == (
        "email:42",
        "10/m",
        timedelta(seconds=1.5),
    )
    assert str(error) == (
        "'email:42' was used 10 time(s) within the last 1 min, as many as the "
        "rate 10/m allows; the next use is allowed in 1 s."
    )


@pytest.mark.vendor_independent
@pytest.mark.parametrize(
    ("seconds", "words"),
    [(3599.997, "59 min"), (59.9, "59 s"), (7200, "2 h"), (0.004, "1 s")],
)
def test_throttled_says_when_in_the_admins_words(seconds: float, words: str) -> None:
    error = Throttled("k:9", parse_rate("1/h"), timedelta(seconds=seconds))
    assert str(error).endswith(f"the next use is allowed in {words}.")
    assert "Throttled" not in str(error)  # the class name is the traceback's to say


@pytest.mark.vendor_independent
def test_throttled_survives_pickling() -> None:
    # Task queues carry it between processes (Celery's retry, result backends).
    error = Throttled("email:1", parse_rate("10/m"), timedelta(seconds=3))
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (copy.key, copy.rate, copy.retry_after, str(copy)) == (
        error.key,
        error.rate,
        error.retry_after,
        str(error),
    )


# -- the window ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_grants_up_to_the_limit_then_refuses_until_the_oldest_use_leaves() -> None:
    decisions = use("email:1", "3/m", 4)

    assert [d.granted for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    first, refused = decisions[0], decisions[3]
    assert refused.retry_after == first.at + timedelta(minutes=1) - refused.at
    assert timedelta(0) < refused.retry_after <= timedelta(minutes=1)
    # One row for the key, which keeps the three uses.
    assert ThrottleSlot.objects.filter(key="email:1").count() == 1
    assert kept("email:1") == [d.at for d in decisions[:3]]


@pytest.mark.django_db
def test_retry_after_counts_from_the_oldest_use_in_the_window() -> None:
    use("email:1", "3/m", 3)
    used_ago("email:1", [10, 50, 30])

    [refused] = use("email:1", "3/m", 1)

    # The use 50 s old leaves the window in 10 s, less what the refusal took to decide.
    assert timedelta(seconds=9) < refused.retry_after <= timedelta(seconds=10)


@pytest.mark.django_db
def test_a_use_a_period_old_frees_its_slot_for_the_next() -> None:
    use("email:1", "3/m", 3)
    used_ago("email:1", [60, 20, 10])

    granted, refused = use("email:1", "3/m", 2)

    assert granted and not refused
    # The use a period old is dropped; the key keeps three: the two others and this one.
    assert kept("email:1")[2] == granted.at
    assert len(kept("email:1")) == 3
    assert ThrottleSlot.objects.get(key="email:1").used_at == granted.at


@pytest.mark.django_db
def test_keys_are_counted_apart() -> None:
    assert [bool(d) for d in use("email:1", "1/m", 2)] == [True, False]
    assert [bool(d) for d in use("email:2", "1/m", 2)] == [True, False]


@pytest.mark.django_db
def test_a_lower_rate_counts_the_uses_made_under_the_higher_one() -> None:
    use("email:1", "3/m", 3)
    used_ago("email:1", [40, 20, 10])

    [refused] = use("email:1", "2/m", 1)
    assert timedelta(seconds=39) < refused.retry_after <= timedelta(seconds=40)

    used_ago("email:1", [70, 65, 61])
    [granted] = use("email:1", "2/m", 1)
    assert granted.remaining == 1
    # The uses that left the window are no longer kept.
    assert kept("email:1") == [granted.at]


# -- the context manager and the decorator ------------------------------------------------------


@pytest.mark.django_db
def test_the_block_runs_once_granted_and_not_when_throttled() -> None:
    ran: list[object] = []
    with throttle("report:7", rate="1/h") as granted:
        ran.append(granted)
    with pytest.raises(Throttled) as refused, throttle("report:7", rate="1/h"):
        ran.append("not this")

    assert ran == [granted]
    assert refused.value.key == "report:7"
    assert refused.value.rate.limit == 1
    assert timedelta(0) < refused.value.retry_after <= timedelta(hours=1)


@pytest.mark.django_db
def test_a_block_that_raises_still_used_the_throttle() -> None:
    with pytest.raises(ZeroDivisionError), throttle("report:7", rate="1/h"):
        _ = 1 / 0
    assert not throttle("report:7", rate="1/h").try_use()


@pytest.mark.django_db
def test_the_decorator_fills_the_key_from_the_arguments() -> None:
    sent = []

    @throttle("email:{user_id}:{kind}", rate="1/m")
    def send(user_id: int, kind: str = "welcome") -> None:
        sent.append((user_id, kind))

    send(1)
    send(user_id=2)
    send(1, kind="reset")
    with pytest.raises(Throttled) as refused:
        send(1)

    assert sent == [(1, "welcome"), (2, "welcome"), (1, "reset")]
    assert refused.value.key == "email:1:welcome"


@pytest.mark.vendor_independent
def test_the_decorator_refuses_a_placeholder_that_names_no_parameter() -> None:
    with pytest.raises(ValueError, match="has no parameter 'user'"):

        @throttle("email:{user}", rate="1/m")
        def send(user_id: int) -> None: ...


@pytest.mark.django_db(transaction=True)
def test_async_with_and_async_functions() -> None:
    @throttle("push:{device}", rate="1/m")
    async def push(device: str) -> str:
        return device

    async def main() -> tuple[str, ThrottleDecision]:
        async with throttle("push:all", rate="1/m") as granted:
            pass
        with pytest.raises(Throttled):
            async with throttle("push:all", rate="1/m"):
                pass
        return await push("a"), granted

    pushed, granted = asyncio.run(main())
    assert pushed == "a" and granted.granted


@pytest.mark.django_db(transaction=True)
def test_refuses_to_run_in_the_callers_transaction() -> None:
    with transaction.atomic(), pytest.raises(LockTransactionError):
        throttle("email:1", rate="1/m").try_use()
    assert not ThrottleSlot.objects.exists()


@pytest.mark.django_db
def test_each_decision_is_signalled() -> None:
    seen: list[tuple[str, bool, timedelta]] = []

    def receiver(
        sender: Any, *, key: str, granted: bool, retry_after: timedelta, **kw: Any
    ) -> None:
        seen.append((key, granted, retry_after))

    throttle_used.connect(receiver)
    try:
        granted, refused = use("email:1", "1/m", 2)
    finally:
        throttle_used.disconnect(receiver)
    assert seen == [("email:1", True, timedelta(0)), ("email:1", False, refused.retry_after)]


# -- processes -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_no_window_of_the_period_holds_more_than_the_limit_across_processes() -> None:
    """Four processes use one new key as fast as they can for 2.5 s at 5 uses a
    second: by the database's times of the decisions, every window of a second holds
    at most 5 granted uses, and every refusal came while one held 5, with a
    retry_after to the moment the oldest of them left it."""
    limit, period = 5, timedelta(seconds=1)
    start = spawn.Barrier(4)

    results = run_in_processes(
        workers_throttles.hammer, [(database_settings(), "mail:all", "5/s", 2.5, start)] * 4
    )

    decisions = sorted((at, granted, retry) for worker in results for granted, at, retry in worker)
    grants = [at for at, granted, _ in decisions if granted]
    refusals = [(at, retry) for at, granted, retry in decisions if not granted]
    assert len(grants) >= 2 * limit  # the window slid
    assert refusals
    for earlier, later in zip(grants, grants[limit:], strict=False):
        assert later - earlier >= period, f"{limit + 1} uses within {later - earlier}"
    for at, retry in refusals:
        in_window = [granted for granted in grants if at - period < granted <= at]
        assert len(in_window) == limit
        assert retry == in_window[0] + period - at
        assert timedelta(0) < retry <= period
