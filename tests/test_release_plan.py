"""PostgreSQL's full release (``release_any``) pays for the shared grant
(``shared_handover``) only where the head of the queue reads or wants a
permit: its generic plan, as a session runs it prepared, never executes the
grant's scan of the queue where the head is a writer or there is no head, and
scans only the resource's queue where it grants (a long queue of other
resources is not read)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from django_dlock.backends import backend_for
from django_dlock.backends.postgresql.release import ReleaseStatement
from django_dlock.models import DistributedLock

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]

RESOURCE = "plan:r"
OTHERS = 300  # other resources' waiters


@pytest.fixture(autouse=True)
def one_statement_operations() -> None:
    if not backend_for("default").features.one_statement:
        pytest.skip("the portable operations run here (server-side binding)")


def _queue(*modes: str) -> None:
    """Tickets behind ``RESOURCE``'s holder, in order (listening, with a ttl),
    beside ``OTHERS`` of other resources."""
    waiters = backend_for("default").tables.waiters_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {waiters} (resource, owner, expires_at) "  # noqa: S608
            "SELECT 'plan:other' || mod(n, 10), 'o' || n, now() + interval '1 hour' "
            "FROM generate_series(1, %s) n",
            [OTHERS],
        )
        for number, mode in enumerate(modes):
            cursor.execute(
                f"INSERT INTO {waiters} (resource, owner, expires_at, channel, ttl, mode) "  # noqa: S608
                "VALUES (%s, %s, now() + interval '1 hour', 'plan_channel', "
                "interval '30 seconds', %s)",
                [RESOURCE, f"w{number}", mode],
            )
        cursor.execute(f"ANALYZE {waiters}")


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _granting_scans() -> tuple[list[dict[str, Any]], int]:
    """The release by its holder, as prepared, its generic plan, rolled back:
    the scans of the queue in the CTE ``granted``, and how many it woke."""
    statement = ReleaseStatement(backend_for("default")).statement
    params = {"resource": RESOURCE, "owner": "me"}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(statement.prepare_sql("plan_release"))
        try:
            with transaction.atomic():  # run once for its answer, then rolled back
                cursor.execute(statement.execute_sql("plan_release"), params)
                woken = int(cursor.fetchone()[2])
                transaction.set_rollback(True)
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.execute_sql('plan_release')}", params
            )
            (plan,) = cursor.fetchone()
        finally:
            cursor.execute("DEALLOCATE plan_release")
        transaction.set_rollback(True)
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    (granted,) = (node for node in _nodes(root) if node.get("Subplan Name") == "CTE granted")
    waiters = backend_for("default").tables.waiters_table.strip('"')
    scans = [
        node
        for node in _nodes(granted)
        if node.get("Relation Name") == waiters and node["Node Type"] != "ModifyTable"
    ]
    return scans, woken


def _held_by_me() -> None:
    assert DistributedLock.objects.acquire(RESOURCE, owner="me", ttl=30) is not None


@pytest.mark.parametrize(
    "queue", [(), ("exclusive", "shared", "shared")], ids=["no waiter", "exclusive head"]
)
def test_a_release_whose_head_writes_never_scans_for_shared_grants(queue: tuple[str, ...]) -> None:
    _held_by_me()
    _queue(*queue)
    scans, woken = _granting_scans()
    assert scans  # the plan has the grant's scan...
    assert all(scan["Actual Loops"] == 0 for scan in scans)  # ...never executed
    assert woken == len(queue[:1])


def test_a_release_whose_head_reads_grants_from_its_resources_queue_alone() -> None:
    _held_by_me()
    _queue("shared", "shared", "exclusive", "shared")
    scans, woken = _granting_scans()
    assert woken == 2  # the readers before the writer, told their grants
    assert [scan["Actual Loops"] for scan in scans] == [1]
    # Read: the resource's queue (by its index), not the other resources' tickets.
    (scan,) = scans
    assert scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0) <= 4
