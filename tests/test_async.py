"""The async API: the manager's twins and ``async with lock(...)``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import connections
from django.db.backends.signals import connection_created

from django_dlock import LockNotAcquired, LockNotOwned, lock, threads
from django_dlock.locking import waiting
from django_dlock.locking.renewer import Renewer
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult
from django_dlock.signals import lock_acquired

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


# -- cancellation ----------------------------------------------------------------------


@pytest.fixture
def acquisitions_paused() -> Iterator[tuple[threading.Event, threading.Event]]:
    """(entered, proceed): an acquisition by an owner other than "holder" stops
    in its thread, having taken the lock, until ``proceed`` is set."""
    entered, proceed = threading.Event(), threading.Event()

    def pause(sender: object, lock: DistributedLock, **kwargs: object) -> None:
        if lock.owner != "holder":
            entered.set()
            assert proceed.wait(30)

    lock_acquired.connect(pause)
    yield entered, proceed
    proceed.set()
    lock_acquired.disconnect(pause)


async def cancel_once_acquiring(
    coroutine: Coroutine[Any, Any, Any], paused: tuple[threading.Event, threading.Event]
) -> None:
    """Run ``coroutine`` in a task, cancel it while its thread has just taken
    the lock, and check that the cancellation reaches the caller."""
    entered, proceed = paused
    task = asyncio.create_task(coroutine)
    async with asyncio.timeout(30):
        while not entered.is_set():
            await asyncio.sleep(0.01)
    task.cancel()
    proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("timeout", [None, 60])
async def test_a_cancelled_lock_leaves_no_lock_behind(
    timeout: float | None, acquisitions_paused: tuple[threading.Event, threading.Event]
) -> None:
    async def enter() -> None:
        async with lock("async:40", ttl=60, timeout=timeout):
            pytest.fail("the block must not run")

    if timeout:  # a waiter, that gets the lock once the holder releases it
        await Locks.aacquire("async:40", "holder", ttl=60)
        waiter = asyncio.create_task(cancel_once_acquiring(enter(), acquisitions_paused))
        while not await LockWaiter.objects.filter(resource="async:40").aexists():
            await asyncio.sleep(0.01)
        await Locks.arelease("async:40", "holder")
        await waiter
    else:
        await cancel_once_acquiring(enter(), acquisitions_paused)
    assert not await is_held("async:40")
    assert not await LockWaiter.objects.aexists()


async def test_a_cancelled_aacquire_releases_what_it_took(
    acquisitions_paused: tuple[threading.Event, threading.Event],
) -> None:
    await cancel_once_acquiring(Locks.aacquire("async:41", "me", ttl=60), acquisitions_paused)
    assert not await is_held("async:41")


async def test_wait_for_timing_out_leaves_no_lock_behind(
    acquisitions_paused: tuple[threading.Event, threading.Event],
) -> None:
    entered, proceed = acquisitions_paused

    async def enter() -> None:
        async with lock("async:42", ttl=60):
            pytest.fail("the block must not run")

    async def proceed_once_acquiring() -> None:
        while not entered.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # past wait_for's timeout, so that it cancels
        proceed.set()

    helper = asyncio.create_task(proceed_once_acquiring())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(enter(), timeout=0.05)
    await helper
    assert not await is_held("async:42")


async def test_a_cancelled_exit_still_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    stopping, proceed = threading.Event(), threading.Event()
    stop = Renewer.stop

    def slow_stop(renewer: Renewer) -> None:
        stopping.set()
        assert proceed.wait(30)
        stop(renewer)

    monkeypatch.setattr(Renewer, "stop", slow_stop)

    async def hold() -> None:
        async with lock("async:43", ttl=60, auto_renew=True):
            pass

    task = asyncio.create_task(hold())
    async with asyncio.timeout(30):
        while not stopping.is_set():
            await asyncio.sleep(0.01)
        task.cancel()  # while exiting: between stopping the renewals and releasing
        with pytest.raises(asyncio.CancelledError):
            await task
        proceed.set()
        while await is_held("async:43"):  # the exit's thread goes on and releases it
            await asyncio.sleep(0.01)


# -- connections -----------------------------------------------------------------------


@pytest.fixture
def connects() -> Iterator[list[str]]:
    """The names of the threads that opened a database connection, in order."""
    opened: list[str] = []

    def record(sender: object, **kwargs: object) -> None:
        opened.append(threading.current_thread().name)

    connection_created.connect(record)
    yield opened
    connection_created.disconnect(record)


async def test_an_async_waiter_keeps_one_connection_for_its_wait(
    monkeypatch: pytest.MonkeyPatch, settings: Any, connects: list[str]
) -> None:
    assert connections["default"].settings_dict["CONN_MAX_AGE"] == 0
    settings.DLOCK_BACKOFF_MAX = 0.005  # many looks
    looks: list[int] = []
    read = waiting.queue_state
    monkeypatch.setattr(
        waiting,
        "queue_state",
        lambda *args: looks.append(1) or read(*args),  # type: ignore[func-returns-value]
    )
    await Locks.aacquire("async:50", "holder", ttl=60)
    connects.clear()

    async def wait() -> None:
        async with lock("async:50", timeout=30):
            pass

    waiter = asyncio.create_task(wait())
    async with asyncio.timeout(30):
        while len(looks) < 10:
            await asyncio.sleep(0.01)
    await Locks.arelease("async:50", "holder")
    await waiter
    # One for the wait, one for the holder's release, one for the waiter's on exit.
    assert len(connects) <= 3, connects


async def test_a_worker_threads_connection_too_old_is_replaced_before_use(
    monkeypatch: pytest.MonkeyPatch, connects: list[str]
) -> None:
    one_thread = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(threads, "_lock_threads", one_thread)
    monkeypatch.setitem(connections["default"].settings_dict, "CONN_MAX_AGE", 0.5)
    try:
        await Locks.aacquire("async:51", "me", ttl=60)
        assert len(connects) == 1  # kept: younger than CONN_MAX_AGE
        await asyncio.sleep(0.6)  # now it is older: like Django's request_started, drop it
        assert await Locks.arelease("async:51", "me") is ReleaseResult.RELEASED
        assert len(connects) == 2
    finally:
        await sync_to_async(connections.close_all, thread_sensitive=False, executor=one_thread)()
        one_thread.shutdown()


async def test_waiters_do_not_hold_up_the_shared_worker_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    two_threads = ThreadPoolExecutor(max_workers=2)
    monkeypatch.setattr(threads, "_lock_threads", two_threads)
    try:
        await Locks.aacquire("async:52", "holder", ttl=60)
        served: list[int] = []

        async def wait(number: int) -> None:
            async with lock("async:52", timeout=30):
                served.append(number)

        waiters = [asyncio.create_task(wait(number)) for number in range(3)]
        async with asyncio.timeout(30):
            while await LockWaiter.objects.filter(resource="async:52").acount() < 3:
                await asyncio.sleep(0.01)
            # More waiters than shared threads, and the holder's release still runs.
            await Locks.arelease("async:52", "holder")
            await asyncio.gather(*waiters)
        assert sorted(served) == [0, 1, 2]
    finally:
        await sync_to_async(connections.close_all, thread_sensitive=False, executor=two_threads)()
        two_threads.shutdown()
