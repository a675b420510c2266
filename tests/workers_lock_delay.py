"""Worker functions run in separate OS processes by tests/test_lock_delay.py."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def hold_until_killed(db: dict[str, Any], resource: str, ttl: float, lock_delay: float) -> None:
    """Hold ``resource`` with ``lock_delay``, renewed in the background, until killed."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, ttl=ttl, lock_delay=lock_delay, auto_renew=True, timeout=10):
        time.sleep(120)
