"""Round trips of the lock operations on PostgreSQL, counted, not timed.

The test database is reached through a counting TCP proxy (``benchmarks.proxy``)
on the ``locks`` alias (a second connection to the same database): a round trip
is each time the client sends after the server last spoke.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from benchmarks.proxy import DelayProxy
from django_dlock import lock
from django_dlock.models import DistributedLock
from django_dlock.rules import SHARED
from django_dlock.service import service_for

# Each lock operation is the outermost transaction, as in an application.
pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.django_db(transaction=True, databases=["default", "locks"]),
]

ALIAS = "locks"


@pytest.fixture(autouse=True)
def one_statement_operations() -> None:
    """Counted where the one-statement operations run (not with server-side
    binding, where the portable ones do: the ``portable-postgres`` session)."""
    from django_dlock.backends import backend_for

    if not backend_for(ALIAS).features.one_statement:
        pytest.skip("the portable operations run here (server-side binding)")


@pytest.fixture
def proxy() -> Iterator[DelayProxy]:
    """The ``locks`` alias through the counting proxy while the test runs."""
    connection = connections[ALIAS]
    settings = connection.settings_dict
    saved = settings["HOST"], settings["PORT"]
    with DelayProxy(saved[0] or "127.0.0.1", int(saved[1]), delay=0, postgres=True) as counting:
        connection.close()
        settings["HOST"], settings["PORT"] = "127.0.0.1", counting.port
        try:
            connection.ensure_connection()
            yield counting
        finally:
            connection.close()
            settings["HOST"], settings["PORT"] = saved


def round_trips(proxy: DelayProxy, operation: Callable[[], object]) -> int:
    before = proxy.counts()
    operation()
    return (proxy.counts() - before).round_trips


def test_each_lock_operation_takes_one_round_trip(proxy: DelayProxy) -> None:
    locks = DistributedLock.objects.db_manager(ALIAS)
    operations: dict[str, Callable[[], object]] = {
        "acquire a new resource": lambda: locks.acquire("rt:1", owner="a", ttl=30),
        "re-acquire": lambda: locks.acquire("rt:1", owner="a", ttl=30),
        "acquire, held by another": lambda: locks.acquire("rt:1", owner="b", ttl=30),
        "renew": lambda: locks.renew("rt:1", owner="a", ttl=30),
        "release, not the owner": lambda: locks.release("rt:1", owner="b"),
        "release": lambda: locks.release("rt:1", owner="a"),
        "acquire a released row": lambda: locks.acquire("rt:1", owner="b", ttl=30),
        "force_release": lambda: locks.force_release("rt:1"),
        "release, nothing held": lambda: locks.release("rt:1", owner="b"),
    }
    counted = {name: round_trips(proxy, operation) for name, operation in operations.items()}

    # An acquisition or a release that the short statement cannot make (it
    # writes nothing: no row yet; not the owner's, nothing held) runs the full
    # statement after it.
    assert counted == {
        **dict.fromkeys(operations, 1),
        "acquire a new resource": 2,
        "release, not the owner": 2,
        "release, nothing held": 2,
    }
    # And the outcomes are the manager's usual ones.
    assert DistributedLock.objects.get(resource="rt:1").is_released


def test_a_reentrant_reentry_and_its_release_take_one_round_trip_each(proxy: DelayProxy) -> None:
    locks = DistributedLock.objects.db_manager(ALIAS)
    locks.acquire("rt:4", owner="a", ttl=30, reentrant=True)

    assert round_trips(proxy, lambda: locks.acquire("rt:4", owner="a", ttl=30, reentrant=True)) == 1
    assert round_trips(proxy, lambda: locks.release("rt:4", owner="a")) == 1
    outer = lock("rt:5", ttl=30, using=ALIAS, reentrant=True)
    inner = lock("rt:5", ttl=30, using=ALIAS, reentrant=True)
    outer.__enter__()
    assert round_trips(proxy, inner.__enter__) == 1
    assert round_trips(proxy, lambda: inner.__exit__(None, None, None)) == 1
    outer.__exit__(None, None, None)
    assert DistributedLock.objects.get(resource="rt:5").is_released


def test_a_reader_and_a_permit_take_one_round_trip_each_way(proxy: DelayProxy) -> None:
    locks = DistributedLock.objects.db_manager(ALIAS)
    service = service_for(ALIAS)
    locks.acquire("rt:6", owner="first", ttl=30, shared=True)  # the row exists
    locks.acquire("rt:7", owner="first", ttl=30, limit=3)
    locks.acquire("rt:8", owner="w", ttl=30)
    operations: dict[str, Callable[[], object]] = {
        "reader joins": lambda: locks.acquire("rt:6", owner="a", ttl=30, shared=True),
        "reader again": lambda: locks.acquire("rt:6", owner="a", ttl=30, shared=True),
        # A release that carries the hold's mode, as lock()'s does (LockHandle.mode).
        "reader releases": lambda: service.release("rt:6", "a", SHARED),
        "reader refused": lambda: locks.acquire("rt:8", owner="a", ttl=30, shared=True),
        "permit": lambda: locks.acquire("rt:7", owner="b", ttl=30, limit=3),
        "permit released": lambda: service.release("rt:7", "b", SHARED),
        "last reader releases": lambda: service.release("rt:6", "first", SHARED),
    }
    counted = {name: round_trips(proxy, operation) for name, operation in operations.items()}
    assert counted == dict.fromkeys(operations, 1)


def test_a_shared_release_without_its_mode_tries_the_exclusive_release_first(
    proxy: DelayProxy,
) -> None:
    # The manager's release(resource, owner) does not know the hold's mode: the
    # short release of an exclusive hold writes nothing, then the full one runs.
    locks = DistributedLock.objects.db_manager(ALIAS)
    locks.acquire("rt:9", owner="a", ttl=30, shared=True)
    assert round_trips(proxy, lambda: locks.release("rt:9", owner="a")) == 2
    # lock()'s handle knows it: its release is the full one at once.
    reader = lock("rt:9", ttl=30, using=ALIAS, shared=True)
    reader.__enter__()
    assert round_trips(proxy, lambda: reader.__exit__(None, None, None)) == 1


def test_lock_context_takes_one_round_trip_each_way(proxy: DelayProxy) -> None:
    held = lock("rt:2", ttl=30, using=ALIAS)
    with lock("rt:2", ttl=30, using=ALIAS):  # the resource's row exists
        pass

    assert round_trips(proxy, held.__enter__) == 1
    assert round_trips(proxy, lambda: held.__exit__(None, None, None)) == 1


def test_a_blocking_lock_takes_one_round_trip_each_way(proxy: DelayProxy) -> None:
    # Uncontended, its first look is the take (``Claim.behind_queue``): no look before.
    with lock("rt:10", ttl=30, using=ALIAS):  # the resource's row exists
        pass
    blocking = lock("rt:10", ttl=30, timeout=30, using=ALIAS)

    assert round_trips(proxy, blocking.__enter__) == 1
    assert round_trips(proxy, lambda: blocking.__exit__(None, None, None)) == 1


def test_execute_wrappers_and_the_query_log_see_every_statement(proxy: DelayProxy) -> None:
    locks = DistributedLock.objects.db_manager(ALIAS)
    connection = connections[ALIAS]
    wrapped: list[str] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        wrapped.append(sql)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as logged, connection.execute_wrapper(wrapper):
        locks.acquire("rt:3", owner="a", ttl=30)
        locks.release("rt:3", owner="a")

    sent = "\n".join(wrapped)
    # The acquisition locks the resource's row in a CTE; the release, nobody
    # queued, is one owner-checked UPDATE.
    assert sent.count("FOR UPDATE)") == 1 and "AS UPDATE" in wrapped[-1]
    assert "INSERT INTO" in sent and "UPDATE" in sent
    # The log holds each statement with its parameters filled in.
    logged_sql = "\n".join(query["sql"] for query in logged.captured_queries)
    assert logged_sql.count("FOR UPDATE)") == 1
    assert logged_sql.count("'rt:3'") == sent.count("%(resource)s")
    assert connection.get_autocommit() and not connection.in_atomic_block
