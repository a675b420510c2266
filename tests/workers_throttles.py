"""Functions that run in worker processes of tests/test_throttles.py."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta
from typing import Any

from tests.utils import setup_worker


def hammer(
    db: dict[str, Any], key: str, rate: str, seconds: float, start: Any
) -> list[tuple[bool, datetime, timedelta]]:
    """Use the throttle ``key`` as fast as the database answers for ``seconds``
    once the barrier opens; (granted, database time, retry_after) of each use."""
    setup_worker(db)
    from django.db import connection

    from django_dlock import throttle

    connection.ensure_connection()
    limiter = throttle(key, rate=rate)
    start.wait()
    deadline = time.monotonic() + seconds
    decisions = []
    while time.monotonic() < deadline:
        decision = limiter.try_use()
        decisions.append((decision.granted, decision.at, decision.retry_after))
        time.sleep(random.uniform(0, 0.002))
    return decisions


def wander(
    db: dict[str, Any], rates: dict[str, str], seconds: float, start: Any
) -> list[tuple[str, bool, datetime]]:
    """Use a random one of the keys of ``rates`` (at its rate) every 0 to 0.5 s
    for ``seconds``; (key, granted, database time) of each use."""
    setup_worker(db)
    from django_dlock import throttle

    start.wait()
    deadline = time.monotonic() + seconds
    decisions = []
    while time.monotonic() < deadline:
        key = random.choice(list(rates))
        decision = throttle(key, rate=rates[key]).try_use()
        decisions.append((decision.key, decision.granted, decision.at))
        time.sleep(random.uniform(0, 0.5))
    return decisions


def purge_continually(db: dict[str, Any], seconds: float, start: Any) -> int:
    """Purge free throttle keys in a loop for ``seconds``; how many it deleted."""
    setup_worker(db)
    from django_dlock.throttles.purge import purge_free_keys

    start.wait()
    deadline = time.monotonic() + seconds
    deleted = 0
    while time.monotonic() < deadline:
        deleted += purge_free_keys("default")
        time.sleep(random.uniform(0.01, 0.03))
    return deleted


def use_or_purge(what: str, *args: Any) -> Any:
    """One worker process of several kinds: ``wander`` or ``purge_continually``."""
    return purge_continually(*args) if what == "purge" else wander(*args)
