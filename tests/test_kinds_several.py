"""Several resources at once: all or none, in one transaction, never a part each
(CONTRACT.md, "Lock kinds")."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from django_dlock import LockNotAcquired, lock
from django_dlock.models import DistributedLock, ReleaseResult
from tests import workers_kinds
from tests.utils import database_settings, run_in_processes, spawn

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def test_acquire_all_takes_every_lock_with_its_own_token() -> None:
    holds = Locks.acquire_all(["b", "a", ("c", "shared")], owner="w", ttl=30)
    assert holds is not None
    assert [(hold.resource, hold.mode) for hold in holds] == [
        ("b", "exclusive"),
        ("a", "exclusive"),
        ("c", "shared"),
    ]
    assert len({hold.fencing_token for hold in holds}) >= 1
    assert Locks.release_all(["a", "b", "c"], "w") == [ReleaseResult.RELEASED] * 3
    assert all(Locks.holders(name) == [] for name in "abc")


def test_one_held_lock_means_none_is_taken() -> None:
    Locks.acquire("y", owner="other", ttl=30)
    assert Locks.acquire_all(["x", "y", "z"], owner="w", ttl=30) is None
    assert Locks.holders("x") == [] and Locks.holders("z") == []
    assert [hold.owner for hold in Locks.holders("y")] == ["other"]


def test_bad_lists_are_refused() -> None:
    for resources in ([], ["a", "a"], [("a", "sometimes")], ["a b"]):
        with pytest.raises(ValidationError):
            Locks.acquire_all(resources, owner="w", ttl=30)


def test_lock_of_a_list_holds_them_together_and_releases_them_together() -> None:
    with lock(["p", ("q", "shared")], ttl=30) as held:
        assert held.resources == ["p", "q"]
        assert set(held.fencing_tokens) == {"p", "q"}
        assert Locks.acquire("p", owner="x", ttl=30) is None
        assert Locks.acquire("q", owner="x", ttl=30, shared=True) is not None
        Locks.release("q", "x")
        with pytest.raises(LockNotAcquired), lock(["q", "p"], timeout=0.1):
            pass
    assert Locks.holders("p") == [] and Locks.holders("q") == []


def test_opposite_orders_in_processes_finish_without_deadlock_or_a_part_each() -> None:
    start = spawn.Barrier(4)
    orders = [["m", "n"], ["n", "m"], ["n", "m", "o"], ["o", "m"]]
    results = run_in_processes(
        workers_kinds.take_both, [(database_settings(), names, 15, start) for names in orders]
    )
    assert [len(worker) for worker in results] == [15] * 4
    spans = sorted(span for worker in results for span in worker)
    # Every pair of the sets overlaps in "m", "n" or "o": no two ever held at once.
    for before, after in zip(spans, spans[1:], strict=False):
        assert before[1] <= after[0]
