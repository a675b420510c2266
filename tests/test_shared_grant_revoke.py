"""What ends a reader's or a permit's told grant before its waiter started on
it (issue 46, ``backends.shared_grants``; the review of readers46): a release
granted the waiter its hold and told it so, and the waiter starts on its
notice alone, as late as it reads it, while three quarters of the offer lease
are left. So an operator's release of that hold, or ``release_all``'s under
its owner, revokes it as an exclusive grant is (``rules.grant``): it keeps its
place, nobody's, until the offer lease from the grant ends, and no writer (nor
a permit beyond the limit) gets in beside a waiter about to start. And a
waiter told too late takes the hold it was told of, never another hold of its
owner's. With the waiter's listener thread and the release's datagram, on the
database's file."""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_dlock.kinds import LockKind
from django_dlock.locking.waiting import Wait
from django_dlock.models import DistributedLock, LockHold, LockWaiter, ReleaseResult
from django_dlock.rules.claim import claim_for
from django_dlock.service import service_for
from tests import workers_waiting
from tests.utils import database_settings, postgres_backend_alive, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects
READER = LockKind(shared=True)
LEASE = timedelta(seconds=1)  # the offer lease (``rules.grant.OFFER_LEASE``)


@pytest.fixture(autouse=True)
def _grants_shared() -> None:
    if not service_for("default").features.grants_shared_on_release:
        pytest.skip("this database's release wakes readers and permits, and grants them nothing")


def queued(resource: str, owner: str, kind: LockKind = READER) -> Wait:
    """A waiter of ``owner``, listening, queued behind the holders of ``resource``."""
    wait = Wait(claim_for(resource, owner, 30, kind=kind), 10, "default")
    assert isinstance(wait.step(), float)
    return wait


def granted(resource: str, waits: list[Wait]) -> LockHold:
    """The hold the last release granted the first of ``waits``, once each was told."""
    wait_for(lambda: all(wait.wakeup.as_head for wait in waits), 10, "the releases' wake-ups")
    assert not LockWaiter.objects.filter(resource=resource).exists()
    return LockHold.objects.get(resource=resource, owner=waits[0].owner)


def renewed(resource: str, owner: str) -> bool:
    """Whether ``owner`` could extend its hold of ``resource`` (as its renewer would)."""
    try:
        return Locks.renew(resource, owner, 30) is not None
    except DistributedLock.DoesNotExist:  # released (the only hold's grant, revoked)
        return False


def finish(*waits: Wait) -> None:
    for wait in waits:
        wait.cancel()
        wait.finish()


@pytest.mark.parametrize("how", ["force_release", "release_all"])
@pytest.mark.parametrize("beside", [False, True], ids=["its only hold", "beside another"])
def test_a_readers_grant_released_before_it_started_keeps_writers_out_for_its_lease(
    how: str, beside: bool
) -> None:
    """A writer's release granted r1 (and r2) their holds; an operator's
    release of r1's hold alone, or ``release_all`` under r1's owner, came
    before r1 read its notice. Before: the lock came free at once (beside: at
    r2's release), and a writer took it while r1 could still start."""
    resource = f"revoke:{how}:{beside}"
    Locks.acquire(resource, "writer", ttl=60)
    waits = [queued(resource, "r1")] + ([queued(resource, "r2")] if beside else [])
    try:
        Locks.release(resource, "writer")
        grant = granted(resource, waits)
        if how == "release_all":
            assert Locks.release_all([resource], "r1") == [ReleaseResult.RELEASED]
        else:
            assert Locks.force_release(resource, owner="r1")
        if beside:  # r2 starts on its notice, or takes its hold told late, and is done
            assert not isinstance(waits[1].step(), float)
            assert Locks.release(resource, "r2") == ReleaseResult.RELEASED
        # Revoked, not free (unless this test was slower than the lease).
        taker = Locks.acquire(resource, "taker", ttl=60)
        assert not renewed(resource, "r1")  # nobody's: r1 cannot extend it
        told = waits[0].step()
        if not isinstance(told, float):  # it read its notice in time: it started first
            assert told.fencing_token == grant.fencing_token
        taker = taker or wait_for(lambda: Locks.acquire(resource, "taker", ttl=60), 5, "taken")
        # Nobody got it before the offer lease from the grant ended.
        assert taker.acquired_at >= grant.acquired_at + LEASE
        assert taker.fencing_token > grant.fencing_token
    finally:
        finish(*waits)


def test_a_permits_grant_released_before_it_started_keeps_its_permit_for_its_lease() -> None:
    """A semaphore of 2: h1's release granted p1 its permit; an operator
    released p1's hold before p1 read its notice. Before: the permit went to
    the next taker at once, and p1 could start beside h2 and it: 3 of 2."""
    permits = LockKind(limit=2)
    for holder in ("h1", "h2"):
        assert Locks.acquire("revoke:permits", holder, ttl=60, limit=2)
    wait = queued("revoke:permits", "p1", permits)
    try:
        Locks.release("revoke:permits", "h1")
        grant = granted("revoke:permits", [wait])
        assert Locks.force_release("revoke:permits", owner="p1")
        # The revoked hold keeps its place, nobody's, until the offer lease ends.
        [kept] = LockHold.objects.filter(resource="revoke:permits").exclude(owner="h2")
        assert kept.fencing_token == grant.fencing_token and kept.owner != "p1"
        assert kept.expires_at == grant.acquired_at + LEASE
        # Nobody's: not shown (an operator could not release it by name).
        assert [hold.owner for hold in Locks.holders("revoke:permits")] == ["h2"]
        assert not renewed("revoke:permits", "p1")
        taker = wait_for(
            lambda: Locks.acquire("revoke:permits", "taker", ttl=60, limit=2), 5, "taken"
        )
        assert taker.acquired_at >= grant.acquired_at + LEASE
        assert [hold.owner for hold in Locks.holders("revoke:permits")] == ["h2", "taker"]
    finally:
        finish(wait)


