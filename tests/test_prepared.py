"""PostgreSQL runs the lock operations as prepared statements, once per session,
and runs them as plain SQL wherever a session loses them (a pooler in between)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_dlock import LockNotAcquired, lock
from django_dlock.backends import backend_for
from django_dlock.models import DistributedLock, ReleaseResult
from tests import workers_core
from tests.pgbouncer import pgbouncer
from tests.utils import run_in_processes, spawn

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def one_statement_operations() -> None:
    """Prepared statements are the one-statement operations' (not with
    server-side binding: the ``portable-postgres`` session)."""
    from django_dlock.backends import backend_for

    if not backend_for("default").features.one_statement:
        pytest.skip("the portable operations run here (server-side binding)")


Locks = DistributedLock.objects


@pytest.fixture
def sent() -> Iterator[list[str]]:
    """The SQL of every statement sent on the default connection."""
    statements: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        statements.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(wrapper):
        yield statements
    backend_for("default")._prepared.enabled = True  # type: ignore[attr-defined]


def test_an_operation_is_prepared_on_its_first_run_and_executed_by_name_after(
    sent: list[str],
) -> None:
    connection.close()  # a new session
    Locks.acquire("prep:1", owner="a", ttl=30)
    Locks.acquire("prep:2", owner="a", ttl=30)

    # A new resource's row: the short acquisition finds none, the full one inserts it.
    first_run, second_run = sent[:2], sent[2:]
    assert [sql.split(" ", 2)[:1] for sql in first_run] == [["PREPARE"], ["PREPARE"]]
    assert all(sql.split(";\n")[1].startswith("EXECUTE ") for sql in first_run)
    assert "FOR UPDATE" not in first_run[0] and "FOR UPDATE" in first_run[1]
    assert len(second_run) == 2 and all(sql.startswith("EXECUTE ") for sql in second_run)
    assert [lock.owner for lock in Locks.filter(resource__startswith="prep:")] == ["a", "a"]


def test_a_waiter_queues_its_ticket_by_a_prepared_statement(sent: list[str]) -> None:
    # Every turn of a contended lock queues a ticket: planned each time, the
    # statement cost the server more than running it.
    Locks.acquire("prep:queue", owner="a", ttl=30)
    del sent[:]
    for _ in range(2):
        with pytest.raises(LockNotAcquired), lock("prep:queue", owner="b", ttl=30, timeout=0.2):
            pass

    # (Planned each time, it was sent as "WITH held AS (...) INSERT ...".)
    queued = [sql for sql in sent if "_enqueue_" in sql or sql.startswith("WITH held AS")]
    assert [sql.split(" ", 1)[0] for sql in queued] == ["PREPARE", "EXECUTE"]


def test_a_session_that_lost_its_statements_runs_them_as_plain_sql(sent: list[str]) -> None:
    Locks.acquire("prep:1", owner="a", ttl=30)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as if the next statement ran in another session
    del sent[:]

    assert Locks.acquire("prep:2", owner="a", ttl=30) is not None
    assert Locks.release("prep:1", owner="a") is ReleaseResult.RELEASED

    # The EXECUTE that failed changed nothing; the acquisition ran again as
    # SQL, and so does every operation after it.
    failed, short_acquire, acquire, release = sent
    assert failed.startswith("EXECUTE ")
    assert short_acquire.startswith("WITH written AS (UPDATE")
    assert acquire.startswith("WITH locked AS") and release.startswith("UPDATE ")
    assert Locks.get(resource="prep:2").fencing_token == 1


def test_behind_pgbouncer_in_transaction_mode_every_operation_succeeds(tmp_path: Path) -> None:
    # Four processes share PgBouncer's server sessions: a statement prepared in
    # one session is not there in the next.
    processes, iterations = 4, 40
    counter = tmp_path / "counter"
    counter.write_text("0")
    start = spawn.Barrier(processes)
    with pgbouncer("transaction") as bouncer:
        results = run_in_processes(
            workers_core.increment_under_lock,
            [(bouncer, "prep:counter", str(counter), iterations, start)] * processes,
        )

    assert int(counter.read_text()) == processes * iterations
    tokens = sorted(token for worker in results for _, _, token in worker)
    assert tokens == sorted(set(tokens))  # each turn its own fencing token
