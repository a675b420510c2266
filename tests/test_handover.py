"""PostgreSQL's hand-over on release: the statement that frees a resource makes
the listening head of its queue the holder, and NOTIFYs it (SQLite's release
does the same: ``test_waiting``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_dlock.backends import backend_for
from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock, LockHold, LockWaiter, ReleaseResult
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.claim import claim_for
from django_dlock.rules.grant import GRANT_MARK, OFFER_LEASE
from django_dlock.rules.notice import read_payload
from tests.utils import postgres_backend_alive, postgres_dsn, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.requires_postgres]

Locks = DistributedLock.objects
CHANNEL = "dlock_spy"


@pytest.fixture
def spy() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A connection that LISTENs on the channel the test's tickets carry."""
    with psycopg.connect(postgres_dsn(), autocommit=True) as listening:
        listening.execute(f"LISTEN {CHANNEL}")
        yield listening


def notified(
    listening: psycopg.Connection[tuple[object, ...]], *, every: bool = False
) -> list[str]:
    """The first ticket NOTIFYed on the channel within a second; ``every``:
    each one NOTIFYed within half a second, in order."""
    if every:
        return [note.payload for note in listening.notifies(timeout=0.5)]
    return [note.payload for note in listening.notifies(timeout=1, stop_after=1)]


def queue(
    resource: str,
    owner: str,
    *,
    channel: str = CHANNEL,
    ttl: float | None = 30,
    shared: bool = False,
    limit: int | None = None,
    pid: int | None = None,
) -> int:
    claim = claim_for(
        resource, owner, ttl or 30, kind=LockKind(shared=shared or limit is not None, limit=limit)
    )
    backend = backend_for("default")
    ticket = backend.queue.enqueue_waiter(claim, 60, channel=channel, listener_pid=pid)[0]
    if ttl is None:  # a waiter of a version before the ttl column
        LockWaiter.objects.filter(pk=ticket).update(ttl=None)
    return ticket


def holder(resource: str) -> tuple[str, int]:
    lock = DistributedLock.objects.get(resource=resource)
    return lock.owner, lock.fencing_token


def test_a_release_hands_the_lock_to_the_listening_head(spy: psycopg.Connection) -> None:
    held = Locks.acquire("hand:1", "holder", ttl=60, label="the holder's")
    assert held is not None
    head, behind = queue("hand:1", "head"), queue("hand:1", "behind")

    assert Locks.release("hand:1", "holder") is ReleaseResult.RELEASED
    [payload] = notified(spy)  # told once the hand-over committed
    ticket, notice = read_payload(payload)

    # The head holds it, offered for the hand-over's lease, with the next
    # token, before it did anything; its ticket is gone, the one behind it still queued.
    lock = DistributedLock.objects.get(resource="hand:1")
    assert (lock.owner, lock.fencing_token) == ("head", held.fencing_token + 1)
    assert lock.expires_at - lock.acquired_at == timedelta(seconds=OFFER_LEASE)
    # The NOTIFY told the head all of it: the grant as written, to start on it
    # alone (the one-statement release's; the portable one names the ticket).
    assert ticket == head
    if backend_for("default").features.one_statement:
        assert notice is not None
        assert (notice.pk, notice.fencing_token) == (lock.pk, lock.fencing_token)
        assert (notice.acquired_at, notice.expires_at) == (lock.acquired_at, lock.expires_at)
    assert (lock.hold_count, lock.label) == (1, "")
    assert list(LockWaiter.objects.values_list("pk", flat=True)) == [behind]
    backend = backend_for("default")
    # Taking the offer makes it the head's for its ttl.
    granted = backend.granted("hand:1", "head", head, timedelta(seconds=30))
    assert granted is not None and granted.fencing_token == lock.fencing_token
    assert granted.expires_at - lock.acquired_at >= timedelta(seconds=30)
    assert backend.granted("hand:1", "behind", behind, timedelta(seconds=30)) is None

    # The last reader's release hands it over too.
    assert Locks.release("hand:1", "head") is ReleaseResult.RELEASED
    assert holder("hand:1")[0] == "behind"
    Locks.release("hand:1", "behind")
    assert Locks.acquire("hand:1", "reader", ttl=60, shared=True) is not None
    writer = queue("hand:1", "writer")
    assert Locks.release("hand:1", "reader") is ReleaseResult.RELEASED
    assert holder("hand:1")[0] == "writer"
    assert not LockWaiter.objects.filter(pk=writer).exists()


def test_a_reentrant_holder_hands_over_only_with_its_last_hold() -> None:
    assert Locks.acquire("hand:2", "holder", ttl=60, reentrant=True) is not None
    assert Locks.acquire("hand:2", "holder", ttl=60, reentrant=True) is not None
    head = queue("hand:2", "head")
    assert Locks.release("hand:2", "holder") is ReleaseResult.DECREMENTED
    assert holder("hand:2")[0] == "holder"
    assert Locks.release("hand:2", "holder") is ReleaseResult.RELEASED
    assert holder("hand:2")[0] == "head"
    assert not LockWaiter.objects.filter(pk=head).exists()


