"""The async API: the manager's twins and ``async with lock(...)``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import connections

from django_dlock import LockNotAcquired, LockNotOwned, lock
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("close_connections"),
]

Locks = DistributedLock.objects


@pytest_asyncio.fixture
async def close_connections() -> AsyncIterator[None]:
    yield
    # The test's own async ORM calls run in asgiref's shared thread, whose
    # connection would otherwise outlive the test database.
    await sync_to_async(connections.close_all)()


async def is_held(resource: str) -> bool:
    return await Locks.active().filter(resource=resource).aexists()


async def test_async_twins_of_the_manager() -> None:
    acquired = await Locks.aacquire("async:1", "me", ttl=30)
    assert acquired is not None
    assert acquired.owner == "me"
    assert await Locks.aacquire("async:1", "other") is None
    renewed = await Locks.arenew("async:1", "me", ttl=60)
    assert renewed is not None
    assert renewed.expires_at > acquired.expires_at
    assert renewed.fencing_token == acquired.fencing_token
    assert await Locks.arenew("async:1", "other") is None
    assert await Locks.arelease("async:1", "other") is ReleaseResult.FORBIDDEN
    assert await Locks.arelease("async:1", "me") is ReleaseResult.RELEASED
    assert await Locks.arelease("async:1", "me") is ReleaseResult.NOT_FOUND
    with pytest.raises(DistributedLock.DoesNotExist):
        await Locks.arenew("async:never", "me")


async def test_the_twins_run_outside_the_event_loops_thread() -> None:
    threads: list[threading.Thread] = []

    def record(sender: object, **kwargs: object) -> None:
        threads.append(threading.current_thread())

    from django_dlock.signals import lock_acquired

    lock_acquired.connect(record)
    try:
        await Locks.aacquire("async:2", "me")
    finally:
        lock_acquired.disconnect(record)
    assert threads
    assert threads[0] is not threading.current_thread()


async def test_async_with_holds_and_releases() -> None:
    async with lock("async:10", ttl=30) as held:
        assert await is_held("async:10")
        assert await Locks.aacquire("async:10", "other") is None
        assert held.fencing_token >= 1
    assert not await is_held("async:10")


async def test_async_with_without_timeout_tries_once() -> None:
    await Locks.aacquire("async:11", "holder", ttl=60)
    with pytest.raises(LockNotAcquired):
        async with lock("async:11"):
            pytest.fail("the block must not run")


async def test_async_blocking_acquire_waits_for_the_release() -> None:
    await Locks.aacquire("async:12", "holder", ttl=60)

    async def release_once_queued() -> None:
        while not await LockWaiter.objects.filter(resource="async:12").aexists():
            await asyncio.sleep(0.01)
        await Locks.arelease("async:12", "holder")

    releaser = asyncio.create_task(release_once_queued())
    async with asyncio.timeout(30), lock("async:12", timeout=30) as held:
        assert (await Locks.aget(resource="async:12")).owner == held.owner
    await releaser
    assert not await LockWaiter.objects.aexists()


async def test_async_blocking_acquire_times_out_and_leaves_the_queue() -> None:
    await Locks.aacquire("async:13", "holder", ttl=60)
    with pytest.raises(LockNotAcquired, match="within 0.3 s"):
        async with lock("async:13", timeout=0.3):
            pytest.fail("the block must not run")
    assert not await LockWaiter.objects.aexists()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    await Locks.aacquire("async:14", "holder", ttl=60)

    async def wait() -> None:
        async with lock("async:14", timeout=60):
            pytest.fail("the block must not run")

    waiter = asyncio.create_task(wait())
    while not await LockWaiter.objects.filter(resource="async:14").aexists():
        await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not await LockWaiter.objects.aexists()


async def test_async_decorator() -> None:
    @lock("async:20", ttl=30)
    async def work(value: int) -> int:
        assert await is_held("async:20")
        return value + 1

    assert await work(1) == 2
    assert not await is_held("async:20")


async def test_async_auto_renew_and_loss_on_exit() -> None:
    with pytest.raises(LockNotOwned):
        async with lock("async:30", ttl=0.6, auto_renew=True) as held:
            await asyncio.sleep(1.8)  # 3x the ttl: only renewal keeps it
            assert not held.is_lost
            assert await Locks.aacquire("async:30", "other") is None

            @sync_to_async
            def steal() -> None:
                from datetime import timedelta

                from django.utils import timezone

                Locks.filter(resource="async:30").update(
                    expires_at=timezone.now() - timedelta(seconds=1)
                )
                Locks.acquire("async:30", "thief")

            await steal()
            async with asyncio.timeout(10):  # the renewer notices
                while not held.is_lost:
                    await asyncio.sleep(0.02)
    assert held.is_lost
