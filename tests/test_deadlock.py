"""Who waits for whom: a waiter that holds locks writes them on its ticket,
and a cycle of waiters, each holding what the next waits for, is broken by
``LockDeadlock`` in the waiter that joined it last; the others go on and get
their locks. A chain that ends in a holder that does not wait is no cycle."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.conf import settings

from django_dlock import LockDeadlock, lock
from django_dlock.locking.deadlock import QueuedWaiter, _cycle_through
from django_dlock.models import DistributedLock
from tests import workers_deadlock
from tests.utils import database_settings, run_in_processes, run_in_thread, spawn

Locks = DistributedLock.objects

# Far below the waits' timeout (20 s): the cycle is found by looking, not by waiting it out.
FOUND_WITHIN = 5.0


@pytest.mark.django_db(transaction=True)
def test_two_processes_waiting_for_each_other_end_with_one_deadlock() -> None:
    both_hold = spawn.Barrier(2)
    db = database_settings()
    outcomes = run_in_processes(
        workers_deadlock.hold_then_wait,
        [
            (db, "cycle:a", "cycle:b", both_hold, "one"),
            (db, "cycle:b", "cycle:a", both_hold, "two"),
        ],
    )
    assert sorted(outcome for outcome, _ in outcomes) == ["acquired", "deadlock"], outcomes
    assert max(seconds for _, seconds in outcomes) < FOUND_WITHIN, outcomes
    assert not Locks.active().exists()


@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3",
    reason="SQLite refuses until='commit'",
)
@pytest.mark.django_db(transaction=True)
def test_locks_held_until_commit_are_seen_in_a_cycle() -> None:
    """Their operations run in a thread of their own (with its own connection),
    which holds nothing itself: the ticket must still say what the caller holds."""
    both_hold, both_done = spawn.Barrier(2), spawn.Barrier(2)
    db = database_settings()
    outcomes = run_in_processes(
        workers_deadlock.hold_then_wait_until_commit,
        [
            (db, "commit-cycle:a", "commit-cycle:b", both_hold, both_done, "one"),
            (db, "commit-cycle:b", "commit-cycle:a", both_hold, both_done, "two"),
        ],
    )
    assert sorted(outcome for outcome, _ in outcomes) == ["acquired", "deadlock"], outcomes
    assert max(seconds for _, seconds in outcomes) < FOUND_WITHIN, outcomes
    assert not Locks.active().exists()  # one committed, the other rolled back


@pytest.mark.django_db(transaction=True)
def test_a_waiter_that_holds_a_lock_behind_a_holder_that_does_not_wait_waits() -> None:
    def hold_b_a_while(outcome: dict[str, Any]) -> None:
        with lock("chain:b", ttl=30):
            outcome["holding"] = True
            time.sleep(1.0)

    holder = run_in_thread(hold_b_a_while)
    while "holding" not in holder:
        time.sleep(0.01)
    with lock("chain:a", ttl=30), lock("chain:b", ttl=30, timeout=20) as held:
        assert held.fencing_token  # no LockDeadlock: the holder of b waits for nothing
    holder["thread"].join(10)


def waiter(ticket: int, resource: str, *held: str) -> QueuedWaiter:
    return QueuedWaiter(ticket, resource, "", tuple((name, f"owner-{name}") for name in held))


@pytest.mark.vendor_independent
@pytest.mark.parametrize(
    ("waiters", "cycle"),
    [
        ([waiter(1, "b", "a"), waiter(2, "a", "b")], [1, 2]),
        ([waiter(1, "b", "a"), waiter(2, "c", "b"), waiter(3, "a", "c")], [1, 2, 3]),
        ([waiter(1, "b", "a"), waiter(2, "c", "b")], None),  # a chain: 2 waits for a non-waiter
        ([waiter(1, "b", "a"), waiter(2, "c", "b"), waiter(3, "b", "c")], None),  # not through 1
        ([waiter(1, "b", "a"), waiter(2, "a", "x"), waiter(3, "a", "b")], [1, 3]),
    ],
    ids=["two", "three", "chain", "cycle-elsewhere", "among-others"],
)
def test_the_cycle_through_a_waiter(waiters: list[QueuedWaiter], cycle: list[int] | None) -> None:
    found = _cycle_through(waiters, 1)
    assert (None if found is None else [waiter.ticket for waiter in found]) == cycle


def test_a_deadlock_is_a_lock_not_acquired() -> None:
    from django_dlock import LockNotAcquired

    assert issubclass(LockDeadlock, LockNotAcquired)
