"""A database failure raises; it is never reported as "not acquired"."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from django.db import DatabaseError, connection

from django_dlock.models import DistributedLock
from tests.utils import is_waiting_on_a_lock, postgres_dsn, run_in_thread, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.requires_postgres
def test_backend_terminated_while_waiting_raises() -> None:
    import psycopg

    assert DistributedLock.objects.acquire("job:42", owner="holder", ttl=30) is not None
    dsn = postgres_dsn()
    with (
        psycopg.connect(dsn, autocommit=False) as holder,
        psycopg.connect(dsn, autocommit=True) as admin,
    ):
        # Another session keeps the row locked, so the acquire below waits in its
        # SELECT ... FOR UPDATE; then its server process is killed.
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


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
