"""MariaDB's wake-up (``backends/mysql/wake.py``): the head of a queue waits at
the resource's gate, a named lock its holder holds, and the release lets it
through; with real processes."""

from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from django_dlock.models import DistributedLock, LockWaiter
from tests import workers_wake
from tests.utils import database_settings, run_in_thread, spawn, wait_for

pytestmark = [
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("mysql"),
        reason="needs MariaDB (DATABASE_URL=mysql://...)",
    ),
    pytest.mark.django_db(transaction=True),
]

Locks = DistributedLock.objects


def at_the_gate() -> int:
    """How many sessions wait in ``GET_LOCK`` for a named lock now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE STATE = 'User lock' AND INFO LIKE '%%GET_LOCK%%'"
        )
        return int(cursor.fetchone()[0])


def test_a_release_wakes_the_blocked_head_at_once() -> None:
    """20 turns: the waiter queues, blocks at the gate, and the holder releases
    0.3-0.4 s later. A head that polled would then sleep in backoff windows of
    a quarter to half a second (DLOCK_BACKOFF_MAX 0.5 s): a median of tens of
    milliseconds at best. Woken by the release it is a few."""
    rounds, rng = 20, random.Random(46)
    go, got = spawn.Queue(), spawn.Queue()
    waiter = spawn.Process(
        target=workers_wake.take_turns_when_told,
        args=(database_settings(), "wake", rounds, go, got),
        daemon=True,
    )
    waiter.start()
    latencies = []
    try:
        for number in range(rounds):
            resource = f"wake:{number}"
            Locks.acquire(resource, owner="holder", ttl=60)
            go.put(True)
            queued = LockWaiter.objects.filter(resource=resource)
            wait_for(queued.exists, 30, "the waiter queued")
            wait_for(at_the_gate, 10, "the waiter blocked at the gate")
            time.sleep(rng.uniform(0.3, 0.4))
            released = time.monotonic()
            Locks.release(resource, "holder")
            latencies.append(got.get(timeout=30) - released)
    finally:
        waiter.kill()
    assert statistics.median(latencies) < 0.05, sorted(latencies)


def test_a_waiter_killed_at_the_gate_delays_nobody() -> None:
    """The head is SIGKILLed while it blocks in GET_LOCK at the gate; the waiter
    queued behind it (another process) gets the lock within about a second of
    the release: the dead head kept no gate, and its ticket stops counting."""
    Locks.acquire("wake:dead", owner="holder", ttl=60)
    got = spawn.Queue()
    head = spawn.Process(
        target=workers_wake.wait_once, args=(database_settings(), "wake:dead", got), daemon=True
    )
    head.start()
    behind = None
    try:
        wait_for(at_the_gate, 30, "the head blocked at the gate")
        behind = spawn.Process(
            target=workers_wake.wait_once,
            args=(database_settings(), "wake:dead", got),
            daemon=True,
        )
        behind.start()
        wait_for(lambda: LockWaiter.objects.filter(resource="wake:dead").count() == 2, 30)
        assert head.pid is not None
        os.kill(head.pid, signal.SIGKILL)
        head.join(10)
        released = time.monotonic()
        Locks.release("wake:dead", "holder")
        waited = got.get(timeout=30) - released
    finally:
        head.kill()
        if behind is not None:
            behind.kill()
    assert waited < 2.5, f"the waiter behind the dead head waited {waited:.2f} s"


def test_a_session_that_kept_a_lost_holds_gate_holds_up_nobody() -> None:
    """This session takes the lock and keeps its gate after the lock expired
    (as a paused holder's does); another owner takes it over on another
    connection, and its release still wakes the head at once: each hold has
    a gate of its own."""
    Locks.acquire("wake:stale", owner="old", ttl=0.3)  # this connection holds old's gate
    # Once it expired, another owner takes it over on another connection,
    # which keeps it (and its gate) until told to release it.
    took, release = threading.Event(), threading.Event()

    def new_holder(_: object) -> float:
        wait_for(lambda: Locks.acquire("wake:stale", owner="new", ttl=60), 5)
        took.set()
        release.wait(60)
        released = time.monotonic()
        Locks.release("wake:stale", "new")
        return released

    holder = run_in_thread(new_holder)
    assert took.wait(10), holder
    got = spawn.Queue()
    waiter = spawn.Process(
        target=workers_wake.wait_once, args=(database_settings(), "wake:stale", got), daemon=True
    )
    waiter.start()
    try:
        wait_for(at_the_gate, 30, "the waiter blocked at the gate")
        time.sleep(0.3)  # past its first, short sleep (NEW_WAITER_LOOKS_AGAIN)
        # Blocked again after its second look (under CI's load that look may still be
        # running 0.3 s on: a single glance at that moment found nobody, ci30).
        wait_for(at_the_gate, 30, "the waiter blocked at the gate after its second look")
        release.set()
        holder["thread"].join(10)
        waited = got.get(timeout=30) - holder["result"]
    finally:
        release.set()
        waiter.kill()
    # Blocked on old's gate, it would sleep its listening sleep out (2 s).
    assert waited < 1.0, f"the waiter woke {waited:.2f} s after the release"


def test_a_gate_is_named_without_a_secret_key_too() -> None:
    """Scripts and benchmarks configure Django without ``SECRET_KEY``: naming a
    gate must not raise there (a waiter would fail, a holder's take too)."""
    from django.test import override_settings

    from django_dlock.backends.mysql.wake import GATE, gate_name

    with override_settings(SECRET_KEY=""):
        unkeyed = gate_name("db", "t", "r", "o")
    keyed = gate_name("db", "t", "r", "o")
    assert unkeyed.startswith(GATE) and keyed.startswith(GATE)
    assert unkeyed != keyed != gate_name("db", "t", "r", "other")
    assert len(keyed) <= 64  # MariaDB's longest lock name


def test_a_waiters_take_that_fails_after_taking_the_gate_gives_it_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A waiter's take (``mysql/queued_take.py``) takes the new holder's gate in
    its SELECT, before it leaves the queue: where the transaction then fails,
    the lock is not taken, and the gate goes too (a gate kept would make the
    next waiters block on a holder that is not one)."""
    from dataclasses import replace
    from datetime import timedelta

    from django.db import DatabaseError

    from django_dlock.backends import backend_for
    from django_dlock.backends.mysql.wake import gate_of
    from django_dlock.rules.claim import Claim

    Locks.acquire("wake:fails", owner="before", ttl=30)
    Locks.release("wake:fails", "before")  # a row, released
    backend = backend_for("default")
    claim = Claim(resource="wake:fails", owner="a", duration=timedelta(seconds=30))
    ticket, _ = backend.queue.enqueue_waiter(claim, 30)
    queued = backend._queued[True]  # type: ignore[attr-defined]
    monkeypatch.setattr(queued, "leave", "DELETE FROM dlock_no_such_table WHERE id = %s")
    with pytest.raises(DatabaseError):
        backend.take(replace(claim, ticket=ticket))
    gate = gate_of(connection, backend.tables.table, "wake:fails", "a")
    with connection.cursor() as cursor:
        cursor.execute("SELECT IS_USED_LOCK(%s)", [gate])
        assert cursor.fetchone()[0] is None
    assert Locks.get(resource="wake:fails").owner == ""


def test_the_second_in_line_waits_at_the_heads_gate_and_never_polls() -> None:
    """The chain: the head blocks at the holder's gate, the waiter behind it
    (another process) at the head's. The holder releases; the head takes the
    lock and releases it at once; the second gets it without one look that
    saw the lock free or held by the head (a counter of its polls, in the
    worker), in queue order. Before the chain it polled: it never blocked at
    a gate while the head waited."""
    Locks.acquire("wake:chain", owner="holder", ttl=60)
    got, second_got = spawn.Queue(), spawn.Queue()
    head = spawn.Process(
        target=workers_wake.wait_once, args=(database_settings(), "wake:chain", got), daemon=True
    )
    head.start()
    second = None
    try:
        wait_for(at_the_gate, 30, "the head blocked at the holder's gate")
        second = spawn.Process(
            target=workers_wake.wait_counting_polls,
            args=(database_settings(), "wake:chain", "holder", second_got),
            daemon=True,
        )
        second.start()
        wait_for(lambda: at_the_gate() == 2, 30, "the second blocked at the head's gate")
        Locks.release("wake:chain", "holder")
        head_took = got.get(timeout=30)
        second_took, polls = second_got.get(timeout=30)
    finally:
        head.kill()
        if second is not None:
            second.kill()
    assert head_took < second_took
    assert polls == 0, f"the second in line polled {polls} times"


def test_a_waiter_that_gives_up_gives_its_gate_up() -> None:
    """A waiter holds its own gate while it waits at the holder's (the waiter
    behind it may block there), and gives it up when its wait ends without the
    lock, though its connection stays open: a gate kept would hold the next
    waiter at a gate nobody opens."""
    from django_dlock import LockNotAcquired, lock
    from django_dlock.backends import backend_for
    from django_dlock.backends.mysql.wake import gate_of

    Locks.acquire("wake:gives-up", owner="holder", ttl=60)
    gate = gate_of(connection, backend_for("default").tables.table, "wake:gives-up", "w1")
    gate_held = "SELECT IS_USED_LOCK(%s) IS NOT NULL"
    gave_up, done = threading.Event(), threading.Event()

    def waiter(_: object) -> None:
        with pytest.raises(LockNotAcquired), lock("wake:gives-up", owner="w1", ttl=30, timeout=1.5):
            pass
        gave_up.set()
        done.wait(30)  # its connection stays open until then

    outcome = run_in_thread(waiter)
    try:
        wait_for(at_the_gate, 30, "the waiter blocked at the holder's gate")
        with connection.cursor() as cursor:
            cursor.execute(gate_held, [gate])
            held_while_waiting = cursor.fetchone()[0]
        assert gave_up.wait(30), outcome
        with connection.cursor() as cursor:
            cursor.execute(gate_held, [gate])
            held_after = cursor.fetchone()[0]
    finally:
        done.set()
        outcome["thread"].join(10)
    assert "error" not in outcome, outcome
    assert held_while_waiting == 1
    assert held_after == 0
