"""Library bugs the torture run and the failover run found, each shown by a
small test that failed before its fix (the runs are in docs/reliability.md)."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from django_dlock import LockExpired, LockNotAcquired, lock
from django_dlock.backends import backend_for
from django_dlock.kinds import LockKind
from django_dlock.locking.waiting import Wait
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult
from django_dlock.rules.claim import Claim, claim_for
from django_dlock.rules.clock import DatabaseNow
from tests import workers_torture
from tests.utils import (
    database_settings,
    is_waiting_on_a_lock,
    postgres_dsn,
    run_in_processes,
    run_in_thread,
    spawn,
    wait_for,
)
from tools.torture.asked import Asked
from tools.torture.history import Recorder, read_events
from tools.torture.operations import Operations
from tools.torture.store import TransactionStore

pytestmark = pytest.mark.django_db(transaction=True)

ON_SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
Locks = DistributedLock.objects


def test_purges_beside_all_or_nothing_acquisitions_raise_no_deadlock() -> None:
    """The torture run's PostgreSQL short profile: ``purge_expired()`` and
    ``lock([...])`` raised ``OperationalError: deadlock detected`` (the
    contract: no lost race surfaces as an exception); on MariaDB the purge
    raises error 1213. Two processes purge and two take three of four locks at
    once, until one raises (5 s at most)."""
    start = spawn.Barrier(4)
    results = run_in_processes(
        workers_torture.purge_or_take_all,
        [(database_settings(), purging, 5.0, start) for purging in (True, True, False, False)],
    )
    assert [error for errors in results for error in errors] == []


def test_a_reentrant_waiter_handed_the_lock_holds_it_once() -> None:
    """The torture run's SQLite long profile (dev run): a ``lock(reentrant=True)``
    that waited behind a reader was granted with a hold count of 2; its exit
    raised ``LockExpired`` and its owner kept the lock until the ttl ran out.
    Three processes enter ``lock(reentrant=True)`` and three read beside them
    (a reader admitted beside others wakes the head of the queue early), until
    one entry holds twice (6 s at most)."""
    start, found = spawn.Barrier(6), spawn.Event()
    readers = (False, False, False, True, True, True)
    results = run_in_processes(
        workers_torture.reenter_or_read,
        [(database_settings(), reader, 6.0, start, found) for reader in readers],
    )
    assert [wrong for process in results for wrong in process] == []


@pytest.mark.parametrize(
    "kind", [{}, {"shared": True}, {"limit": 2}], ids=["exclusive", "shared", "permit"]
)
def test_a_reentry_into_a_lost_hold_is_no_reentry(kind: dict[str, Any]) -> None:
    """The torture run's SQLite long profile (dev run): an operator
    force-released a ``lock(reentrant=True)``'s hold, then the holder entered
    it again; the re-entry got token 155 where the handle kept 138, the inner
    exit released the new grant (lock() raised ``LockExpired``), and a release
    by the handle's owner succeeded after others had held the lock. A
    re-entry adds a hold to the grant it has, or says that grant was lost (and
    takes no new one)."""
    with pytest.raises(LockExpired), lock("found:lost", reentrant=True, ttl=30, **kind) as held:
        Locks.force_release("found:lost")  # an operator; the lock is free now
        with lock("found:lost", reentrant=True, **kind):
            pytest.fail("re-entered a hold that was lost")
    assert held.is_lost
    assert Locks.holders("found:lost") == []


@pytest.mark.requires_postgres
def test_no_token_is_issued_twice_beside_purges() -> None:
    """The torture run's PostgreSQL long profile (dev run): token 876 of a
    resource went to an exclusive holder, and 10 ms after its release to the
    exclusive part of an ``acquire_all`` (invariant 2). Two processes take and
    release readers' holds of one resource, one purges, for 10 s: no token may
    go to two owners (the contract: larger than every token issued earlier,
    also after purges)."""
    start = spawn.Barrier(3)
    results = run_in_processes(
        workers_torture.read_or_purge,
        [(database_settings(), purging, 10.0, start) for purging in (False, False, True)],
    )
    owners: dict[int, set[str]] = {}
    for token, owner in (taken for process in results for taken in process):
        owners.setdefault(token, set()).add(owner)
    assert {token: sorted(o) for token, o in owners.items() if len(o) > 1} == {}


@pytest.mark.parametrize("shared", [False, True], ids=["downgrade", "upgrade"])
def test_a_change_of_mode_of_a_lost_hold_says_it_was_lost(shared: bool) -> None:
    """The torture run's SQLite long profile: an operator force-released a
    writer's hold, another writer took the lock and wrote, released it, then
    the first one's ``downgrade()`` succeeded (a new reader's grant): it was
    never told, and the two writers' increments of the guarded counter met
    (invariants 1 and 5). A change of mode is of the hold one has."""
    with contextlib.suppress(LockExpired), lock("found:mode", shared=shared, ttl=30) as held:
        DistributedLock.objects.force_release("found:mode")  # an operator; the lock is free now
        with pytest.raises((LockExpired, LockNotAcquired)):
            held.upgrade() if shared else held.downgrade()


@pytest.mark.parametrize("kind", [{}, {"limit": 2}], ids=["writer", "permit"])
def test_a_writer_is_admitted_once_the_last_valid_reader_has_released(kind: dict[str, Any]) -> None:
    """The failover run (PostgreSQL through PgBouncer, CI): a reader's release
    raised as the leader died, so its hold expired unreleased. The last
    reader's release then left the resource's row showing shared holders
    (PostgreSQL's one-statement release goes by the row's count of holds,
    which still counted the lost one), and writers were told "not acquired"
    with nobody holding the lock, for as long as new readers kept the row's
    expiry ahead (a semaphore's permit: "another kind of lock")."""
    locks = DistributedLock.objects
    assert locks.acquire("doc", owner="reader-lost", ttl=0.3, shared=True) is not None
    kept = locks.acquire("doc", owner="reader-kept", ttl=30, shared=True)
    assert kept is not None
    wait_for(lambda: [h.owner for h in locks.holders("doc")] == ["reader-kept"], what="expiry")
    assert locks.release("doc", "reader-kept") is ReleaseResult.RELEASED

    taken = locks.acquire("doc", owner="next", ttl=30, **kind)

    assert taken is not None
    assert taken.fencing_token > kept.fencing_token
    assert [h.owner for h in locks.holders("doc")] == ["next"]


@pytest.mark.requires_postgres
def test_a_reentry_that_waited_for_a_force_release_takes_no_new_grant() -> None:
    """The torture run's PostgreSQL long profile: a ``lock(shared=True,
    reentrant=True)`` entered its hold again while an operator force-released
    the resource; the re-entry's statement waited for the force-release's lock
    on the resource's row, and read the reader's hold in a snapshot from before
    it: it took a new grant (token 5005 where the handle kept 5004). Here
    another session force-releases (as ``force_release`` writes) while the
    re-entry waits for it."""
    import psycopg

    locks = DistributedLock.objects
    hold = locks.acquire("doc", owner="reader", ttl=30, shared=True, reentrant=True)
    assert hold is not None
    reentry = Claim(
        "doc",
        "reader",
        timedelta(seconds=30),
        kind=LockKind.shared_lock(reentrant=True),
        held_token=hold.fencing_token,
    )
    with (
        psycopg.connect(postgres_dsn(), autocommit=False) as operator,
        psycopg.connect(postgres_dsn(), autocommit=True) as admin,
    ):
        operator.execute("SELECT 1 FROM distributed_locks WHERE resource = 'doc' FOR UPDATE")
        operator.execute("DELETE FROM distributed_lock_holds WHERE resource = 'doc'")
        operator.execute(
            "UPDATE distributed_locks SET owner = '', expires_at = now(), \"limit\" = NULL "
            "WHERE resource = 'doc'"
        )

        def enter_again(outcome: dict[str, Any]) -> object:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            return backend_for("default").take(reentry)

        outcome = run_in_thread(enter_again)
        wait_for(lambda: is_waiting_on_a_lock(admin, outcome.get("pid")), 20, "the re-entry")
        operator.commit()
        outcome["thread"].join(timeout=30)

    assert "error" not in outcome
    assert outcome["result"].row is None  # the grant it meant is gone: no re-entry
    assert locks.holders("doc") == []


def _granted_then_force_released(resource: str, *, release_all: bool = False) -> Wait:
    """A waiter queued behind a holder whose release handed it ``resource``
    and told it so; an operator force-released the grant before it looked
    (or ``release_all`` released it under the head's owner)."""
    Locks.acquire(resource, "holder", ttl=60)
    wait = Wait(claim_for(resource, "head", 30), 10, "default")
    assert isinstance(wait.step(), float)  # queued behind the holder
    Locks.release(resource, "holder")
    assert DistributedLock.objects.get(resource=resource).owner == "head"
    assert not LockWaiter.objects.exists()
    wait_for(lambda: wait.wakeup.as_head, 10, "the release's wake-up")
    if release_all:
        assert Locks.release_all([resource], "head") == [ReleaseResult.RELEASED]
    else:
        assert Locks.force_release(resource)
    return wait


def test_a_waiter_whose_handed_lock_was_force_released_queues_again() -> None:
    """The torture run's PostgreSQL long profile: a reader was admitted past a
    queued writer (invariant 10). A release had handed the lock to the writer,
    an operator force-released it before the writer looked, and another took
    it: the writer's ticket had gone with the hand-over, and it waited on
    unqueued, so no release named it and readers passed it unseen. It queues
    again now. (The revoked grant is nobody's until its offer lease ends:
    ``rules.grant``; the taker comes after that.)"""
    if not backend_for("default").features.grants_on_release:
        pytest.skip("this database's releases do not hand the lock over")
    wait = _granted_then_force_released("host:8")
    try:
        assert Locks.acquire("host:8", "taker", ttl=60) is None  # revoked, not free yet
        wait_for(lambda: Locks.acquire("host:8", "taker", ttl=60) is not None, 5, "taken")

        assert isinstance(wait.step(), float)  # the taker holds it: the head waits on
        assert list(LockWaiter.objects.values_list("owner", flat=True)) == ["head"]
        assert Locks.acquire("host:8", "reader", ttl=60, shared=True) is None
        Locks.release("host:8", "taker")
        assert DistributedLock.objects.get(resource="host:8").owner == "head"
    finally:
        wait.cancel()
        wait.finish()


@pytest.mark.parametrize("release_all", [False, True], ids=["force_release", "release_all"])
def test_a_head_that_starts_on_a_revoked_grant_started_before_any_next_holder(
    release_all: bool,
) -> None:
    """The told grant's finding (issue 46): the head starts on its wake-up
    alone, as late as it reads it. An operator's force-release between the
    release and the head's start left the lock free at once, another took it,
    and the head began its section after the taker's, beside it. Now the
    revoked grant is kept from everyone until its offer lease ends: the head
    that starts on it starts first, and its extension fails (it learns of the
    loss as any revoked holder), and the next holder's token is larger."""
    if not backend_for("default").features.grants_on_release:
        pytest.skip("this database's releases do not hand the lock over")
    features = backend_for("default").features
    if connection.vendor == "postgresql" and not features.one_statement:
        pytest.skip("the portable release's wake-up names the ticket alone: the head takes it")
    wait = _granted_then_force_released("host:9", release_all=release_all)
    try:
        told = wait.step()
        assert not isinstance(told, float)  # started on the wake-up alone
        assert Locks.acquire("host:9", "taker", ttl=60) is None  # nobody's meanwhile
        with pytest.raises(DistributedLock.DoesNotExist):  # revoked: released, no extension
            Locks.renew("host:9", "head", 30)
        row = DistributedLock.objects.get(resource="host:9")
        assert row.owner == ""
        # Nobody's until the offer lease from the grant's start has ended.
        assert row.expires_at == row.acquired_at + timedelta(seconds=1)
        wait_for(lambda: Locks.acquire("host:9", "taker", ttl=60) is not None, 5, "taken")
        assert DistributedLock.objects.get(resource="host:9").fencing_token > told.fencing_token
    finally:
        wait.cancel()
        wait.finish()


def test_the_history_records_a_queuing_only_for_the_ticket(tmp_path: Path) -> None:
    """The same run's checker judged the writer from a later "queued" event:
    the take that leaves the queue names the waiters' table too."""
    Locks.acquire("queued:1", "holder", ttl=60)
    recorder = Recorder(tmp_path / "history", "w")
    operations = Operations(recorder, TransactionStore(), random.Random(0))
    # An operator's force-release hands nothing over: the waiter takes the lock itself.
    freed = threading.Timer(0.5, lambda: Locks.force_release("queued:1"))
    freed.start()
    context = lock("queued:1", owner="writer", ttl=30, timeout=30)
    with operations.queue_watch("queued:1", "writer", Asked()), context:
        pass
    freed.join()
    recorder.close()
    events = list(read_events(tmp_path / "history"))
    assert [event["op"] for event in events] == ["queued"]


def test_the_history_records_every_queuing_of_a_session(tmp_path: Path) -> None:
    """PostgreSQL sends the ticket's INSERT once per session, prepared, and then
    runs it by name: a long profile of 2026-12-05 missed those queuings and
    judged their waiters as never queued (invariant 17)."""
    Locks.acquire("queued:2", "holder", ttl=60)
    recorder = Recorder(tmp_path / "history", "w")
    operations = Operations(recorder, TransactionStore(), random.Random(0))
    for _ in range(3):
        context = lock("queued:2", owner="writer", ttl=30, timeout=0.2)
        watched = operations.queue_watch("queued:2", "writer", Asked())
        with watched, pytest.raises(LockNotAcquired), context:
            pass
    recorder.close()
    events = list(read_events(tmp_path / "history"))
    assert [event["op"] for event in events] == ["queued"] * 3


@contextlib.contextmanager
def _another_session_blocking_takes(resource: str) -> Iterator[None]:
    """Another session holds what a lock transaction on ``resource`` waits for:
    SQLite's write lock; on MariaDB the lock's row (``FOR UPDATE``)."""
    if ON_SQLITE:
        other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.rollback()
            other.close()
        return
    import MySQLdb  # type: ignore[import-untyped]

    params = connection.get_connection_params()
    params.pop("conv", None)
    session = MySQLdb.connect(**params)
    try:
        session.cursor().execute(
            f"SELECT 1 FROM {DistributedLock._meta.db_table} WHERE resource = %s FOR UPDATE",  # noqa: S608
            [resource],
        )
        yield
    finally:
        session.rollback()
        session.close()


@pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL's take waits for the row within its one statement, ahead of later takes",
)
def test_a_writer_stuck_past_its_ticket_takes_no_lock() -> None:
    """The torture run's SQLite long profile: a reader was admitted past a
    queued writer (invariant 10). The writer, ``lock(timeout=0.216)``, waited
    for SQLite's write lock (another process held it) until its ticket lapsed,
    1 s past its deadline; the reader that came then was rightly admitted, and
    the writer's take still won the lock 3.7 s past its deadline, after the
    reader. Here another session holds what the writer's take waits for (on
    MariaDB the lock's row) until its ticket lapsed: the take is refused, the
    call raises ``LockNotAcquired``, and the lock is free for a reader."""
    Locks.acquire("stuck", "holder", ttl=60)
    writer = run_in_thread(
        lambda _: run_in_processes(
            workers_torture.wait_as_writer, [(database_settings(), "stuck", 0.8)]
        )[0]
    )
    wait_for(lambda: LockWaiter.objects.filter(owner="writer").exists(), 30, "the writer's ticket")
    # The holder's lock runs out in 0.3 s, while another session blocks
    # lock transactions: the writer sees the lock free and waits in its take.
    assert Locks.renew("stuck", "holder", ttl=0.3) is not None
    with _another_session_blocking_takes("stuck"):
        live = LockWaiter.objects.filter(expires_at__gt=DatabaseNow())
        wait_for(lambda: not live.exists(), 5, "the ticket to lapse")
        assert writer["thread"].is_alive()  # past its deadline, in its take
    writer["thread"].join(timeout=30)

    assert "error" not in writer
    assert writer["result"].get("refused"), writer["result"]
    assert not LockWaiter.objects.exists()
    assert Locks.acquire("stuck", "reader", ttl=30, shared=True) is not None


def test_a_writer_whose_ticket_lapsed_queues_again_at_the_back() -> None:
    """The same finding, where time is left: a writer whose ticket lapsed (its
    process paused longer than a ticket lives) was passed by the readers that
    came meanwhile, and then kept its old place, so the next look could take
    the lock as the queued writer. It queues again at the back, and holds off
    later readers from then on."""
    assert Locks.acquire("lapse", "reader-1", ttl=60, shared=True) is not None
    wait = Wait(claim_for("lapse", "writer", 30), 10, "default")
    try:
        assert isinstance(wait.step(), float)  # queued behind the reader
        first = wait.ticket
        assert first is not None
        assert Locks.acquire("lapse", "reader-2", ttl=60, shared=True) is None
        LockWaiter.objects.filter(pk=first).update(expires_at=DatabaseNow())  # it lapsed
        assert Locks.acquire("lapse", "reader-3", ttl=60, shared=True) is not None

        assert isinstance(wait.step(), float)
        assert wait.ticket is not None and wait.ticket > first
        assert list(LockWaiter.objects.values_list("pk", flat=True)) == [wait.ticket]
        assert Locks.acquire("lapse", "reader-4", ttl=60, shared=True) is None
    finally:
        wait.cancel()
        wait.finish()