@pytest.mark.parametrize(
    "head",
    [
        {"channel": ""},  # it polls: nothing would tell it
        {"ttl": None},  # its process predates the ttl column
        {"shared": True, "channel": ""},  # a reader that polls
    ],
    ids=["polling", "no-ttl", "polling-reader"],
)
def test_a_head_that_cannot_be_handed_the_lock_takes_it_itself(head: dict[str, object]) -> None:
    assert Locks.acquire("hand:3", "holder", ttl=60) is not None
    ticket = queue("hand:3", "head", **head)  # type: ignore[arg-type]
    assert Locks.release("hand:3", "holder") is ReleaseResult.RELEASED
    assert holder("hand:3")[0] == ""
    assert LockWaiter.objects.filter(pk=ticket).exists()


def readers_behind_a_writer(resource: str) -> tuple[list[int], int]:
    """A writer holding ``resource``; three listening readers queued, a polling
    one among them, then a writer and a reader behind it. The readers that fit
    once it is free (listening), and the writer's ticket."""
    assert Locks.acquire(resource, "holder", ttl=60) is not None
    first, second = queue(resource, "r1", shared=True), queue(resource, "r2", shared=True)
    queue(resource, "polling", shared=True, channel="")
    third = queue(resource, "r3", shared=True)
    writer = queue(resource, "writer")
    queue(resource, "late reader", shared=True)
    return [first, second, third], writer


@pytest.mark.parametrize("freed_by", ["release", "force_release"])
def test_a_release_wakes_every_reader_that_fits_at_once(
    spy: psycopg.Connection, freed_by: str
) -> None:
    # Not one by one, each waking the next after its own acquisition: every
    # reader queued before the next writer is admitted now.
    readers, _ = readers_behind_a_writer(f"hand:6:{freed_by}")
    freed = getattr(Locks, freed_by)(
        f"hand:6:{freed_by}", *(["holder"] if freed_by == "release" else [])
    )
    assert freed
    told = [read_payload(payload) for payload in notified(spy, every=True)]
    assert [ticket for ticket, _ in told] == readers
    # The force-release's one statement grants nobody: they take their holds.
    if freed_by == "force_release" and backend_for("default").features.one_statement:
        assert holder(f"hand:6:{freed_by}")[0] == ""
        return
    assert_granted(f"hand:6:{freed_by}", told, ["r1", "r2", "r3"])


def assert_granted(resource: str, told: list[tuple[int, Any]], owners: list[str]) -> None:
    """The release granted ``owners`` (in queue order) their shared holds, the
    next tokens, for the offer lease, and told each its own (``rules.notice``);
    their tickets are gone."""
    header = DistributedLock.objects.get(resource=resource)
    holds = LockHold.objects.filter(resource=resource, owner__in=owners).order_by("fencing_token")
    assert [hold.owner for hold in holds] == owners
    first = header.fencing_token - len(owners) + 1
    assert [hold.fencing_token for hold in holds] == list(range(first, header.fencing_token + 1))
    for hold, (_, notice) in zip(holds, told, strict=True):
        assert notice is not None
        assert (notice.pk, notice.fencing_token) == (hold.pk, hold.fencing_token)
        assert (notice.acquired_at, notice.expires_at) == (hold.acquired_at, hold.expires_at)
        assert notice.lease == OFFER_LEASE
    assert header.owner == SHARED_HOLDERS and header.lock_delay == GRANT_MARK
    assert not LockWaiter.objects.filter(pk__in=[ticket for ticket, _ in told]).exists()


@pytest.mark.parametrize("holding", [1, 2], ids=["last-permit", "one-of-two"])
def test_a_release_wakes_as_many_permit_waiters_as_it_leaves_permits(
    spy: psycopg.Connection, holding: int
) -> None:
    # A semaphore of 3: when its last holder leaves, the three permit waiters
    # first in line are woken at once, not each by the one before it after its
    # own acquisition; when another holder stays, one fewer.
    resource = f"hand:permits:{holding}"
    for index in range(holding):
        assert Locks.acquire(resource, f"holder{index}", ttl=60, limit=3) is not None
    waiters = [queue(resource, f"w{index}", limit=3) for index in range(4)]
    assert notified(spy, every=True) == []  # queueing woke nobody

    assert Locks.release(resource, "holder0") is ReleaseResult.RELEASED
    free = 3 - (holding - 1)
    told = [read_payload(payload) for payload in notified(spy, every=True)]
    assert [ticket for ticket, _ in told] == waiters[:free]
    # Granted: each its permit, told in its wake-up.
    assert_granted(resource, told, [f"w{index}" for index in range(free)])
    assert DistributedLock.objects.get(resource=resource).hold_count == 3


