"""A lock operation decides on the row it locked, and reports what it did.

Each test opens the race on purpose: another session deletes the resource's
expired row and inserts a new holder's row in one transaction, the operation
under test waits for that session's lock on the old row, and the session
commits while it waits. The operation may act before or after the new holder
arrived, but its answer must match what it wrote: a force-release that says
"nothing released" released nothing. (Found by the torture run: a purge
deleted the row, a new holder inserted it again, and a concurrent
force-release answered False while it released the new holder's lock, which
the next acquisition then took over with the next token.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from django_dlock.models import DistributedLock, ReleaseResult
from tests.utils import is_waiting_on_a_lock, postgres_dsn, run_in_thread, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.requires_postgres]

RESOURCE = "job:42"
NEW_HOLDER = "new-holder"
ANOTHER = "another-owner"


def _while_a_new_holder_arrives(operation: Callable[[], object]) -> tuple[dict[str, Any], Any]:
    """Run ``operation`` while another session replaces the resource's expired
    row with ``NEW_HOLDER``'s valid one; its outcome and the row afterwards."""
    return _while_another_session_commits(
        [
            ("DELETE FROM distributed_locks WHERE resource = %s", [RESOURCE]),
            (
                "INSERT INTO distributed_locks (resource, owner, acquired_at, expires_at, "
                "fencing_token) VALUES (%s, %s, now(), now() + interval '60 seconds', 99)",
                [RESOURCE, NEW_HOLDER],
            ),
        ],
        operation,
    )


def _while_another_session_commits(
    statements: list[tuple[str, list[Any]]], operation: Callable[[], object]
) -> tuple[dict[str, Any], Any]:
    """Run ``operation`` on the resource's released row while another session
    runs ``statements`` in one transaction, which commits once the operation
    waits for it; the operation's outcome and the row afterwards."""
    import psycopg

    DistributedLock.objects.acquire(RESOURCE, owner="old-holder", ttl=30)
    DistributedLock.objects.release(RESOURCE, "old-holder")
    with (
        psycopg.connect(postgres_dsn(), autocommit=False) as other,
        psycopg.connect(postgres_dsn(), autocommit=True) as admin,
    ):
        for sql, params in statements:
            other.execute(sql, params)

        def run(outcome: dict[str, Any]) -> object:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            return operation()

        outcome = run_in_thread(run)
        wait_for(lambda: is_waiting_on_a_lock(admin, outcome.get("pid")), 20)
        other.commit()
        outcome["thread"].join(timeout=30)
    return outcome, DistributedLock.objects.get(resource=RESOURCE)


def _new_holders_lock_is_untouched(row: DistributedLock) -> None:
    assert row.owner == NEW_HOLDER
    assert row.fencing_token == 99
    assert row.expires_at > datetime.now(row.expires_at.tzinfo)


def test_force_release_that_released_nothing_left_the_new_holder_alone() -> None:
    outcome, row = _while_a_new_holder_arrives(
        lambda: DistributedLock.objects.force_release(RESOURCE)
    )
    if outcome["result"] is False:
        _new_holders_lock_is_untouched(row)
    else:
        assert outcome["result"] is True
        assert row.is_released


def test_release_that_found_nothing_left_the_new_holder_alone() -> None:
    outcome, row = _while_a_new_holder_arrives(
        lambda: DistributedLock.objects.release(RESOURCE, NEW_HOLDER)
    )
    if outcome["result"] is ReleaseResult.NOT_FOUND:
        _new_holders_lock_is_untouched(row)
    else:
        assert outcome["result"] is ReleaseResult.RELEASED
        assert row.is_released


def test_renew_that_found_nothing_did_not_extend_the_new_holders_lock() -> None:
    outcome, row = _while_a_new_holder_arrives(
        lambda: DistributedLock.objects.renew(RESOURCE, NEW_HOLDER, ttl=3600)
    )
    if "error" in outcome:
        assert isinstance(outcome["error"], DistributedLock.DoesNotExist)
        _new_holders_lock_is_untouched(row)
        assert (row.expires_at - row.acquired_at).total_seconds() < 120
    else:
        assert outcome["result"].expires_at == row.expires_at


def test_acquire_by_another_owner_does_not_take_the_new_holders_lock() -> None:
    outcome, row = _while_a_new_holder_arrives(
        lambda: DistributedLock.objects.acquire(RESOURCE, owner=ANOTHER, ttl=30)
    )
    assert outcome["result"] is None
    _new_holders_lock_is_untouched(row)


def test_acquire_after_a_purge_gets_a_token_above_the_purged_one() -> None:
    # A purge deletes the released row (token 1) and raises the floor in one
    # transaction; the acquisition waited for the deleted row, and its view of
    # the database predates the purge's floor.
    outcome, row = _while_another_session_commits(
        [
            ("DELETE FROM distributed_locks WHERE resource = %s", [RESOURCE]),
            (
                "INSERT INTO distributed_locks_fencing_floor (id, value) VALUES (1, 1) "
                "ON CONFLICT (id) DO UPDATE SET value = GREATEST(EXCLUDED.value, 1)",
                [],
            ),
        ],
        lambda: DistributedLock.objects.acquire(RESOURCE, owner=ANOTHER, ttl=30),
    )
    assert outcome["result"] is not None
    assert outcome["result"].fencing_token == row.fencing_token == 2
