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


def hold_then_wait_until_commit(
    db: dict[str, Any], first: str, second: str, both_hold: Any, both_done: Any, label: str
) -> tuple[str, float]:
    """``hold_then_wait`` with both locks taken ``until="commit"`` in one
    transaction ("timeout" when the wait ran out): a deadlock rolls it back,
    which releases ``first``. The process stays until every worker is done, so
    that release is the watcher's at work, not one at the process's exit."""
    setup_worker(db)
    from django.db import transaction

    from django_dlock import LockDeadlock, LockNotAcquired, lock

    began = 0.0
    try:
        with transaction.atomic(), lock(first, ttl=30, label=label, until="commit"):
            both_hold.wait()
            began = time.monotonic()
            with lock(second, ttl=30, timeout=20, label=label, until="commit"):
                outcome = "acquired", time.monotonic() - began
    except LockDeadlock:
        outcome = "deadlock", time.monotonic() - began
    except LockNotAcquired:
        outcome = "timeout", time.monotonic() - began
    both_done.wait(30)
    return outcome
