"""Round trips and statements per operation.

Round trips and the statements the server ran are counted by the proxy (see
``benchmarks.proxy``); what Django's ``execute_wrapper`` and its query log saw
is counted in the process, to show that neither misses a statement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.contenders import Cycle
from benchmarks.proxy import DelayProxy


@contextmanager
def seen_by_django(using: str) -> Iterator[dict[str, int]]:
    """Counts of the statements an execute_wrapper sees, and of the entries of
    the query log (which also records BEGIN/COMMIT/ROLLBACK)."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    counts = {"wrapper": 0, "logged": 0}

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        counts["wrapper"] += 1
        return execute(sql, params, many, context)

    connection = connections[using]
    with CaptureQueriesContext(connection) as log, connection.execute_wrapper(wrapper):
        yield counts
    counts["logged"] = len(log.captured_queries)


def per_cycle(
    cycle: Cycle, proxy: DelayProxy, cycles: int, using: str | None
) -> dict[str, float | None]:
    """Per operation (half a cycle): round trips, statements the server ran,
    and (for Django-based contenders) what Django saw."""
    for n in range(10):
        cycle(n)
    before = proxy.counts()
    if using is None:
        for n in range(cycles):
            cycle(n)
        seen: dict[str, int] = {}
    else:
        with seen_by_django(using) as seen:
            for n in range(cycles):
                cycle(n)
    counted = proxy.counts() - before
    operations = 2 * cycles
    figures: dict[str, float | None] = {
        "round_trips": counted.round_trips / operations,
        "statements": counted.statements / operations if proxy.postgres else None,
    }
    for name, value in seen.items():
        figures[f"django_{name}"] = value / operations
    return figures


def dlock_operations(using: str, proxy: DelayProxy) -> dict[str, dict[str, float]]:
    """Each django-dlock operation once: round trips, server statements, and
    what Django's execute_wrapper and query log saw."""
    from django_dlock import lock
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects.db_manager(using)
    locks.filter(resource__startswith="count:").delete()
    operations: dict[str, Callable[[], object]] = {
        "acquire (new resource)": lambda: locks.acquire("count:1", owner="a", ttl=30),
        "renew": lambda: locks.renew("count:1", owner="a", ttl=30),
        "release": lambda: locks.release("count:1", owner="a"),
        "acquire (released row)": lambda: locks.acquire("count:1", owner="a", ttl=30),
        "acquire (held by another)": lambda: locks.acquire("count:1", owner="b", ttl=30),
        "release (again)": lambda: locks.release("count:1", owner="a"),
        "with lock(): enter + exit": lambda: _enter_exit(lock("count:2", ttl=30, using=using)),
    }
    figures: dict[str, dict[str, float]] = {}
    for name, operation in operations.items():
        before = proxy.counts()
        with seen_by_django(using) as seen:
            operation()
        counted = proxy.counts() - before
        figures[name] = {
            "round_trips": counted.round_trips,
            "statements": counted.statements,
            "django_wrapper": seen["wrapper"],
            "django_logged": seen["logged"],
        }
    return figures


def _enter_exit(context: Any) -> None:
    with context:
        pass
