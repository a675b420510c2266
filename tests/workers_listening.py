"""Worker functions run in separate OS processes by tests/test_waiting.py."""

from __future__ import annotations

from typing import Any

from tests.utils import setup_worker


def wait_for_lock(
    db: dict[str, Any], resource: str, timeout: float, listen: object
) -> dict[str, Any]:
    """Block in ``lock(resource)`` with ``DLOCK_LISTEN = listen``; whether it got
    the lock, whether a listener served it, and how many looks it took."""
    setup_worker(db)
    from django.conf import settings

    from django_dlock import LockNotAcquired, lock
    from django_dlock.listeners.registry import listener_for
    from django_dlock.locking import waiting
    from django_dlock.locking.queue import QueueState

    settings.DLOCK_LISTEN = listen
    looks = 0
    read = waiting.queue_state

    def counted(*args: Any) -> QueueState:
        nonlocal looks
        looks += 1
        return read(*args)

    waiting.queue_state = counted  # type: ignore[assignment]
    try:
        with lock(resource, ttl=30, timeout=timeout):
            acquired = True
    except LockNotAcquired:
        acquired = False
    return {"acquired": acquired, "listening": listener_for("default") is not None, "looks": looks}


def wait_briefly(db: dict[str, Any], resource: str, start: Any, rounds: int) -> tuple[int, int]:
    """``rounds`` times: wait 0.5-4 ms for ``resource`` and hold it 1 ms; how
    many times it got the lock, and how many it gave up."""
    setup_worker(db)
    import random
    import time

    from django_dlock import LockNotAcquired, lock

    got = gave_up = 0
    start.wait()
    for _ in range(rounds):
        try:
            with lock(resource, ttl=30, timeout=random.uniform(0.0005, 0.004)):
                time.sleep(0.001)
                got += 1
        except LockNotAcquired:
            gave_up += 1
    return got, gave_up