def test_a_freed_permit_is_not_granted_to_a_waiter_whose_process_is_gone() -> None:
    """A semaphore of 2; its waiter's process was killed while queued (its
    ticket counts on until it lapses). h1's release frees a permit: no hold
    goes to the dead waiter, and it holds nobody up."""
    for holder in ("h1", "h2"):
        assert Locks.acquire("dead:permits", holder, ttl=60, limit=2)
    results: Any = spawn.Queue()
    waiter = spawn.Process(
        target=workers_waiting.share_and_report,
        args=(database_settings(), "dead:permits", results, {"limit": 2}, 0.1),
        daemon=True,
    )
    waiter.start()
    try:
        wait_for(lambda: _listening_ticket("dead:permits"), 30, "queued, listening")
        assert waiter.pid is not None
        os.kill(waiter.pid, signal.SIGKILL)
        waiter.join(10)
        if connection.vendor == "postgresql":
            # The server knows the waiter dead once its listener's server process
            # has ended, a moment after the kill (CI's portable step released first).
            pid = LockWaiter.objects.get(resource="dead:permits").listener_pid
            wait_for(
                lambda: not postgres_backend_alive(pid), 10, "the listener's server process to end"
            )
        Locks.release("dead:permits", "h1")
        assert [hold.owner for hold in Locks.holders("dead:permits")] == ["h2"]
        if connection.vendor == "sqlite":  # (PostgreSQL's queue passes a dead waiter by)
            assert not LockWaiter.objects.filter(resource="dead:permits").exists()
        assert Locks.acquire("dead:permits", "next", ttl=60, limit=2) is not None
    finally:
        waiter.kill()


def test_a_reader_that_gives_up_its_lapsed_grant_leaves_its_owners_other_hold() -> None:
    """An explicit owner's reader, r1, was granted a hold; the grant lapsed
    before it read its notice, and another of r1's handles took a hold of its
    own since. Then r1's wait ended (cancelled): it takes the hold it was told
    of to give it back to the next waiter at once. Before: its take extended
    whatever hold its owner had, and it released the other handle's hold."""
    Locks.acquire("late:1", "writer", ttl=60)
    wait = queued("late:1", "r1")
    try:
        Locks.release("late:1", "writer")
        grant = granted("late:1", [wait])
        # Past the grant's lease (r1 never read its notice), its owner holds anew.
        wait_for(lambda: not Locks.holders("late:1"), 5, "the grant lapsed")
        other = Locks.acquire("late:1", "r1", ttl=60, shared=True)
        assert other is not None and other.fencing_token > grant.fencing_token
    finally:
        finish(wait)  # gives back what the release granted it, if it still stands
    [held] = Locks.holders("late:1")
    assert (held.owner, held.fencing_token) == ("r1", other.fencing_token)
    assert held.expires_at == other.expires_at  # nor extended


def test_a_reader_that_gives_up_its_grant_in_time_gives_it_to_the_next() -> None:
    """The same, with the grant still standing: its hold is released (the
    token it was told matches), and the next waiter need not wait out the lease."""
    Locks.acquire("late:2", "writer", ttl=60)
    wait = queued("late:2", "r1")
    try:
        Locks.release("late:2", "writer")
        granted("late:2", [wait])
    finally:
        finish(wait)
    assert Locks.holders("late:2") == []
    assert Locks.acquire("late:2", "next", ttl=60) is not None


def test_a_release_grants_one_waiter_of_an_owner_and_its_last_release_clears_the_mark() -> None:
    """Two readers of one (explicit) owner queued behind a writer: its release
    grants the first of them its hold, not both (a second hold of one owner
    would replace the first: PostgreSQL's release statement failed on it, and
    SQLite's counted two holds where one was left). And the last release of
    the granted hold leaves no grant's mark (a zero lock-delay) on the row."""
    resource = "revoke:one-owner"
    Locks.acquire(resource, "writer", ttl=60)
    waits = [queued(resource, "A"), queued(resource, "A")]
    try:
        Locks.release(resource, "writer")
        wait_for(lambda: waits[0].wakeup.as_head, 10, "the first waiter's wake-up")
        assert [hold.owner for hold in LockHold.objects.filter(resource=resource)] == ["A"]
        assert Locks.get(resource=resource).hold_count == 1
        assert LockWaiter.objects.filter(resource=resource).count() == 1  # the second waits on
        waits[1].cancel()
        waits[1].finish()
        assert Locks.release(resource, "A") is ReleaseResult.RELEASED
        row = Locks.get(resource=resource)
        assert (row.owner, row.lock_delay) == ("", None)
    finally:
        finish(*waits)


def _listening_ticket(resource: str) -> bool:
    """A ticket with its listener's channel and, on PostgreSQL, its server process
    (until the listener writes it, a ticket's waiter counts as alive)."""
    tickets = LockWaiter.objects.filter(resource=resource).exclude(channel="")
    if connection.vendor == "postgresql":
        tickets = tickets.exclude(listener_pid=None)
    return tickets.exists()
