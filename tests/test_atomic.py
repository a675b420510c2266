"""``held.atomic()``: a transaction whose first statement proves that the lock
is still the holder's and locks its row (CONTRACT.md, "Only in your own
database"). In one process here; the pauses, kills and races with real
processes are in tests/test_atomic_processes.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from django.db import connections, transaction

from django_dlock import lock
from django_dlock.backends.guard import GRACE
from django_dlock.exceptions import InvalidArgument, LockExpired, LockLost
from django_dlock.models import DistributedLock, LockHold
from tests.testapp.models import Counter
from tests.utils import expire, extra_database

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def test_a_block_under_a_held_lock_commits() -> None:
    with lock("atomic:1", ttl=30) as held, held.atomic():
        Counter.objects.create(name="atomic:1", value=1)
        assert connections["default"].in_atomic_block
    assert Counter.objects.get(name="atomic:1").value == 1


def test_the_blocks_error_rolls_it_back_and_passes_through() -> None:
    with lock("atomic:2", ttl=30) as held:
        with pytest.raises(ZeroDivisionError), held.atomic():
            Counter.objects.create(name="atomic:2")
            1 / 0  # noqa: B018
        assert not held.is_lost
    assert not Counter.objects.filter(name="atomic:2").exists()


def test_a_lock_released_meanwhile_raises_before_anything_is_written() -> None:
    with pytest.raises(LockLost), lock("atomic:3", ttl=30) as held:
        Locks.force_release("atomic:3")
        with pytest.raises(LockExpired), held.atomic():
            Counter.objects.create(name="atomic:3")
        assert held.is_lost
    assert not Counter.objects.filter(name="atomic:3").exists()


def test_a_lock_taken_over_raises_before_anything_is_written() -> None:
    hold = Locks.acquire("atomic:4", owner="first", ttl=30)
    assert hold is not None
    expire("atomic:4")
    assert Locks.acquire("atomic:4", owner="second", ttl=30) is not None
    with pytest.raises(LockLost), hold.atomic():
        Counter.objects.create(name="atomic:4")
    assert not Counter.objects.filter(name="atomic:4").exists()


def test_the_same_owner_with_a_later_grant_is_another_hold() -> None:
    hold = Locks.acquire("atomic:5", owner="me", ttl=30)
    assert hold is not None
    expire("atomic:5")
    again = Locks.acquire("atomic:5", owner="me", ttl=30)
    assert again is not None and again.fencing_token > hold.fencing_token
    with pytest.raises(LockLost), hold.atomic():
        pass
    with again.atomic() as left:
        Counter.objects.create(name="atomic:5")
    assert 29 < left <= 30
    assert Counter.objects.filter(name="atomic:5").exists()


def test_shared_holds_guard_blocks_too() -> None:
    reader = Locks.acquire("atomic:6", owner="reader", ttl=30, shared=True)
    assert isinstance(reader, LockHold)  # a reader's hold, not the resource's row
    with reader.atomic():
        Counter.objects.create(name="atomic:6")
    header = Locks.get(resource="atomic:6")  # the header row of the shared holds
    with pytest.raises(InvalidArgument):
        header.atomic()
    Locks.release("atomic:6", owner="reader")
    with pytest.raises(LockLost), reader.atomic():
        pass
    with lock("atomic:6", ttl=30, shared=True) as held, held.atomic():
        Counter.objects.create(name="atomic:6b")
    assert Counter.objects.filter(name__startswith="atomic:6").count() == 2


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_a_block_on_another_alias_of_the_same_database_is_guarded() -> None:
    with lock("atomic:7", ttl=30, using="locks") as held, held.atomic(using="default"):
        Counter.objects.create(name="atomic:7")
    assert Counter.objects.filter(name="atomic:7").exists()


def test_a_block_on_another_database_is_refused(tmp_path: Path) -> None:
    other = extra_database("other", ENGINE="django.db.backends.sqlite3", NAME=tmp_path / "o.db")
    with other, lock("atomic:8", ttl=30) as held:
        with pytest.raises(InvalidArgument):
            held.atomic(using="other").__enter__()
        with pytest.raises(InvalidArgument):
            held.atomic(using="nowhere").__enter__()
        hold = Locks.get(resource="atomic:8")
        with pytest.raises(InvalidArgument):
            hold.atomic(using="other")


def test_a_block_inside_the_callers_transaction_is_refused() -> None:
    with lock("atomic:9", ttl=30) as held, transaction.atomic():
        guarded = held.atomic()
        with pytest.raises(RuntimeError):
            guarded.__enter__()


def test_the_block_carries_the_databases_bound_and_leaves_the_session_as_it_was() -> None:
    vendor = connections["default"].vendor
    setting = {
        # In milliseconds, unit-less (SHOW would print "21s" for 21000 ms).
        "postgresql": "SELECT setting FROM pg_settings "
        "WHERE name = 'idle_in_transaction_session_timeout'",
        "mysql": "SELECT @@SESSION.idle_transaction_timeout",
    }.get(vendor)
    if setting is None:
        pytest.skip("SQLite: no server ends a transaction (the commit's check bounds it)")

    def current() -> str:
        with connections["default"].cursor() as cursor:
            cursor.execute(setting)
            return str(cursor.fetchone()[0])

    before = current()
    with lock("atomic:10", ttl=20) as held, held.atomic() as left:
        during = current()
    after = current()
    assert 19 < left <= 20
    if vendor == "postgresql":
        assert during == f"{math.ceil(left * 1000) + int(GRACE * 1000)}"
    else:
        assert during == str(math.ceil(left + GRACE))
    assert after == before
