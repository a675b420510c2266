"""Worker functions run in separate OS processes by tests/test_locking.py."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def take_turns(
    db: dict[str, Any], resource: str, start: Any, seconds: float, hold: float
) -> list[tuple[float, float]]:
    """Take the lock on ``resource`` with blocking acquire again and again for
    ``seconds``, holding it ``hold`` seconds each time; return the
    ``time.monotonic()`` interval of every turn (comparable across processes)."""
    setup_worker(db)
    from django_dlock import lock

    turns: list[tuple[float, float]] = []
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with lock(resource, ttl=30, timeout=60):
            began = time.monotonic()
            time.sleep(hold)
            turns.append((began, time.monotonic()))
    return turns


def wait_for_a_long_time(db: dict[str, Any], resource: str) -> None:
    """Wait in the queue of ``resource`` (ttl 45, timeout 120), to be killed while queued."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, ttl=45, timeout=120):
        time.sleep(60)


def wait_and_record(db: dict[str, Any], resource: str, priority: int, name: str) -> None:
    """Wait for ``resource`` with ``priority`` (timeout 60); holding it, append
    ``name`` to the counter row named ``resource`` (its value counts the turns)."""
    setup_worker(db)
    from django.db.models import F

    from django_dlock import lock
    from tests.testapp.models import Counter

    with lock(resource, ttl=30, timeout=60, priority=priority, label=name):
        Counter.objects.filter(name=resource).update(value=F("value") + 1)
        Counter.objects.create(
            name=f"{resource}:{name}", value=Counter.objects.get(name=resource).value
        )
        time.sleep(0.1)


def wait_and_report(db: dict[str, Any], resource: str, tokens: Any) -> None:
    """Wait for ``resource`` (ttl 30, timeout 60); holding it, put the fencing
    token it works with on ``tokens``, hold it a moment, and release it."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, ttl=30, timeout=60) as held:
        tokens.put(held.fencing_token)
        time.sleep(0.2)
