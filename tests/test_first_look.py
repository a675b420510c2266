"""A blocking ``lock()``'s first look is its take (``Claim.behind_queue``): where
the lock is free and nobody is queued, the uncontended turn is the take and the
release alone; where someone is queued, the take refuses even a free lock, and
the acquirer queues behind (issue 45)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.process import BaseProcess

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dlock import LockNotAcquired, lock
from django_dlock.backends import backend_for
from django_dlock.models import DistributedLock, LockHold, LockWaiter
from tests import workers_waiting
from tests.testapp.models import Counter
from tests.utils import database_settings, expire, spawn, stop_outside_a_write, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def statements(enter: bool, *, timeout: float | None) -> list[str]:
    """The statements of an uncontended ``lock()``'s enter (or exit), blocking
    with ``timeout``, on a resource whose row exists."""
    with lock("look:warm", ttl=30):
        pass
    held = lock("look:warm", ttl=30, timeout=timeout)
    with CaptureQueriesContext(connection) as captured:
        held.__enter__()
        if enter:
            sent = [query["sql"] for query in captured.captured_queries]
    with CaptureQueriesContext(connection) as captured:
        held.__exit__(None, None, None)
    return sent if enter else [query["sql"] for query in captured.captured_queries]


def test_an_uncontended_blocking_lock_sends_the_take_and_the_release_alone() -> None:
    blocking, alone = statements(True, timeout=30), statements(True, timeout=None)
    released = statements(False, timeout=30)
    vendor, one_statement = connection.vendor, backend_for("default").features.one_statement
    if vendor == "postgresql" and one_statement:
        assert (len(blocking), len(released)) == (1, 1)
    elif vendor == "sqlite":
        # One statement each way (``backends/sqlite/alone.py``), the take asking
        # that nobody is queued.
        assert (len(blocking), len(released)) == (1, 1)
        assert "distributed_lock_waiters" in blocking[0]
        assert "distributed_lock_waiters" not in alone[0]
    elif vendor == "mysql" and one_statement:
        # The UPDATE and the SELECT of what it decided, each way.
        assert (len(blocking), len(released)) == (2, 2)
    else:
        # The portable take: its lock transaction, which counts the queue inside
        # (one statement more than a non-blocking take's), and no look before it.
        assert len(blocking) == len(alone) + 1
        assert blocking[0] == alone[0] and blocking[-1] == alone[-1]


@pytest.fixture
def stopped_waiter() -> Iterator[BaseProcess]:
    """A process waiting for ``look:1``, queued, then stopped (SIGSTOP) so that it
    cannot take the lock when it comes free; resumed at the end."""
    Counter.objects.create(name="look:1")
    Locks.acquire("look:1", owner="holder", ttl=60)
    waiter = spawn.Process(
        target=workers_waiting.wait_and_record,
        args=(database_settings(), "look:1", 0, "queued"),
        daemon=True,
    )
    waiter.start()
    try:
        wait_for(lambda: LockWaiter.objects.filter(resource="look:1").exists(), 30, "queued")
        assert waiter.pid is not None
        stop_outside_a_write(waiter.pid)
        yield waiter
    finally:
        if waiter.pid is not None and waiter.is_alive():
            os.kill(waiter.pid, signal.SIGCONT)
        waiter.join(30)
        waiter.kill()


@pytest.mark.parametrize("freed", ["expired", "released"])
def test_a_blocking_acquirer_does_not_pass_a_queued_waiter_of_a_free_lock(
    stopped_waiter: BaseProcess, freed: str
) -> None:
    # The holder's lease runs out (as a crashed holder's does), or a release
    # left the row nobody's (as it does for a head that polls): the head is
    # stopped, the lock is free, and someone is queued for it.
    expire("look:1")
    if freed == "released":
        DistributedLock.objects.filter(resource="look:1").update(owner="")
    assert not Locks.holders("look:1")
    # A later blocking acquirer queues behind it rather than take the free lock
    # (its wait ends before it would pass a head that stopped answering).
    with pytest.raises(LockNotAcquired), lock("look:1", ttl=30, timeout=0.3):
        pass
    assert LockWaiter.objects.filter(resource="look:1").count() == 1
    assert not Locks.holders("look:1")  # nobody took it meanwhile
    assert stopped_waiter.pid is not None
    os.kill(stopped_waiter.pid, signal.SIGCONT)
    stopped_waiter.join(30)
    assert stopped_waiter.exitcode == 0
    assert Counter.objects.get(name="look:1:queued").value == 1


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="a guarded block holds SQLite's write lock"
)
def test_a_blocking_writer_queues_at_once_beside_a_readers_guarded_block() -> None:
    # Beside shared holders the portable take decides, and its FOR UPDATE would
    # wait for a reader's held.atomic(): the first take refuses instead, and the
    # wait queues, so its timeout holds rather than the block's length.
    reader = Locks.acquire("look:2", owner="reader", ttl=30, shared=True)
    assert isinstance(reader, LockHold)  # a reader's hold
    entered, leave = threading.Event(), threading.Event()

    def guarded() -> None:
        with reader.atomic():
            entered.set()
            leave.wait(10)
        connection.close()

    block = threading.Thread(target=guarded, daemon=True)
    block.start()
    try:
        assert entered.wait(10)
        started = time.monotonic()
        with pytest.raises(LockNotAcquired), lock("look:2", ttl=30, timeout=0.3):
            pass
        assert time.monotonic() - started < 2.0
    finally:
        leave.set()
        block.join(10)
