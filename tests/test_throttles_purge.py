"""``purge_locks`` also deletes throttle keys whose every use has left its window."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from django_dlock import throttle
from django_dlock.models import ThrottleSlot
from django_dlock.throttles.purge import count_free_keys, purge_free_keys
from tests import workers_throttles
from tests.throttle_utils import kept, used_ago
from tests.utils import database_settings, run_in_processes, spawn

pytestmark = pytest.mark.django_db


def used(key: str, rate: str, times: int, *, left_window_ago: float | None = None) -> None:
    """Use ``key`` ``times``; then, if asked, make every use one that left its
    window ``left_window_ago`` seconds ago (by the database's clock)."""
    for _ in range(times):
        assert throttle(key, rate=rate).try_use()
    if left_window_ago is not None:
        period = throttle(key, rate=rate).rate.period.total_seconds()
        used_ago(key, [left_window_ago + period] * times, period=period)


def keys() -> list[str]:
    return sorted(set(ThrottleSlot.objects.values_list("key", flat=True)))


def purge(*args: str) -> str:
    out = StringIO()
    call_command("purge_locks", *args, stdout=out)
    return out.getvalue()


def test_deletes_the_keys_whose_every_use_left_the_window() -> None:
    used("email:free", "3/m", 3, left_window_ago=1)
    used("email:busy", "3/m", 2)
    used("email:half", "3/m", 2, left_window_ago=1)
    used("email:half", "3/m", 1)  # one use still in the window keeps the key

    assert purge_free_keys("default") == 1
    assert keys() == ["email:busy", "email:half"]
    assert len(kept("email:half")) == 1  # the use in the window (the others left it)


def test_a_purged_key_starts_again() -> None:
    used("email:1", "1/m", 1, left_window_ago=1)
    purge_free_keys("default")

    assert throttle("email:1", rate="1/m").try_use()
    assert not throttle("email:1", rate="1/m").try_use()


def test_older_than_prefix_and_batches() -> None:
    used("email:1", "1/m", 1, left_window_ago=30)
    used("email:2", "1/m", 1, left_window_ago=5)
    used("sms:1", "1/m", 1, left_window_ago=30)
    used("sms:2", "1/m", 1, left_window_ago=30)

    assert count_free_keys("default", older_than=10) == 3
    assert purge_free_keys("default", older_than=10, prefix="email:") == 1
    assert keys() == ["email:2", "sms:1", "sms:2"]
    assert purge_free_keys("default", batch_size=1) == 3
    assert keys() == []


def test_purge_locks_reports_throttle_keys_on_a_line_of_their_own() -> None:
    used("email:1", "1/m", 1, left_window_ago=1)
    used("email:2", "1/m", 1)

    assert purge("--dry-run") == "Would delete 0 lock(s)\nWould delete 1 throttle key(s)\n"
    assert purge() == "Deleted 0 lock(s)\nDeleted 1 throttle key(s)\n"
    assert purge() == "Deleted 0 lock(s)\n"
    assert keys() == ["email:2"]


@pytest.mark.django_db(transaction=True)
def test_a_purge_running_beside_the_uses_never_lets_a_window_hold_more() -> None:
    """Two processes each use a random one of eight keys every 0 to 0.5 s, so keys
    often go free, while a third purges free keys in a loop: the purge deletes
    keys again and again, and by the database's times no second ever holds more than
    a key's limit of granted uses, and each refusal came while one held that many.
    Half the keys allow 1 use a second, half 2 (a use of a key the purge chose
    commits before the purge's second look, or waits for the purge's lock on the
    key's row and then finds the key gone, and starts it again)."""
    period = timedelta(seconds=1)
    limits = {f"purged:{n}": 1 + n % 2 for n in range(8)}
    start = spawn.Barrier(3)

    *users, deleted = run_in_processes(
        workers_throttles.use_or_purge,
        [("wander", database_settings(), {k: f"{n}/s" for k, n in limits.items()}, 2.5, start)] * 2
        + [("purge", database_settings(), 2.5, start)],
    )

    assert deleted > 0  # 3 to 8 a run: a key goes free once its uses are a second old
    decisions = sorted((d for worker in users for d in worker), key=lambda d: d[2])
    for key, limit in limits.items():
        grants = [at for k, granted, at in decisions if k == key and granted]
        for earlier, later in zip(grants, grants[limit:], strict=False):
            assert later - earlier >= period, f"{key}: {limit + 1} uses within {later - earlier}"
        for k, granted, at in decisions:
            if k == key and not granted:
                assert sum(at - period < g <= at for g in grants) == limit
