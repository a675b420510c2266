"""The exclusive lock's one-row statements on MariaDB, prepared and run
through mysqlclient's own connection (``django_dlock.backends.mysql.prepared``):
the same answers as through Django's cursor, a session that lost its
statements, and errors that stay Django's."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, OperationalError, connection
from django.test.utils import CaptureQueriesContext

from django_dlock.backends import backend_for
from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock, ReleaseResult
from django_dlock.rules.claim import claim_for

pytestmark = [
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("mysql"),
        reason="needs MariaDB (DATABASE_URL=mysql://...)",
    ),
    pytest.mark.django_db(transaction=True),
]

Locks = DistributedLock.objects


def session_status(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE %s", [name])
        return int(cursor.fetchone()[1])


def warm(resource: str) -> None:
    """Acquire and release ``resource`` until the session prepared their statements."""
    from django_dlock.backends.mysql.prepared import PREPARE_AT

    # One more than PREPARE_AT: the first acquisition of a resource inserts its row (the
    # portable operation), and the take's and the release's SELECTs are two statements.
    for _ in range(PREPARE_AT + 1):
        assert Locks.acquire(resource, owner="warm", ttl=30) is not None
        assert Locks.release(resource, owner="warm") is ReleaseResult.RELEASED


def test_a_new_session_runs_its_first_operations_inline() -> None:
    # Preparing costs a round trip: not for a connection that locks once.
    Locks.acquire("prep:0", owner="a", ttl=30)  # the row inserted
    Locks.release("prep:0", owner="a")
    connection.close()
    executed, prepared = session_status("Com_execute_sql"), session_status("Com_prepare_sql")
    updates = session_status("Com_update")
    assert Locks.acquire("prep:0", owner="a", ttl=30) is not None
    assert Locks.release("prep:0", owner="a") is ReleaseResult.RELEASED
    assert session_status("Com_update") - updates == 2
    assert session_status("Com_execute_sql") == executed
    assert session_status("Com_prepare_sql") == prepared


def test_the_one_row_statements_run_prepared_where_nobody_watches() -> None:
    warm("prep:1")
    executed, prepared = session_status("Com_execute_sql"), session_status("Com_prepare_sql")
    assert Locks.acquire("prep:1", owner="a", ttl=30) is not None
    assert Locks.release("prep:1", owner="a") is ReleaseResult.RELEASED
    # Each operation: its UPDATE and the SELECT of what it kept, by name; the
    # session prepared them before.
    assert session_status("Com_execute_sql") - executed == 4
    assert session_status("Com_prepare_sql") == prepared


def test_a_watched_connection_runs_them_as_plain_sql() -> None:
    Locks.acquire("prep:2", owner="a", ttl=30)
    with CaptureQueriesContext(connection) as queries:
        assert Locks.release("prep:2", owner="a") is ReleaseResult.RELEASED
    statements = [query["sql"].split()[0] for query in queries.captured_queries]
    assert statements == ["UPDATE", "SELECT"]


def watched(operation: Any) -> Any:
    with connection.execute_wrapper(lambda execute, *args: execute(*args)):
        return operation()


@pytest.mark.parametrize("lock_delay", [None, timedelta(seconds=3)])
def test_prepared_answers_are_those_of_djangos_cursor(lock_delay: timedelta | None) -> None:
    backend = backend_for("default")
    warm("prep:3")
    warm("prep:4")

    def story(resource: str) -> list[Any]:
        claim = claim_for(resource, "b", 30, kind=LockKind(reentrant=True), lock_delay=lock_delay)
        answers: list[Any] = [
            backend.take(claim),  # new
            backend.take(claim),  # again, a second hold
            backend.take(claim_for(resource, "c", 30)),  # refused
            backend.give_up(resource, "c"),  # forbidden
            backend.give_up(resource, "b"),  # decremented
            backend.give_up(resource, "b"),  # released
            backend.give_up(resource, "b"),  # not found
        ]
        return answers

    prepared, plain = story("prep:3"), watched(lambda: story("prep:4"))
    for fast, slow in zip(prepared, plain, strict=True):
        assert type(fast) is type(slow)
        fast_row, slow_row = fast.row, slow.row
        assert (fast_row is None) == (slow_row is None)
        if fast_row is None or slow_row is None:
            continue
        for name in ("acquired_at", "expires_at", "now"):
            fast_time, slow_time = getattr(fast_row, name), getattr(slow_row, name)
            assert fast_time.tzinfo is not None and fast_time.utcoffset() == timedelta(0)
            assert type(fast_time) is type(slow_time) and fast_time.tzinfo == slow_time.tzinfo
        same = {"pk", "resource", "acquired_at", "expires_at", "now"}
        fast_rest = {
            f.name: getattr(fast_row, f.name) for f in fields(fast_row) if f.name not in same
        }
        slow_rest = {
            f.name: getattr(slow_row, f.name) for f in fields(slow_row) if f.name not in same
        }
        assert fast_rest == slow_rest
        assert fast_row.lock_delay == slow_row.lock_delay
    assert [type(answer.row) for answer in prepared] == [type(answer.row) for answer in plain]


def test_the_kept_row_converts_as_django_converts() -> None:
    from django_dlock.backends.mysql import MySQLBackend

    backend = backend_for("default")
    assert isinstance(backend, MySQLBackend)
    Locks.acquire("prep:5", owner="a", ttl=30, lock_delay=2)
    with connection.cursor() as cursor:
        # The kept SELECT answers its times as text (one_row._TIME_TEXT); the
        # database's now is one value for the whole statement.
        cursor.execute(
            "SELECT id, resource, owner, acquired_at, expires_at, fencing_token, hold_count, "
            "label, `limit`, lock_delay, UTC_TIMESTAMP(6), "
            "CAST(CAST(acquired_at AS DATETIME(6)) AS CHAR), "
            "CAST(CAST(expires_at AS DATETIME(6)) AS CHAR), "
            "CAST(CAST(UTC_TIMESTAMP(6) AS DATETIME(6)) AS CHAR) FROM distributed_locks "
            "WHERE resource = %s",
            ["prep:5"],
        )
        *values, acquired_at, expires_at, now = cursor.fetchone()
    assert isinstance(now, str)
    texts = [*values[:3], acquired_at, expires_at, *values[5:10], now]
    kept = backend._kept_row
    converted = kept.row(texts, connection)
    assert converted == backend.tables.row(values)
    assert converted.lock_delay == timedelta(seconds=2)
    empty = [*values[:9], None, None]
    assert kept.row([*texts[:9], None, None], connection) == backend.tables.row(empty)


def test_a_session_that_lost_its_statements_prepares_them_again() -> None:
    warm("prep:6")
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE PREPARE dlock_take")
        cursor.execute("DEALLOCATE PREPARE dlock_kept_take")
    taken = Locks.acquire("prep:6", owner="a", ttl=30)
    assert taken is not None and taken.owner == "a"
    assert Locks.release("prep:6", owner="a") is ReleaseResult.RELEASED
    # A new connection: a new session, prepared again.
    connection.close()
    assert Locks.acquire("prep:6", owner="b", ttl=30) is not None
    assert Locks.release("prep:6", owner="b") is ReleaseResult.RELEASED


class FailingOnce:
    """mysqlclient's ``query`` failing with ``error`` the first time it sends
    an ``EXECUTE`` of ``statement``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, statement: bytes, error: Exception) -> None:
        from django_dlock.backends.mysql import prepared

        self.failed = 0
        real = prepared.PreparedStatements._query

        def query(this: Any, raw: Any, session: Any, run: Any, quoted: dict[str, bytes]) -> None:
            if not self.failed and run.name.encode() == statement:
                self.failed += 1
                raise error
            real(this, raw, session, run, quoted)

        monkeypatch.setattr(prepared.PreparedStatements, "_query", query)


