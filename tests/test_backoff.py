"""The sleeps between a waiter's looks (``locking.backoff``), without a database."""

from __future__ import annotations

import random
from typing import Any

import pytest

from django_dlock.locking.backoff import (
    LISTENING_LOOKS,
    NEW_WAITER_LOOKS_AGAIN,
    SHARED_HOST_HEAD_LOOKS,
    Backoff,
)
from django_dlock.locking.queue import QueueState

pytestmark = pytest.mark.vendor_independent

HELD = QueueState(holder="other", free=False, holder_left=30.0, ahead=0)


@pytest.fixture(autouse=True)
def backoff_settings(settings: Any) -> None:
    settings.DLOCK_BACKOFF_BASE = 0.002
    settings.DLOCK_BACKOFF_MAX = 0.5


def sleeps(backoff: Backoff, state: QueueState, n: int, **options: Any) -> list[float]:
    options = {"listening": False, "shares_host": False, "refresh_in": 60.0, **options}
    return [backoff.sleep(state, now=100.0, **options) for _ in range(n)]


def test_a_polling_head_backs_off_exponentially_up_to_the_cap() -> None:
    backoff = Backoff(rng=random.Random(1))
    windows = [min(0.5, 0.002 * 2**attempt) for attempt in range(12)]
    assert all(
        0 <= sleep <= window
        for sleep, window in zip(sleeps(backoff, HELD, 12), windows, strict=True)
    )
    assert max(sleeps(backoff, HELD, 50)) > 0.25  # the cap is reached, not exceeded
    assert max(sleeps(backoff, HELD, 50)) <= 0.5


def test_a_new_holder_starts_the_backoff_again() -> None:
    backoff = Backoff(rng=random.Random(2))
    backoff.learn(HELD, now=0.0)
    sleeps(backoff, HELD, 20)
    backoff.learn(QueueState(holder="third", free=False, holder_left=30.0, ahead=0), now=1.0)
    assert backoff.attempt == 0
    assert sleeps(backoff, HELD, 1)[0] <= 0.002


def test_the_head_never_sleeps_past_the_holders_expiry() -> None:
    backoff = Backoff(rng=random.Random(3))
    expiring = QueueState(holder="other", free=False, holder_left=0.01, ahead=0)
    assert max(sleeps(backoff, expiring, 40)) <= 0.01
    assert max(sleeps(backoff, expiring, 5, listening=True)) <= 0.01


def test_a_listening_head_sleeps_long_but_looks_once_more_soon_after_queuing() -> None:
    backoff = Backoff(rng=random.Random(4))
    first, second, third = sleeps(backoff, HELD, 3, listening=True)
    assert first == NEW_WAITER_LOOKS_AGAIN
    assert second == third == LISTENING_LOOKS * 0.5


def test_a_listening_waiter_queued_behind_others_also_looks_once_more_soon() -> None:
    # Those ahead may leave while a release that did not see this ticket runs.
    backoff = Backoff(rng=random.Random(8))
    behind = QueueState(holder="other", free=False, holder_left=None, ahead=2)
    first, second = sleeps(backoff, behind, 2, listening=True)
    assert first == NEW_WAITER_LOOKS_AGAIN
    assert second == LISTENING_LOOKS * 0.5


def test_a_listening_head_sleeps_no_longer_than_its_ticket_lasts() -> None:
    backoff = Backoff(rng=random.Random(5), looked_again=True)
    assert sleeps(backoff, HELD, 1, listening=True, refresh_in=0.3) == [0.3]


def test_on_a_shared_host_a_listening_head_still_looks_often() -> None:
    backoff = Backoff(rng=random.Random(6))
    assert max(sleeps(backoff, HELD, 5, listening=True, shares_host=True)) <= SHARED_HOST_HEAD_LOOKS


def test_on_a_shared_host_a_polling_head_looks_less_often_the_longer_it_waits() -> None:
    backoff = Backoff(rng=random.Random(7))
    backoff.learn(HELD, now=100.0)
    early = [backoff.sleep(HELD, listening=False, shares_host=True, refresh_in=60, now=100.0)]
    late = [backoff.sleep(HELD, listening=False, shares_host=True, refresh_in=60, now=200.0)]
    assert max(early) <= 0.002
    assert 0.1 <= min(late) <= 0.2  # half to all of BASE x seconds waited


def test_waiters_further_back_sleep_a_share_of_the_turns_ahead_of_them() -> None:
    backoff = Backoff(rng=random.Random(8))
    backoff.learn(QueueState(holder="a", free=False, holder_left=30.0, ahead=5), now=0.0)
    backoff.learn(QueueState(holder="b", free=False, holder_left=30.0, ahead=3), now=0.02)
    assert backoff.turn == pytest.approx(0.01)
    behind = QueueState(holder="b", free=False, holder_left=30.0, ahead=3)
    assert all(0.25 * 3 * 0.01 <= sleep <= 0.5 * 3 * 0.01 for sleep in sleeps(backoff, behind, 20))


def test_a_slow_look_does_not_make_turns_seem_slower_at_once() -> None:
    backoff = Backoff()
    backoff.learn(QueueState(holder="a", free=False, holder_left=30.0, ahead=2), now=0.0)
    backoff.learn(QueueState(holder="b", free=False, holder_left=30.0, ahead=1), now=0.01)
    backoff.learn(QueueState(holder="c", free=False, holder_left=30.0, ahead=0), now=1.01)
    assert backoff.turn == pytest.approx(0.9 * 0.01 + 0.1 * 1.0)
