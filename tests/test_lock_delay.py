"""Lock-delay (Chubby's, Consul's LockDelay): a resource whose exclusive holder
lost it (its lease ran out, or an operator force-released it) is refused to
everyone until ``lock_delay`` after that, by the database's clock; a release
by the holder leaves no delay. (Who is admitted in each case, on every path
of each database: tests/test_admission.py, "lost with a lock-delay".)"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from typing import Any

import pytest

from django_dlock import lock
from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument, LockNotAcquired
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult
from django_dlock.rules.clock import database_now
from tests import workers_lock_delay
from tests.docs_utils import run_example
from tests.utils import database_settings, run_in_thread, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects

# A waiter looks again when the delay ends (its timer is the time left): it
# gets the lock within this of that moment, on a loaded machine.
SOON = 1.5


def test_a_killed_holder_keeps_the_resource_from_everyone_for_its_lock_delay() -> None:
    holder = spawn.Process(
        target=workers_lock_delay.hold_until_killed,
        args=(database_settings(), "delay:1", 1.0, 2.0),
        daemon=True,
    )
    holder.start()
    try:
        wait_for(lambda: Locks.active().filter(resource="delay:1").exists(), 30, "held")
        time.sleep(1.2)  # a renewal or more: the delay runs from the last one's expiry
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
    finally:
        holder.kill()
    lost = Locks.get(resource="delay:1")  # nobody can change it now but the next holder
    assert lost.lock_delay == timedelta(seconds=2)
    assert lost.available_at is not None
    wait_for(lambda: database_now(conf.DATABASE) >= lost.expires_at, 5, "the lease ran out")
    # Its lease is over, its delay is not: nobody, of any kind, is admitted.
    assert database_now(conf.DATABASE) < lost.available_at, "the test came too late to look"
    assert Locks.acquire("delay:1", owner="next", ttl=30) is None
    assert Locks.acquire("delay:1", owner="reader", ttl=30, shared=True) is None
    assert Locks.acquire("delay:1", owner=lost.owner, ttl=30) is None  # the lost holder's owner too
    # A waiter of lock() gets it when the delay ends, and soon after.
    with lock("delay:1", ttl=30, timeout=20) as held:
        taken = Locks.get(resource="delay:1")
    assert taken.fencing_token == held.fencing_token > lost.fencing_token
    assert lost.available_at <= taken.acquired_at < lost.available_at + timedelta(seconds=SOON)


def test_a_force_release_starts_the_lock_delay_and_a_release_leaves_none() -> None:
    Locks.acquire("delay:2", owner="a", ttl=30, lock_delay=30)
    assert Locks.force_release("delay:2")
    forced = Locks.get(resource="delay:2")
    assert forced.owner == "" and forced.available_at == forced.expires_at + timedelta(seconds=30)
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("b", {}),
        ("a", {}),
        ("c", {"shared": True}),
        ("d", {"limit": 2}),
    ]
    for owner, kind in kinds:
        assert Locks.acquire("delay:2", owner=owner, ttl=30, **kind) is None, (owner, kind)
    # lock() says why it was refused, in sync and async code.
    in_delay = r"^The lock on 'delay:2' is in its lock-delay for another (29|30)\.\d s: its last"
    with pytest.raises(LockNotAcquired, match=in_delay), lock("delay:2"):
        pass

    async def take() -> None:
        async with lock("delay:2"):
            pass

    with pytest.raises(LockNotAcquired, match=in_delay):
        asyncio.run(take())
    with (
        pytest.raises(LockNotAcquired, match=r"within 0.3 s: its lock-delay ran"),
        lock("delay:2", timeout=0.3),
    ):
        pass
    # The purge keeps the row while its delay runs: deleting it would free the resource.
    Locks.purge_expired()
    assert Locks.filter(resource="delay:2").exists()
    assert Locks.acquire("delay:2", owner="b", ttl=30) is None
    # A release by the holder leaves the resource free at once.
    Locks.acquire("delay:3", owner="a", ttl=30, lock_delay=30)
    assert Locks.release("delay:3", owner="a") is ReleaseResult.RELEASED
    assert Locks.get(resource="delay:3").lock_delay is None
    assert Locks.acquire("delay:3", owner="b", ttl=30) is not None


def test_the_holder_again_with_a_lock_delay_sets_it_and_without_one_keeps_it() -> None:
    # As a waiter whose own acquisition finds the lock handed to it by a release
    # (which wrote no delay): the delay it asked for is the grant's.
    Locks.acquire("delay:6", owner="a", ttl=30)
    assert Locks.acquire("delay:6", owner="a", ttl=30, lock_delay=5) is not None
    assert Locks.get(resource="delay:6").lock_delay == timedelta(seconds=5)
    assert Locks.acquire("delay:6", owner="a", ttl=30) is not None  # a re-entry without one
    assert Locks.get(resource="delay:6").lock_delay == timedelta(seconds=5)


def test_a_release_hands_the_lock_to_a_waiter_with_the_waiters_own_lock_delay() -> None:
    Locks.acquire("delay:5", owner="a", ttl=30, lock_delay=30)

    def wait(outcome: dict[str, Any]) -> timedelta | None:
        with lock("delay:5", ttl=30, timeout=20, lock_delay=7):
            return Locks.get(resource="delay:5").lock_delay

    waiter = run_in_thread(wait)
    wait_for(lambda: LockWaiter.objects.filter(resource="delay:5").exists(), 10, "queued")
    assert Locks.release("delay:5", owner="a") is ReleaseResult.RELEASED
    waiter["thread"].join(20)
    assert waiter.get("result") == timedelta(seconds=7), waiter


def test_a_lock_delay_is_for_an_exclusive_hold_and_a_number_of_seconds() -> None:
    for bad in (-1, float("nan"), "2", True):
        with pytest.raises(InvalidArgument):
            lock("delay:4", lock_delay=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="exclusive"):
        lock("delay:4", lock_delay=2, shared=True)
    with pytest.raises(InvalidArgument, match="exclusive"):
        Locks.acquire("delay:4", owner="a", limit=2, lock_delay=2)
    assert not Locks.filter(resource="delay:4").exists()


def test_the_recipe_exports_and_leaves_no_delay_behind() -> None:
    written: list[tuple[int, str]] = []
    export_batch = run_example(
        "lock delay",
        chunks_of=lambda batch_id: ["a", "b"],
        write_chunk=lambda batch_id, chunk: written.append((batch_id, chunk)),
    )["export_batch"]
    export_batch(7)
    assert written == [(7, "a"), (7, "b")]
    assert Locks.get(resource="export:7").lock_delay is None  # released: the next starts at once
    export_batch(7)
    assert len(written) == 4