def test_a_deadlock_victim_runs_again_on_the_prepared_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import MySQLdb  # type: ignore[import-untyped]

    warm("prep:7")
    first = Locks.acquire("prep:7", owner="a", ttl=30)
    assert first is not None and Locks.release("prep:7", owner="a") is ReleaseResult.RELEASED
    deadlock = MySQLdb.OperationalError(1213, "Deadlock found when trying to get lock")
    failing = FailingOnce(monkeypatch, b"dlock_take", deadlock)
    taken = Locks.acquire("prep:7", owner="a", ttl=30)
    assert failing.failed == 1
    assert taken is not None and taken.fencing_token == first.fencing_token + 1
    assert Locks.release("prep:7", owner="a") is ReleaseResult.RELEASED


def test_a_database_failure_on_the_prepared_path_is_djangos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import MySQLdb

    warm("prep:8")
    Locks.acquire("prep:8", owner="a", ttl=30)
    lost = MySQLdb.OperationalError(2013, "Lost connection to server during query")
    FailingOnce(monkeypatch, b"dlock_release", lost)
    with pytest.raises(OperationalError) as raised:
        Locks.release("prep:8", owner="a")
    assert isinstance(raised.value, DatabaseError) and raised.value.args[0] == 2013
    assert raised.value.__cause__ is lost
    assert Locks.release("prep:8", owner="a") is ReleaseResult.RELEASED


def test_a_server_full_of_prepared_statements_runs_them_inline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # max_prepared_stmt_count counts every session's statements: a busy server
    # may refuse one more, which must cost a lock operation nothing.
    import MySQLdb
    from MySQLdb.connections import Connection  # type: ignore[import-untyped]

    from django_dlock.backends.mysql.prepared import PREPARE_AT

    real_query = Connection.query
    refused: list[bytes] = []

    def query(self: Any, sql: bytes) -> Any:
        if sql.startswith(b"PREPARE "):
            refused.append(sql)
            raise MySQLdb.OperationalError(1461, "Can't create more than max_prepared_stmt_count")
        return real_query(self, sql)

    monkeypatch.setattr(Connection, "query", query)
    connection.close()  # a new session, which has prepared nothing
    for run in range(2 * PREPARE_AT):
        taken = Locks.acquire("prep:full", owner="a", ttl=30)
        assert taken is not None and taken.fencing_token == run + 1
        assert Locks.release("prep:full", owner="a") is ReleaseResult.RELEASED
    assert refused  # it asked, was refused, and ran the statements inline