def test_a_writer_leaving_the_head_wakes_the_readers_behind_it(spy: psycopg.Connection) -> None:
    assert Locks.acquire("hand:7", "holder", ttl=60) is not None
    writer = queue("hand:7", "writer", channel="")  # it polls: not handed the lock
    readers = [queue("hand:7", f"r{n}", shared=True) for n in range(3)]
    queue("hand:7", "writer 2")
    assert Locks.release("hand:7", "holder") is ReleaseResult.RELEASED
    assert notified(spy, every=True) == []  # the head polls; the readers queue behind a writer
    # The writer's wait ends before its next look: it leaves the queue.
    assert backend_for("default").queue.give_up_waiting("hand:7", writer)
    assert notified(spy, every=True) == [str(ticket) for ticket in readers]


def test_a_reader_at_the_head_wakes_no_reader_behind_a_writer(spy: psycopg.Connection) -> None:
    assert Locks.acquire("hand:8", "holder", ttl=60) is not None
    head = queue("hand:8", "r1", shared=True)
    queue("hand:8", "writer", channel="")  # polling: not woken, but it still queues first
    queue("hand:8", "r2", shared=True)
    assert Locks.release("hand:8", "holder") is ReleaseResult.RELEASED
    assert [read_payload(note)[0] for note in notified(spy, every=True)] == [head]


def test_a_head_whose_process_is_gone_is_passed_over() -> None:
    # A waiter killed while queued: its listener's server process is gone.
    with psycopg.connect(postgres_dsn()) as doomed:
        gone_pid = doomed.info.backend_pid
    wait_for(lambda: not postgres_backend_alive(gone_pid))
    assert Locks.acquire("hand:4", "holder", ttl=60) is not None
    queue("hand:4", "dead", pid=gone_pid)
    alive = queue("hand:4", "alive", pid=connection_pid())
    assert Locks.release("hand:4", "holder") is ReleaseResult.RELEASED
    assert holder("hand:4")[0] == "alive"
    assert not LockWaiter.objects.filter(pk=alive).exists()


def test_a_head_that_leaves_during_the_release_is_passed_over() -> None:
    # The head's DELETE of its ticket (it gave up) commits while the release
    # runs, after the release's snapshot was taken: the release must neither
    # hand the lock to it nor wake it, but the waiter behind it.
    assert Locks.acquire("hand:5", "holder", ttl=60) is not None
    leaving, behind = queue("hand:5", "leaving"), queue("hand:5", "behind")
    answers: list[ReleaseResult] = []
    with psycopg.connect(postgres_dsn()) as head:
        head.execute("DELETE FROM distributed_lock_waiters WHERE id = %s", [leaving])

        def release() -> None:
            try:
                answers.append(Locks.release("hand:5", "holder"))
            finally:
                connection.close()

        releasing = threading.Thread(target=release)
        releasing.start()
        wait_for(lambda: waiting_for_a_lock(head.info.backend_pid))
        head.commit()
    releasing.join(10)
    assert answers == [ReleaseResult.RELEASED]
    assert holder("hand:5")[0] == "behind"
    assert not LockWaiter.objects.filter(pk=behind).exists()


def test_a_reader_that_leaves_during_the_release_is_not_granted(spy: psycopg.Connection) -> None:
    # As the head above: a reader beside the head whose DELETE of its ticket
    # commits while the release runs gets no hold, and the tokens stay in a row.
    assert Locks.acquire("hand:9", "holder", ttl=60) is not None
    first = queue("hand:9", "r1", shared=True)
    leaving = queue("hand:9", "r2", shared=True)
    third = queue("hand:9", "r3", shared=True)
    with psycopg.connect(postgres_dsn()) as other:
        other.execute("DELETE FROM distributed_lock_waiters WHERE id = %s", [leaving])

        def release() -> None:
            try:
                assert Locks.release("hand:9", "holder") is ReleaseResult.RELEASED
            finally:
                connection.close()

        releasing = threading.Thread(target=release)
        releasing.start()
        wait_for(lambda: waiting_for_a_lock(other.info.backend_pid))
        other.commit()
    releasing.join(10)
    told = [read_payload(payload) for payload in notified(spy, every=True)]
    # (The leaving one may be woken in vain: its wake-up was read in the statement's snapshot.)
    granted = [(ticket, notice) for ticket, notice in told if notice is not None]
    assert [ticket for ticket, _ in granted] == [first, third]
    assert {ticket for ticket, notice in told if notice is None} <= {leaving}
    assert_granted("hand:9", granted, ["r1", "r3"])
    assert not LockHold.objects.filter(resource="hand:9", owner="r2").exists()


def connection_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def waiting_for_a_lock(blocker: int) -> bool:
    """Whether some session waits for a lock that ``blocker``'s session holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)))",
            [blocker],
        )
        return bool(cursor.fetchone()[0])
