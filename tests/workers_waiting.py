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


# A statement that writes a lock row or a shared hold (not the queue's rows).
HOLD_WRITE = r"^\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?distributed_lock(s|_holds)\"?\s"


def share_and_report(
    db: dict[str, Any], resource: str, results: Any, kind: dict[str, Any], hold: float
) -> None:
    """Wait for ``resource`` as ``kind`` says (``shared=True``, or a ``limit``;
    ttl 30, timeout 60); holding it, put the fencing token it works with and
    the statements its connection sent that write a lock row or a hold before
    it started ("INSERT _holds", ...; a told grant: none) on ``results``; hold it ``hold``
    seconds, then put ``("lost", why)`` (None: still held), and release it."""
    import re

    setup_worker(db)
    from django.db import connection

    from django_dlock import lock

    writes: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if written := re.search(HOLD_WRITE, sql, re.IGNORECASE):
            writes.append(f"{written[1].split()[0].upper()} {written[2]}")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), lock(resource, ttl=30, timeout=60, **kind) as held:
        results.put((held.fencing_token, writes))
        time.sleep(hold)
        # Still held past the offer lease: the renewer extended it to the ttl.
        results.put(("lost", held.lost_reason))
