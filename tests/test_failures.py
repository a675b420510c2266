"""A database failure raises; it is never reported as "not acquired"."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest
from django.db import DatabaseError, connection

from django_dlock.models import DistributedLock, ReleaseResult
from tests.utils import is_waiting_on_a_lock, postgres_dsn, run_in_thread, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.requires_postgres
def test_backend_terminated_while_waiting_raises() -> None:
    import psycopg

    # A released row: the acquisition below must lock it (another owner's valid
    # hold would be refused from the row as the statement's snapshot has it).
    assert DistributedLock.objects.acquire("job:42", owner="holder", ttl=30) is not None
    assert DistributedLock.objects.release("job:42", owner="holder") is ReleaseResult.RELEASED
    dsn = postgres_dsn()
    with (
        psycopg.connect(dsn, autocommit=False) as holder,
        psycopg.connect(dsn, autocommit=True) as admin,
    ):
        # Another session keeps the row locked, so the acquire below waits for
        # its lock; then its server process is killed.
        holder.execute("SELECT id FROM distributed_locks WHERE resource = 'job:42' FOR UPDATE")

        def acquire(outcome: dict[str, Any]) -> object:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            return DistributedLock.objects.acquire("job:42", owner="waiter", ttl=30)

        outcome = run_in_thread(acquire)
        wait_for(lambda: is_waiting_on_a_lock(admin, outcome.get("pid")), 20)
        admin.execute("SELECT pg_terminate_backend(%s)", [outcome["pid"]])
        outcome["thread"].join(timeout=30)
        holder.rollback()

    assert "result" not in outcome, f"reported as {outcome.get('result')!r}"
    assert isinstance(outcome["error"], DatabaseError)


@pytest.mark.requires_postgres
def test_read_only_database_raises() -> None:
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    connection.close()  # the setting applies to new sessions
    try:
        with pytest.raises(DatabaseError, match="read-only"):
            DistributedLock.objects.acquire("job:42", owner="a", ttl=30)
        with pytest.raises(DatabaseError, match="read-only"):
            DistributedLock.objects.release("job:42", owner="a")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = off")
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        connection.close()


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_server_unreachable_raises(settings: Any) -> None:
    from django.db import connections

    broken = {**connections["default"].settings_dict, "PORT": _closed_port()}
    settings.DATABASES["locks"] = broken
    settings.DLOCK_DATABASE = "locks"
    connections["locks"].close()
    original = connections["locks"].settings_dict
    connections["locks"].settings_dict = broken
    try:
        with pytest.raises(DatabaseError):
            DistributedLock.objects.acquire("job:42", owner="a", ttl=30)
    finally:
        connections["locks"].settings_dict = original


@pytest.mark.requires_sqlite
def test_sqlite_write_lock_held_too_long_raises() -> None:
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds SQLite's write lock
    try:
        connection.ensure_connection()
        connection.connection.execute("PRAGMA busy_timeout = 200")
        with pytest.raises(DatabaseError, match="locked"):
            DistributedLock.objects.acquire("job:42", owner="a", ttl=30)
    finally:
        other.rollback()
        other.close()
        connection.close()
    assert DistributedLock.objects.acquire("job:42", owner="a", ttl=30) is not None


@pytest.mark.requires_sqlite
def test_sqlite_lock_transaction_waits_for_the_write_lock_in_short_steps() -> None:
    # SQLite's busy handler sleeps 1, 2, 5... ms between tries, longer than the
    # writes of a hand-over last: the lock operation (its one statement, or its
    # lock transaction) tries again itself.
    other = sqlite3.connect(
        connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False
    )
    other.execute("BEGIN IMMEDIATE")  # another process holds SQLite's write lock
    tries: list[str] = []

    def counted(execute: Any, sql: str, *args: Any) -> Any:
        if sql.startswith(("BEGIN", "INSERT")):
            tries.append(sql)
        return execute(sql, *args)

    connection.ensure_connection()
    connection.connection.execute("PRAGMA busy_timeout = 4000")
    try:
        with connection.execute_wrapper(counted):
            timer = threading.Timer(0.03, other.rollback)
            timer.start()
            lock = DistributedLock.objects.acquire("job:42", owner="a", ttl=30)
            timer.join()
        assert lock is not None and lock.owner == "a"
        # Tried again and again while the other held the write lock (a 30 ms
        # hold is a handful of tries for SQLite's handler: 1, 2, 5, 10, 15 ms).
        assert len(tries) >= 10
        # And the session's own busy timeout is back for the caller's queries.
        assert connection.connection.execute("PRAGMA busy_timeout").fetchone() == (4000,)
    finally:
        other.close()
        connection.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
