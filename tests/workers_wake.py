"""Functions that run in worker processes of tests/test_mysql_wake.py."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def take_turns_when_told(db: dict[str, Any], prefix: str, rounds: int, go: Any, got: Any) -> None:
    """For each round, once told (``go``), wait in ``lock()`` for
    ``{prefix}:{round}`` and put the monotonic time it got it (``got``)."""
    setup_worker(db)
    from django_dlock import lock

    for number in range(rounds):
        go.get(timeout=60)
        with lock(f"{prefix}:{number}", ttl=30, timeout=30):
            got.put(time.monotonic())


def wait_once(db: dict[str, Any], resource: str, got: Any) -> None:
    """Wait in ``lock()`` for ``resource`` (ttl 45, timeout 60); put the
    monotonic time it got it."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, ttl=45, timeout=60):
        got.put(time.monotonic())
