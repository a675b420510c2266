"""A head that starts on its wake-up alone (``locking.told``, issue 46) and is
not there to hear it: SIGSTOPped, or SIGKILLed, after the release granted it
the lock and before its work. It loses the lock through the short offer lease
(``OFFER_LEASE``), the next waiter gets the lock within about a second, and
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
from django_dlock.models import DistributedLock, LockHold, LockWaiter
from django_dlock.service import service_for
from tests import workers_waiting
from tests.utils import database_settings, spawn, stop_outside_a_write, wait_for

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
        stop_outside_a_write(head.pid)
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


def grants_shared() -> bool:
    return bool(service_for("default").features.grants_shared_on_release)


def queued_listening(resource: str, count: int) -> bool:
    waiters = LockWaiter.objects.filter(resource=resource)
    return waiters.count() == count and not waiters.filter(channel="").exists()


@pytest.mark.parametrize(
    "kind", [{"shared": True}, {"limit": 2}], ids=["readers of one release", "permits"]
)
def test_two_waiters_granted_by_releases_start_without_a_statement_of_their_own(
    kind: dict[str, Any],
) -> None:
    if not grants_shared():
        pytest.skip("this database's release wakes readers and permits, and grants them nothing")
    resource = f"told:{next(iter(kind))}"
    # Readers wait for a writer; permit waiters for the two permits' holders.
    holders, held_as = (["holder"], {}) if "shared" in kind else (["h1", "h2"], kind)
    for holder in holders:
        assert Locks.acquire(resource, owner=holder, ttl=60, **held_as)
    last = max(Locks.holders(resource), key=lambda hold: hold.fencing_token).fencing_token
    results: Any = spawn.Queue()
    readers = [
        spawn.Process(
            target=workers_waiting.share_and_report,
            args=(database_settings(), resource, results, kind, 1.5),
            daemon=True,
        )
        for _ in range(2)
    ]
    try:
        for reader in readers:
            reader.start()
        wait_for(lambda: queued_listening(resource, 2), 30, "both queued, listening")
        for holder in holders:  # the writer's release grants both readers, a permit's one waiter
            Locks.release(resource, holder)
        # The releases themselves gave them their holds, the next tokens, for the offer lease.
        granted = LockHold.objects.filter(resource=resource, fencing_token__gt=last)
        assert sorted(granted.values_list("fencing_token", flat=True)) == [last + 1, last + 2]
        answers = [results.get(timeout=30) for _ in range(4)]
        for reader in readers:
            reader.join(30)
    finally:
        for reader in readers:
            reader.kill()
    started = sorted(answer for answer in answers if answer[0] != "lost")
    # Each worked with the hold the release granted it, never one it took
    # itself (that would be "INSERT _holds"). Each started on its wake-up
    # alone, having written nothing, unless it read the wake-up too late to
    # trust the lease (a quarter of it gone: at a load of 10 on two cores, a
    # process may wait that long for the CPU): then it extended the hold in
    # one write, its "UPDATE _holds" and "UPDATE s" (the lock's row, where the
    # hold's new expiry passes the row's: not beside a permit's holder of a
    # longer ttl).
    assert [token for token, _ in started] == [last + 1, last + 2]
    told_late = (["UPDATE _holds", "UPDATE s"], ["UPDATE _holds"])
    assert all(writes in ([], *told_late) for _, writes in started), started
    assert any(writes == [] for _, writes in started), started
    assert [answer for answer in answers if answer[0] == "lost"] == [("lost", None)] * 2


@pytest.mark.parametrize("stop", [signal.SIGSTOP, signal.SIGKILL], ids=["paused", "killed"])
def test_a_reader_stopped_between_its_grant_and_its_work_loses_its_hold_soon(
    stop: signal.Signals,
) -> None:
    if not grants_shared():
        pytest.skip("this database's release wakes readers, and grants them nothing")
    held = Locks.acquire("told:r", owner="holder", ttl=60)
    assert held is not None
    results: Any = spawn.Queue()
    reader = spawn.Process(
        target=workers_waiting.share_and_report,
        args=(database_settings(), "told:r", results, {"shared": True}, 0.2),
        daemon=True,
    )
    reader.start()
    released: list[float] = []
    granted: list[int] = []

    def release_once_both_wait() -> None:
        try:
            wait_for(lambda: LockWaiter.objects.filter(resource="told:r").count() == 2, 30)
            Locks.release("told:r", "holder")
            released.append(time.monotonic())
            granted.extend(
                LockHold.objects.filter(resource="told:r").values_list("fencing_token", flat=True)
            )
            if stop == signal.SIGKILL:
                assert reader.pid is not None
                os.kill(reader.pid, signal.SIGKILL)  # granted, never started
        finally:
            connections.close_all()

    releaser = threading.Thread(target=release_once_both_wait)
    try:
        wait_for(lambda: queued_listening("told:r", 1), 30, "queued")
        time.sleep(0.3)  # its look after queuing is done: it sleeps now
        assert reader.pid is not None
        stop_outside_a_write(reader.pid)
        releaser.start()
        # A writer behind the reader: it takes the lock once the reader's
        # granted hold lapses with its offer lease.
        with lock("told:r", ttl=30, timeout=15) as writer:
            waited = time.monotonic() - released[0]
            if stop == signal.SIGSTOP:
                os.kill(reader.pid, signal.SIGCONT)  # the wake-up with the lapsed grant
                time.sleep(0.5)
        releaser.join(10)
        # The release granted the stopped reader a hold: the next token.
        assert granted == [held.fencing_token + 1]
        assert writer.fencing_token > granted[0]
        if stop == signal.SIGSTOP:
            # It did not work with the hold it slept through: it queued again,
            # and read with a token of its own, after the writer's.
            token, _ = results.get(timeout=30)
            assert token > writer.fencing_token
            reader.join(10)
    finally:
        if reader.is_alive() and reader.pid is not None:
            os.kill(reader.pid, signal.SIGCONT)
            reader.kill()
    assert waited < BOUND, f"the writer waited {waited:.2f} s after the release"
