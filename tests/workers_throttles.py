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
