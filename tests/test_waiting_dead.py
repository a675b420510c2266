"""A waiter that dies while queued, or stops answering (its process paused),
delays the others by at most about a second: the lock is never handed to it
for its ttl, and its ticket does not hold up the queue (CONTRACT.md, "Waiting
and long work"). With a real process, SIGKILLed or SIGSTOPped."""

from __future__ import annotations

import os
import signal
import time

import pytest

from django_dlock import lock
from django_dlock.models import DistributedLock, LockWaiter
from tests import workers_waiting
from tests.utils import database_settings, spawn, stop_outside_a_write, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects

# "About a second", with room for a loaded machine (it was the dead waiter's
# whole ttl, 45 s, on SQLite, and its ticket's 10 s elsewhere).
BOUND = 2.5


@pytest.mark.parametrize(
    ("stop", "then", "shared"),
    [
        (signal.SIGKILL, "released", False),
        (signal.SIGKILL, "free", False),
        (signal.SIGSTOP, "released", False),
        (signal.SIGSTOP, "free", False),
        (signal.SIGSTOP, "free", True),
    ],
    ids=["killed-released", "killed-free", "paused-released", "paused-free", "paused-reader"],
)
def test_a_waiter_that_stops_while_queued_delays_the_next_one_little(
    stop: signal.Signals, then: str, shared: bool
) -> None:
    Locks.acquire("dead:1", owner="holder", ttl=60)
    waiter = spawn.Process(
        target=workers_waiting.wait_for_a_long_time,
        args=(database_settings(), "dead:1"),
        daemon=True,
    )
    waiter.start()
    try:
        wait_for(lambda: LockWaiter.objects.filter(resource="dead:1").exists(), 30, "queued")
        time.sleep(0.3)  # its look after queuing is done: it sleeps now
        assert waiter.pid is not None
        if stop == signal.SIGKILL:
            os.kill(waiter.pid, stop)
            waiter.join(10)
        else:
            # Not inside a write of SQLite's file, which a loaded machine may
            # still find it in: the release would find the file locked (CI).
            stop_outside_a_write(waiter.pid)
        if then == "released":
            Locks.release("dead:1", "holder")
        else:  # the holder's lock expires, no release tells anyone
            Locks.filter(resource="dead:1").update(owner="")
        started = time.monotonic()
        with lock("dead:1", ttl=30, timeout=15, shared=shared) as held:
            waited = time.monotonic() - started
        assert held.owner != "holder"
        if stop == signal.SIGSTOP:
            # Woken again, the waiter has lost its place, not its wait: it
            # queues again and gets the lock.
            os.kill(waiter.pid, signal.SIGCONT)
            wait_for(
                lambda: Locks.filter(resource="dead:1").exclude(owner="").exists(),
                15,
                "the resumed waiter holds the lock",
            )
    finally:
        if waiter.is_alive() and waiter.pid is not None:
            os.kill(waiter.pid, signal.SIGCONT)
            waiter.kill()
    assert waited < BOUND, f"the next acquirer waited {waited:.2f} s"
