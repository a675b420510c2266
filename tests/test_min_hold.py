"""``lock(..., min_hold=...)``: held at least so long after it was taken, without
the caller waiting for it (ShedLock's lockAtLeastFor)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from django_dlock import InvalidArgument, LockExpired, lock, signals
from django_dlock.models import DistributedLock
from tests.utils import database_settings
from tests.workers_once import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects
QUICK = 0.5  # seconds: an exit that renews, never one that waits out min_hold


def held(resource: str) -> bool:
    return Locks.active().filter(resource=resource).exists()


def kept_for(resource: str) -> float:
    """Seconds from the lock's acquisition to its expiry, by the database's clock."""
    row = Locks.get(resource=resource)
    return (row.expires_at - row.acquired_at).total_seconds()


@pytest.fixture
def sent() -> Iterator[list[str]]:
    """The names of the renewed and released signals sent, in order."""
    names: list[str] = []

    def renewed(**kwargs: Any) -> None:
        names.append("renewed")

    def released(**kwargs: Any) -> None:
        names.append("released")

    signals.lock_renewed.connect(renewed, weak=False)
    signals.lock_released.connect(released, weak=False)
    yield names
    signals.lock_renewed.disconnect(renewed)
    signals.lock_released.disconnect(released)


def test_a_quick_body_leaves_the_lock_held_until_min_hold_after_it_was_taken(
    sent: list[str],
) -> None:
    with lock("mh:quick", min_hold=2):
        pass
    left = time.monotonic()

    assert held("mh:quick")
    assert Locks.acquire("mh:quick", ttl=5) is None  # another host, meanwhile
    # Not the ttl (60 s by default): min_hold, and a little for the round trips.
    assert 2 <= kept_for("mh:quick") < 2 + QUICK
    assert time.monotonic() - left < QUICK
    assert sent == ["renewed"]  # kept, not released


def test_min_hold_longer_than_the_ttl_keeps_it_longer() -> None:
    with lock("mh:long", ttl=1, min_hold=timedelta(seconds=3)):
        pass

    assert 3 <= kept_for("mh:long") < 3 + QUICK


def test_a_body_that_outlasts_min_hold_releases_the_lock(sent: list[str]) -> None:
    with lock("mh:slow", min_hold=0.05):
        time.sleep(0.1)

    assert not held("mh:slow")
    assert sent == ["released"]


def test_a_body_that_raises_still_holds_the_lock_for_min_hold() -> None:
    with pytest.raises(RuntimeError), lock("mh:raises", min_hold=2):
        raise RuntimeError("the job failed")

    assert held("mh:raises")
    assert 2 <= kept_for("mh:raises") < 2 + QUICK


def test_only_the_outermost_exit_of_a_reentrant_lock_keeps_it(sent: list[str]) -> None:
    with lock("mh:again", reentrant=True, min_hold=2):
        with lock("mh:again", reentrant=True, min_hold=2):
            before = list(sent)
        assert sent == before  # the inner exit gave back its hold, as without min_hold
        assert held("mh:again")

    assert sent == [*before, "renewed"]
    assert 2 <= kept_for("mh:again") < 2 + QUICK


@pytest.mark.parametrize(
    ("kind", "excluded"),
    [({"shared": True}, {}), ({"limit": 1}, {"limit": 1})],
    ids=["a reader and a writer", "the permit of a semaphore of 1 and another"],
)
def test_a_reader_or_a_permit_is_kept_as_well(
    kind: dict[str, Any], excluded: dict[str, Any]
) -> None:
    with lock("mh:kind", min_hold=2, **kind):
        pass

    [hold] = Locks.holders("mh:kind")
    assert 2 <= (hold.expires_at - hold.acquired_at).total_seconds() < 2 + QUICK
    assert Locks.acquire("mh:kind", ttl=5, **excluded) is None  # waits out the kept hold


def test_the_decorator_keeps_each_calls_lock() -> None:
    @lock("mh:job:{n}", min_hold=2)
    def job(n: int) -> int:
        return n * 2

    assert job(21) == 42
    assert held("mh:job:21")


@pytest.mark.asyncio
async def test_async_lock_keeps_it_too() -> None:
    try:
        async with lock("mh:async", min_hold=2):
            pass
        assert await sync_to_async(held)("mh:async")
    finally:
        await sync_to_async(connections.close_all)()


def test_a_lock_lost_during_the_body_is_reported_as_without_min_hold() -> None:
    with pytest.raises(LockExpired), lock("mh:lost", min_hold=2):
        Locks.force_release("mh:lost")


def test_min_hold_is_left_out_by_default() -> None:
    assert lock("mh:default").min_hold is None
    assert lock("mh:td", min_hold=timedelta(minutes=1)).min_hold == 60.0


@pytest.mark.parametrize(
    "value", [0, -1, math.nan, math.inf, timedelta(0), 86401, 10**400, "2", True, [1]]
)
def test_an_invalid_min_hold_is_refused_before_anything_runs(value: Any) -> None:
    with pytest.raises(InvalidArgument, match="min_hold must be"):
        lock("mh:invalid", min_hold=value)
    assert not Locks.filter(resource="mh:invalid").exists()


def test_min_hold_is_for_one_resource() -> None:
    with pytest.raises(InvalidArgument, match="min_hold is for a lock"):
        lock(["mh:a", "mh:b"], min_hold=2)


def test_another_process_takes_it_no_sooner_than_min_hold_after_it_was_taken() -> None:
    """Process A enters ``lock(min_hold=2)`` and leaves at once; this process
    (another host) tries all along, and gets it 2 s after A did, by the
    database's clock, not when A left, nor a ttl later."""
    [seen] = run_workers(
        "min_hold", [([], {"db": database_settings(), "resource": "mh:hosts", "min_hold": 2})]
    )
    taken_by_a = datetime.fromisoformat(seen["acquired_at"])
    left_by_a = Locks.get(resource="mh:hosts")
    while (taken := Locks.acquire("mh:hosts", ttl=5)) is None:
        time.sleep(0.02)

    assert seen["exit_seconds"] < QUICK
    # A's exit left the lock held, to expire min_hold after it was taken (plus
    # the time its acquisition took to return), not a ttl (60 s) later.
    assert left_by_a.owner != "" and left_by_a.fencing_token == taken.fencing_token - 1
    assert timedelta(seconds=2) <= left_by_a.expires_at - taken_by_a < timedelta(seconds=2 + 10)
    assert taken.acquired_at - taken_by_a >= timedelta(seconds=2)
