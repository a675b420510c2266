"""Functions that run in worker processes (tests.utils.run_in_processes)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from tests.utils import setup_worker


def increment_under_lock(
    db: dict[str, Any], resource: str, counter: str, iterations: int, start: Any
) -> list[tuple[float, float, int]]:
    """Take the lock ``iterations`` times (polling); inside it read the counter (the
    file ``counter``), sleep 1 ms, write counter + 1. Returns (start, end, fencing
    token) per turn."""
    setup_worker(db)
    from django.db import connection

    from django_dlock.models import DistributedLock

    connection.ensure_connection()
    start.wait()
    turns = []
    owner = f"worker-{random.getrandbits(64):x}"
    shared = Path(counter)
    for _ in range(iterations):
        while (lock := DistributedLock.objects.acquire(resource, owner=owner, ttl=30)) is None:
            time.sleep(random.uniform(0, 0.002))
        entered = time.monotonic()
        value = int(shared.read_text())
        time.sleep(0.001)
        shared.write_text(str(value + 1))
        left = time.monotonic()
        turns.append((entered, left, lock.fencing_token))
        assert DistributedLock.objects.release(resource, owner=owner).value == "released"
    return turns


def acquire_once(db: dict[str, Any], resource: str, start: Any) -> tuple[bool, str | None]:
    """Acquire ``resource`` once when the barrier opens; (won, exception repr)."""
    setup_worker(db)
    from django.db import connection

    from django_dlock.models import DistributedLock

    connection.ensure_connection()
    start.wait()
    try:
        lock = DistributedLock.objects.acquire(resource, ttl=30)
    except Exception as error:  # the test asserts that there is none
        return False, repr(error)
    return lock is not None, None


def churn_and_purge(
    db: dict[str, Any], resources: list[str], rounds: int, start: Any
) -> list[tuple[str, float, int]]:
    """Acquire, release and purge in a loop; return (resource, when, token) per
    acquisition, ``when`` taken while the lock was held."""
    setup_worker(db)
    from django_dlock.models import DistributedLock

    start.wait()
    seen = []
    owner = f"worker-{random.getrandbits(64):x}"
    for n in range(rounds):
        resource = random.choice(resources)
        lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=30)
        if lock is not None:
            seen.append((resource, time.monotonic(), lock.fencing_token))
            DistributedLock.objects.release(resource, owner=owner)
        if n % 5 == 0:
            DistributedLock.objects.purge_expired()
    return seen
