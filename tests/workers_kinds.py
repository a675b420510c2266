"""Worker processes of the lock kinds' tests (tests.utils.run_in_processes)."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def read_or_write(
    db: dict[str, Any], resource: str, shared: bool, turns: int, start: Any, hold: float
) -> list[tuple[float, float, bool, int]]:
    """Hold ``resource`` ``turns`` times (shared or exclusive, waiting in the
    queue), ``hold`` seconds each; (entered, left, shared, token) per turn, on
    this host's monotonic clock (the processes share it)."""
    setup_worker(db)
    from django_dlock import lock

    start.wait()
    spans = []
    for _ in range(turns):
        with lock(resource, shared=shared, timeout=60, ttl=30) as held:
            entered = time.monotonic()
            time.sleep(hold)
            left = time.monotonic()
        spans.append((entered, left, shared, held.fencing_token))
    return spans


def use_permit(
    db: dict[str, Any], resource: str, limit: int, turns: int, start: Any
) -> list[tuple[float, float, int]]:
    """Hold one of ``limit`` permits ``turns`` times, 20 ms each."""
    setup_worker(db)
    from django_dlock import lock

    start.wait()
    spans = []
    for _ in range(turns):
        with lock(resource, limit=limit, timeout=60, ttl=30) as held:
            entered = time.monotonic()
            time.sleep(0.02)
            left = time.monotonic()
        spans.append((entered, left, held.fencing_token))
    return spans


def take_both(
    db: dict[str, Any], names: list[str], turns: int, start: Any
) -> list[tuple[float, float]]:
    """Hold every lock of ``names`` together ``turns`` times (each try all or
    none, in whatever order ``names`` gives them)."""
    setup_worker(db)
    from django_dlock import lock
    from django_dlock.models import DistributedLock

    start.wait()
    spans = []
    for _ in range(turns):
        with lock(names, timeout=60, ttl=30) as held:
            entered = time.monotonic()
            rows = DistributedLock.objects.filter(resource__in=names)
            assert {row.owner for row in rows} == {held.owner}, "a part held by another"
            time.sleep(0.002)
            left = time.monotonic()
        spans.append((entered, left))
    return spans
