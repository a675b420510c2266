"""A head that starts on its wake-up alone (``locking.told``, issue 46) and is
not there to hear it: SIGSTOPped, or SIGKILLed, after the release granted it
the lock and before its work. It loses the lock through the short offer lease
(``HANDOVER_LEASE``), the next waiter gets the lock within about a second, and
the fencing tokens only grow: a head that resumes never works with the grant
it slept through. With real processes."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from django.db import connections

from django_dlock import lock
from django_dlock.models import DistributedLock, LockWaiter
from tests import workers_waiting
from tests.utils import database_settings, spawn, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # MariaDB's release grants nobody: its head is woken at the holder's gate
    # and takes the lock itself (tests/test_mysql_wake.py).
    pytest.mark.skipif(
        connections["default"].vendor == "mysql", reason="MariaDB's release grants nobody"
    ),
]

Locks = DistributedLock.objects

# "About a second" (the offer lease), with room for a loaded machine.
BOUND = 2.5


@pytest.mark.parametrize("stop", [signal.SIGSTOP, signal.SIGKILL], ids=["paused", "killed"])
def test_a_head_stopped_between_its_grant_and_its_work_loses_the_lock_soon(
    stop: signal.Signals,
) -> None:
    held = Locks.acquire("told:1", owner="holder", ttl=60)
    assert held is not None
    tokens: Any = spawn.Queue()
    head = spawn.Process(
        target=workers_waiting.wait_and_report,
        args=(database_settings(), "told:1", tokens),
        daemon=True,
    )
    head.start()
    released: list[float] = []
    granted: list[tuple[str, int]] = []

    def release_once_both_wait() -> None:
        try:
            wait_for(lambda: LockWaiter.objects.filter(resource="told:1").count() == 2, 30)
            Locks.release("told:1", "holder")
            released.append(time.monotonic())
            row = Locks.get(resource="told:1")
            granted.append((row.owner, row.fencing_token))
            if stop == signal.SIGKILL:
                assert head.pid is not None
                os.kill(head.pid, signal.SIGKILL)  # granted, never started
        finally:
            connections.close_all()

    releaser = threading.Thread(target=release_once_both_wait)
    try:
        wait_for(lambda: LockWaiter.objects.filter(resource="told:1").exists(), 30, "queued")
        time.sleep(0.3)  # its look after queuing is done: it sleeps now
        assert head.pid is not None
        os.kill(head.pid, signal.SIGSTOP)
        releaser.start()
        with lock("told:1", ttl=30, timeout=15) as next_one:
            waited = time.monotonic() - released[0]
            if stop == signal.SIGSTOP:
                # Resumed while the lock is this one's, before its own look is
                # due: the wake-up with the lapsed grant is the first it reads.
                os.kill(head.pid, signal.SIGCONT)
                time.sleep(0.5)
        releaser.join(10)
        # The release granted the stopped head (an owner of its own, the next token).
        owner, token = granted[0]
        assert owner not in ("", "holder", next_one.owner)
        assert token == held.fencing_token + 1
        assert next_one.fencing_token > token
        if stop == signal.SIGSTOP:
            # The head did not work with the grant it slept through: it
            # queued again, and worked with a token of its own, later.
            assert tokens.get(timeout=30) > next_one.fencing_token
            head.join(10)
    finally:
        if head.is_alive() and head.pid is not None:
            os.kill(head.pid, signal.SIGCONT)
            head.kill()
    assert waited < BOUND, f"the next waiter waited {waited:.2f} s after the release"
