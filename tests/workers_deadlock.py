"""Worker functions run in separate OS processes by tests/test_deadlock.py."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def hold_then_wait(
    db: dict[str, Any], first: str, second: str, both_hold: Any, label: str
) -> tuple[str, float]:
    """Hold ``first``; once every worker holds its first, wait for ``second``
    (timeout 20 s). What happened ("acquired" or "deadlock"), and after how long."""
    setup_worker(db)
    from django_dlock import LockDeadlock, lock

    with lock(first, ttl=30, label=label):
        both_hold.wait()
        began = time.monotonic()
        try:
            with lock(second, ttl=30, timeout=20, label=label):
                return "acquired", time.monotonic() - began
        except LockDeadlock:
            return "deadlock", time.monotonic() - began
