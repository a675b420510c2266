"""Shared and exclusive holds of one resource: a read-write lock with writer
preference, downgrade and upgrade (CONTRACT.md, "Lock kinds")."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import pytest
from django.db import connection

from django_dlock import LockNotAcquired, lock
from django_dlock.models import DistributedLock, LockHold, LockWaiter, ReleaseResult
from tests import workers_kinds
from tests.utils import database_settings, run_in_processes, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


class TestManager:
    def test_readers_hold_together_and_exclude_a_writer(self) -> None:
        r1 = Locks.acquire("doc:1", owner="r1", ttl=30, shared=True, label="reader one")
        r2 = Locks.acquire("doc:1", owner="r2", ttl=30, shared=True)
        assert r1 is not None and r2 is not None
        assert (r1.mode, r2.mode) == ("shared", "shared")
        assert r1.fencing_token < r2.fencing_token
        assert Locks.acquire("doc:1", owner="w", ttl=30) is None
        assert [(h.owner, h.label) for h in Locks.holders("doc:1")] == [
            ("r1", "reader one"),
            ("r2", ""),
        ]
        assert Locks.release("doc:1", "r1") is ReleaseResult.RELEASED
        assert Locks.acquire("doc:1", owner="w", ttl=30) is None  # r2 still reads
        assert Locks.release("doc:1", "r2") is ReleaseResult.RELEASED
        writer = Locks.acquire("doc:1", owner="w", ttl=30)
        assert writer is not None and writer.mode == "exclusive"
        assert writer.fencing_token > r2.fencing_token

    def test_a_writer_excludes_readers_and_every_grant_gets_a_larger_token(self) -> None:
        writer = Locks.acquire("doc:2", owner="w", ttl=30)
        assert writer is not None
        assert Locks.acquire("doc:2", owner="r", ttl=30, shared=True) is None
        Locks.release("doc:2", "w")
        reader = Locks.acquire("doc:2", owner="r", ttl=30, shared=True)
        assert reader is not None and reader.fencing_token > writer.fencing_token
        again = Locks.acquire("doc:2", owner="r", ttl=30, shared=True)
        assert again is not None and again.fencing_token == reader.fencing_token

    def test_a_reader_renews_and_releases_its_own_hold_only(self) -> None:
        Locks.acquire("doc:3", owner="r1", ttl=30, shared=True)
        Locks.acquire("doc:3", owner="r2", ttl=30, shared=True)
        renewed = Locks.renew("doc:3", "r1", ttl=90)
        assert renewed is not None and renewed.owner == "r1"
        header = DistributedLock.objects.get(resource="doc:3")
        assert header.is_shared and header.expires_at >= renewed.expires_at
        assert Locks.renew("doc:3", "stranger", ttl=30) is None
        assert Locks.release("doc:3", "stranger") is ReleaseResult.FORBIDDEN
        assert Locks.force_release("doc:3", owner="r1") is True
        assert [h.owner for h in Locks.holders("doc:3")] == ["r2"]
        assert Locks.force_release("doc:3") is True
        assert Locks.holders("doc:3") == []
        assert not LockHold.objects.filter(resource="doc:3").exists()

    def test_a_queued_writer_stops_later_readers_even_non_blocking_ones(self) -> None:
        Locks.acquire("doc:4", owner="r1", ttl=30, shared=True)
        LockWaiter.objects.create(
            resource="doc:4",
            owner="writer",
            expires_at=DistributedLock.objects.get(resource="doc:4").expires_at,
            mode="exclusive",
        )
        assert Locks.acquire("doc:4", owner="r2", ttl=30, shared=True) is None
        LockWaiter.objects.all().delete()
        assert Locks.acquire("doc:4", owner="r2", ttl=30, shared=True) is not None

    def test_downgrade_and_upgrade_are_new_grants(self) -> None:
        writer = Locks.acquire("doc:5", owner="a", ttl=30)
        assert writer is not None
        down = Locks.acquire("doc:5", owner="a", ttl=30, shared=True)
        assert down is not None and down.mode == "shared"
        assert down.fencing_token > writer.fencing_token
        assert Locks.acquire("doc:5", owner="b", ttl=30, shared=True) is not None
        assert Locks.acquire("doc:5", owner="a", ttl=30) is None  # b reads too: no upgrade
        Locks.release("doc:5", "b")
        up = Locks.acquire("doc:5", owner="a", ttl=30)
        assert up is not None and up.mode == "exclusive"
        assert up.fencing_token > down.fencing_token
        assert [h.mode for h in Locks.holders("doc:5")] == ["exclusive"]

    def test_an_expired_reader_lets_a_writer_in(self) -> None:
        Locks.acquire("doc:6", owner="crashed", ttl=0.2, shared=True)
        assert Locks.acquire("doc:6", owner="w", ttl=30) is None
        time.sleep(0.25)
        assert Locks.acquire("doc:6", owner="w", ttl=30) is not None

    def test_purge_deletes_expired_holds(self) -> None:
        Locks.acquire("doc:7", owner="crashed", ttl=0.05, shared=True)
        Locks.acquire("doc:7", owner="alive", ttl=30, shared=True)
        time.sleep(0.1)
        Locks.purge_expired()
        assert list(LockHold.objects.values_list("owner", flat=True)) == ["alive"]


class TestLock:
    def test_handle_upgrade_never_waits(self) -> None:
        with lock("doc:10", shared=True) as held:
            other = Locks.acquire("doc:10", owner="other", ttl=30, shared=True)
            assert other is not None
            started = time.monotonic()
            with pytest.raises(LockNotAcquired):
                held.upgrade()
            assert time.monotonic() - started < 1
            Locks.release("doc:10", "other")
            held.upgrade()
            assert held.mode == "exclusive"
            assert Locks.acquire("doc:10", owner="other", ttl=30, shared=True) is None
            held.downgrade()
            assert Locks.acquire("doc:10", owner="other", ttl=30, shared=True) is not None

    def test_a_waiting_writer_is_served_before_readers_that_came_after_it(self) -> None:
        order: list[str] = []
        Locks.acquire("doc:11", owner="r0", ttl=30, shared=True)

        def take(name: str, shared: bool) -> None:
            try:
                with lock("doc:11", shared=shared, timeout=20, ttl=30):
                    order.append(name)
                    time.sleep(0.05)
            finally:
                connection.close()

        writer = threading.Thread(target=take, args=("writer", False))
        writer.start()
        wait_for(lambda: LockWaiter.objects.filter(owner__isnull=False).exists(), what="queued")
        reader = threading.Thread(target=take, args=("reader", True))
        reader.start()
        wait_for(lambda: LockWaiter.objects.count() == 2, what="both queued")
        assert Locks.release("doc:11", "r0") is ReleaseResult.RELEASED
        writer.join(20)
        reader.join(20)
        assert order == ["writer", "reader"]


def test_readers_in_processes_hold_together() -> None:
    start = spawn.Barrier(4)
    results = run_in_processes(
        workers_kinds.read_or_write,
        [(database_settings(), "doc:together", True, 1, start, 0.5)] * 4,
    )
    spans = [span for worker in results for span in worker]
    # Each reader held it for half a second, and all of them at one moment.
    assert max(begin for begin, *_ in spans) < min(end for _, end, *_ in spans)


def test_a_writer_never_holds_beside_anyone_in_processes() -> None:
    start = spawn.Barrier(4)
    results = run_in_processes(
        workers_kinds.read_or_write,
        [
            (database_settings(), "doc:procs", shared, 20, start, 0.01)
            for shared in (True, True, True, False)
        ],
    )
    spans = [span for worker in results for span in worker]
    writes = [span for span in spans if not span[2]]
    assert len(writes) == 20
    for write in writes:
        for other in spans:
            if other is not write:
                assert other[1] <= write[0] or other[0] >= write[1], "a hold overlapped a writer"
    tokens = sorted(spans, key=lambda span: span[0])
    for before, after in zip(tokens, tokens[1:], strict=False):
        if not (before[2] and after[2]):  # a writer's turn: a larger token than any before it
            assert after[3] > before[3]


@pytest.mark.requires_sqlite
def test_on_sqlite_threads_mixing_kinds_never_see_database_is_locked() -> None:
    """Waiters of readers, writers and permits in one process, on other
    resources each: the queue's writes wait for SQLite's write lock as the lock
    transactions do, never until their busy timeout (found with the metrics demo)."""
    errors: list[str] = []
    stop = time.monotonic() + 3

    def worker(resource: str, **kind: Any) -> None:
        try:
            while time.monotonic() < stop:
                try:
                    with lock(resource, timeout=0.2, ttl=10, **kind):
                        time.sleep(0.01)
                except LockNotAcquired:
                    pass
                except Exception:  # what must never come; where and when, if it does
                    errors.append(
                        f"at {time.monotonic() - started:.1f} s: {traceback.format_exc()}"
                    )
        finally:
            connection.close()

    kinds: list[tuple[str, dict[str, Any]]] = [("mix:writer", {}), ("mix:doc", {"shared": True})]
    threads = [
        threading.Thread(target=worker, args=(resource,), kwargs=kind)
        for resource, kind in kinds * 3
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert time.monotonic() - started < 15  # not a busy timeout's wait
