"""Reentrant holds: a hold count per holder, and ``lock(reentrant=True)`` keyed by
thread or asyncio task (CONTRACT.md, "Lock kinds")."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from django_dlock import LockNotAcquired, lock
from django_dlock.exceptions import LockHeldByCaller
from django_dlock.locking.renewer import renewal_thread
from django_dlock.models import DistributedLock, ReleaseResult
from django_dlock.service import LockService

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def stored(resource: str) -> DistributedLock:
    return DistributedLock.objects.get(resource=resource)


class TestManager:
    def test_the_holder_adds_a_hold_with_the_same_token_and_a_later_expiry(self) -> None:
        first = Locks.acquire("re:1", owner="w1", ttl=30, reentrant=True)
        again = Locks.acquire("re:1", owner="w1", ttl=60, reentrant=True)
        assert first is not None and again is not None
        assert (first.hold_count, again.hold_count) == (1, 2)
        assert again.fencing_token == first.fencing_token
        assert again.expires_at > first.expires_at
        assert stored("re:1").hold_count == 2

    def test_release_answers_decremented_until_the_last(self) -> None:
        for _ in range(3):
            Locks.acquire("re:2", owner="w1", ttl=30, reentrant=True)
        assert Locks.release("re:2", "w1") is ReleaseResult.DECREMENTED
        assert Locks.release("re:2", "w1") is ReleaseResult.DECREMENTED
        assert Locks.acquire("re:2", owner="w2", ttl=30) is None  # still held
        assert Locks.release("re:2", "w1") is ReleaseResult.RELEASED
        assert Locks.release("re:2", "w1") is ReleaseResult.NOT_FOUND
        taken = Locks.acquire("re:2", owner="w2", ttl=30)
        assert taken is not None and taken.hold_count == 1

    def test_a_plain_reacquire_extends_without_adding_a_hold(self) -> None:
        Locks.acquire("re:3", owner="w1", ttl=30, reentrant=True)
        again = Locks.acquire("re:3", owner="w1", ttl=30)
        assert again is not None and again.hold_count == 1
        assert Locks.release("re:3", "w1") is ReleaseResult.RELEASED

    def test_another_owner_is_refused_and_a_force_release_takes_every_hold(self) -> None:
        Locks.acquire("re:4", owner="w1", ttl=30, reentrant=True)
        Locks.acquire("re:4", owner="w1", ttl=30, reentrant=True)
        assert Locks.acquire("re:4", owner="w2", ttl=30, reentrant=True) is None
        assert Locks.release("re:4", "w2") is ReleaseResult.FORBIDDEN
        assert Locks.force_release("re:4") is True
        assert Locks.acquire("re:4", owner="w2", ttl=30) is not None


class TestLock:
    def test_nested_in_its_thread_it_reenters_without_waiting(self) -> None:
        with lock("re:10", reentrant=True, timeout=5) as outer:
            with lock("re:10", reentrant=True, timeout=5) as inner:
                assert inner is outer
                assert stored("re:10").hold_count == 2
            assert stored("re:10").hold_count == 1
            assert stored("re:10").owner == outer.owner
        assert Locks.holders("re:10") == []

    def test_a_nested_lock_that_is_not_reentrant_raises_at_once(self) -> None:
        with lock("re:11", timeout=5):
            started = time.monotonic()
            with pytest.raises(LockHeldByCaller, match="reentrant=True"), lock("re:11", timeout=5):
                pass
            assert time.monotonic() - started < 1
        with lock("re:11", reentrant=True), pytest.raises(LockHeldByCaller), lock("re:11"):
            pass

    def test_another_thread_is_another_holder(self) -> None:
        outcome: list[str] = []

        def other() -> None:
            try:
                with lock("re:12", reentrant=True):
                    outcome.append("entered")
            except LockNotAcquired:
                outcome.append("refused")
            finally:
                connection.close()

        with lock("re:12", reentrant=True):
            thread = threading.Thread(target=other)
            thread.start()
            thread.join(10)
        assert outcome == ["refused"]

    def test_auto_renew_renews_the_hold_once_whatever_its_count(self) -> None:
        with lock("re:13", reentrant=True, auto_renew=True, ttl=30) as outer:
            with lock("re:13", reentrant=True, auto_renew=True, ttl=30):
                renewed = renewal_thread("default")._due
                assert [handle.resource for handle in renewed] == ["re:13"]
            assert outer in renewal_thread("default")._due
        assert outer not in renewal_thread("default")._due


@pytest.mark.asyncio
async def test_nested_in_its_task_it_reenters_but_a_child_task_is_another_holder() -> None:
    async with lock("re:20", reentrant=True) as outer:
        async with lock("re:20", reentrant=True) as inner:
            assert inner is outer
            holds = await asyncio.to_thread(lambda: Locks.holders("re:20"))
            assert holds[0].hold_count == 2

        async def child() -> str:
            try:
                async with lock("re:20", reentrant=True):
                    return "entered"
            except LockNotAcquired:
                return "refused"

        assert await asyncio.create_task(child()) == "refused"


def test_a_release_that_fails_leaves_the_thread_free_to_lock_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A database down at the exit raises its error, and the next lock() of the
    thread is not taken for a nested one (found by the torture run)."""
    from django.db import OperationalError

    def down(*args: object, **kwargs: object) -> None:
        raise OperationalError("the database is down")

    with pytest.raises(OperationalError), lock("re:30"):
        monkeypatch.setattr(LockService, "release", down)  # the manager's and lock()'s
    monkeypatch.undo()
    Locks.force_release("re:30")
    with lock("re:30") as again:
        assert again.resource == "re:30"
