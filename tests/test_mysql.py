"""Where InnoDB differs from PostgreSQL: the first-acquire race, lock-wait
timeouts, the clock and resource collation (its system checks: tests/test_checks_mysql.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connection

from django_dlock.backends import backend_for
from django_dlock.models import DistributedLock, FencingFloor, ReleaseResult
from django_dlock.rules.claim import claim_for
from django_dlock.rules.clock import database_now
from tests import workers_mysql
from tests.utils import database_settings, run_in_processes, run_in_thread, spawn

pytestmark = [
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("mysql"),
        reason="needs MariaDB (DATABASE_URL=mysql://...)",
    ),
    pytest.mark.django_db(transaction=True),
]

Locks = DistributedLock.objects

# MySQL's "Lock wait timeout exceeded".
ER_LOCK_WAIT_TIMEOUT = 1205


@pytest.fixture
def other_session() -> Iterator[Any]:
    """A second connection to the test database, outside Django."""
    params = connection.get_connection_params()
    params.pop("conv", None)
    # Imported here: the module is collected on every database, mysqlclient
    # is installed only with the [mysql] extra.
    import MySQLdb  # type: ignore[import-untyped]

    session = MySQLdb.connect(**params)
    try:
        yield session
    finally:
        session.close()


def test_first_acquire_race_of_eight_processes_in_repeated_rounds() -> None:
    processes, rounds = 8, 20
    resources = [f"job:mariadb-race-{n}" for n in range(rounds)]
    start = spawn.Barrier(processes)

    results = run_in_processes(
        workers_mysql.acquire_in_rounds, [(database_settings(), resources, start)] * processes
    )

    errors = [error for worker in results for _, error in worker if error]
    assert errors == []
    for index, resource in enumerate(resources):
        assert sum(worker[index][0] for worker in results) == 1, resource
        assert Locks.filter(resource=resource).count() == 1


def test_a_lock_wait_timeout_raises(other_session: Any) -> None:
    Locks.acquire("job:held", owner="a", ttl=30)
    cursor = other_session.cursor()
    # Another transaction holds the row, longer than this session waits for it.
    cursor.execute("SELECT id FROM distributed_locks WHERE resource = 'job:held' FOR UPDATE")
    with connection.cursor() as own:
        own.execute("SET SESSION innodb_lock_wait_timeout = 1")
    try:
        # Another owner validly holds it (a guarded block, held.atomic(), keeps
        # its row so): a refusal. Its own owner's operations raise.
        assert Locks.acquire("job:held", owner="b", ttl=30) is None
        for operation in (
            lambda: Locks.acquire("job:held", owner="a", ttl=30),
            lambda: Locks.renew("job:held", owner="a", ttl=30),
            lambda: Locks.release("job:held", owner="a"),
        ):
            with pytest.raises(OperationalError) as raised:
                operation()
            assert raised.value.args[0] == ER_LOCK_WAIT_TIMEOUT
    finally:
        other_session.rollback()
        with connection.cursor() as own:
            own.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    assert Locks.get(resource="job:held").owner == "a"


def test_a_blocking_lock_queues_at_once_while_a_guarded_block_keeps_the_row(
    other_session: Any,
) -> None:
    # Its first take (``Claim.behind_queue``) waits for no row lock: a holder's
    # held.atomic() keeps the row (LOCK IN SHARE MODE), and the waiter's timeout
    # holds, not the block's length (here 3 s, innodb_lock_wait_timeout).
    from django_dlock import LockNotAcquired, lock

    Locks.acquire("job:guarded", owner="a", ttl=30)
    cursor = other_session.cursor()
    cursor.execute(
        "SELECT id FROM distributed_locks WHERE resource = 'job:guarded' LOCK IN SHARE MODE"
    )
    with connection.cursor() as own:
        own.execute("SET SESSION innodb_lock_wait_timeout = 3")
    try:
        started = time.monotonic()
        with pytest.raises(LockNotAcquired), lock("job:guarded", ttl=30, timeout=0.3):
            pass
        assert time.monotonic() - started < 2.0
    finally:
        other_session.rollback()
        with connection.cursor() as own:
            own.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    assert Locks.get(resource="job:guarded").owner == "a"


def test_an_acquire_chosen_as_a_deadlock_victim_runs_again(other_session: Any) -> None:
    # The deadlock the churn test met now and then, made on purpose: this
    # acquire has locked the fencing floor for a first insert and waits for the
    # resource's index entry, which another transaction holds (its own insert),
    # and that transaction then asks for the floor. InnoDB rolls back the
    # lighter one (the acquire: the other wrote rows) with error 1213.
    FencingFloor.objects.create(pk=1, value=0)
    paused, go = threading.Event(), threading.Event()
    selects: list[str] = []

    def pause_before_the_insert(execute: Any, sql: str, *args: Any) -> Any:
        if sql.startswith("INSERT INTO `distributed_locks`") and not go.is_set():
            paused.set()
            go.wait(30)
        if "FOR UPDATE" in sql and sql.startswith("SELECT"):
            selects.append(sql)
        return execute(sql, *args)

    def acquire(outcome: dict[str, Any]) -> DistributedLock | None:
        with connection.execute_wrapper(pause_before_the_insert):
            return Locks.acquire("job:victim", owner="a", ttl=30)

    deadlocks_before = innodb_deadlocks()
    acquiring = run_in_thread(acquire)
    assert paused.wait(30), "the acquire never reached its insert"
    cursor = other_session.cursor()
    # Heavier than the acquire, so that InnoDB picks the acquire as the victim.
    cursor.executemany(
        "INSERT INTO distributed_lock_waiters (resource, owner, expires_at) "
        "VALUES (%s, 'other', UTC_TIMESTAMP())",
        [(f"job:ballast-{n}",) for n in range(20)],
    )
    cursor.execute(
        "INSERT INTO distributed_locks (resource, owner, acquired_at, expires_at, fencing_token) "
        "VALUES ('job:victim', 'b', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1)"
    )
    go.set()
    wait_for(lambda: transactions_waiting_for_a_lock() == 1)
    cursor.execute("SELECT value FROM distributed_locks_fencing_floor WHERE id = 1 FOR UPDATE")
    other_session.commit()
    acquiring["thread"].join(30)

    assert "error" not in acquiring, acquiring.get("error")
    assert acquiring["result"] is None  # the retry found b's lock, and b holds it
    assert innodb_deadlocks() == deadlocks_before + 1
    assert len(selects) == 2  # the acquire ran twice
    assert Locks.get(resource="job:victim").owner == "b"


def test_the_one_statement_acquire_and_release_run_again_as_a_deadlocks_victim() -> None:
    # The exclusive lock's one UPDATE in autocommit, rolled back by InnoDB as a
    # deadlock's victim (error 1213, as the torture run met it): it wrote
    # nothing, and runs again instead of raising. Each UPDATE fails once here.
    failed: list[str] = []

    def deadlock_once(execute: Any, sql: str, *args: Any) -> Any:
        if sql.startswith("UPDATE `distributed_locks`") and sql not in failed:
            failed.append(sql)
            raise OperationalError(1213, "Deadlock found when trying to get lock")
        return execute(sql, *args)

    first = Locks.acquire("victim:once", owner="a", ttl=30)
    assert first is not None and Locks.release("victim:once", owner="a") is ReleaseResult.RELEASED
    with connection.execute_wrapper(deadlock_once):
        taken = Locks.acquire("victim:once", owner="a", ttl=30)
        assert taken is not None and taken.fencing_token == first.fencing_token + 1
        assert Locks.release("victim:once", owner="a") is ReleaseResult.RELEASED
    assert len(failed) == 2  # the acquire's UPDATE and the release's, each failed once
    assert not Locks.active().filter(resource="victim:once").exists()


def innodb_deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        return int(cursor.fetchone()[1])


def transactions_waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
        )
        return int(cursor.fetchone()[0])


def wait_for(condition: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        # InnoDB refreshes information_schema.innodb_trx only when it was last
        # read more than 0.1 s ago: looking more often would never see a change.
        time.sleep(0.2)


def test_a_killed_connection_raises(other_session: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        (connection_id,) = cursor.fetchone()
    other_session.cursor().execute(f"KILL CONNECTION {int(connection_id)}")
    try:
        with pytest.raises(OperationalError):
            Locks.acquire("job:killed", owner="a", ttl=30)
    finally:
        connection.close()
    assert not Locks.filter(resource="job:killed").exists()


def test_case_and_accents_make_distinct_locks() -> None:
    names = ["job:42", "JOB:42", "Job:42", "café", "cafe", "CAFÉ"]
    locks = [Locks.acquire(name, owner=f"owner-{n}", ttl=30) for n, name in enumerate(names)]

    assert all(lock is not None for lock in locks)
    assert len({lock.pk for lock in locks if lock}) == len(names)
    assert Locks.release("JOB:42", owner="owner-0").value == "forbidden"
    assert sorted(Locks.with_resource_prefix("job:").values_list("resource", flat=True)) == [
        "job:42"
    ]


def test_the_clock_is_utc_whatever_the_server_time_zone() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '-07:00'")
    try:
        now = database_now("default")
        lock = Locks.acquire("job:clock", owner="a", ttl=30)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION time_zone = DEFAULT")
    wall = datetime.fromtimestamp(time.time(), UTC)
    assert abs((now - wall).total_seconds()) < 5
    assert lock is not None
    assert abs((lock.acquired_at - wall).total_seconds()) < 5
    assert lock.acquired_at.microsecond or lock.expires_at.microsecond  # DATETIME(6)


def test_columns_keep_microseconds() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, DATETIME_PRECISION FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'distributed_locks' "
            "AND DATA_TYPE = 'datetime'"
        )
        precisions = dict(cursor.fetchall())
    assert precisions == {"acquired_at": 6, "expires_at": 6}


def test_first_acquire_starts_above_the_floor() -> None:
    FencingFloor.objects.update_or_create(pk=1, defaults={"value": 41})

    lock = Locks.acquire("job:floor", owner="a", ttl=30)

    assert lock is not None
    assert lock.fencing_token == 42
    assert lock == Locks.get(resource="job:floor")
    assert Locks.acquire("job:floor", owner="b", ttl=30) is None


def test_purge_deletes_expired_ranges_and_keeps_the_floor() -> None:
    for n in range(25):
        Locks.acquire(f"job:purge-{n}", owner="a", ttl=30)
    Locks.acquire("other:keep", owner="a", ttl=30)
    with connection.cursor() as cursor:
        # Every second one expired; their ids interleave with live ones.
        cursor.execute(
            "UPDATE distributed_locks SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE "
            "WHERE resource LIKE 'job:%%' AND MOD(id, 2) = 0"
        )
    expired = Locks.filter(expires_at__lt=database_now("default"))
    expected = set(expired.values_list("resource", flat=True))
    largest = max(expired.values_list("fencing_token", flat=True))

    batch = backend_for("default").purge_batch(older_than=0, batch_size=4, prefix="job:")
    deleted = Locks.purge_expired(batch_size=4, prefix="job:")

    assert batch == (4, 4)
    assert batch.deleted + deleted == len(expected)
    assert not Locks.filter(resource__in=expected).exists()
    assert Locks.count() == 26 - len(expected)
    assert FencingFloor.objects.get(pk=1).value == largest


def test_the_one_row_update_keeps_what_it_read_not_what_the_session_had() -> None:
    # The exclusive lock's UPDATE keeps the row's id, its owner before and the
    # database's now in session variables: stale values there must not leak
    # into an answer (the optimizer skips an assignment it can tell the value
    # of without it).
    held = Locks.acquire("fresh:1", owner="a", ttl=30)
    assert held is not None
    with connection.cursor() as cursor:
        cursor.execute("SET @dlock_id = -1, @dlock_before = 'stale', @dlock_now = NULL")
    assert Locks.release("fresh:1", owner="b") is ReleaseResult.FORBIDDEN
    with connection.cursor() as cursor:
        cursor.execute("SELECT @dlock_id, @dlock_before, @dlock_now IS NOT NULL")
        assert cursor.fetchone() == (held.pk, "a", 1)
        cursor.execute("SET @dlock_id = -1, @dlock_before = 'stale', @dlock_now = NULL")
    backend = backend_for("default")
    taken = backend.take(claim_for("fresh:1", "b", 30))
    assert taken.row is None and taken.previous_owner == "a"
    Locks.release("fresh:1", owner="a")
    taken = backend.take(claim_for("fresh:1", "b", 30))
    assert taken.row is not None and taken.previous_owner == ""
    assert (taken.row.pk, taken.row.fencing_token) == (held.pk, held.fencing_token + 1)
    assert taken.row.now is not None and taken.row.expires_at > taken.row.now
