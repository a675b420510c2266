"""Worker functions run in separate OS processes by tests/test_admin_waiters.py."""

from __future__ import annotations

from typing import Any

from tests.utils import setup_worker


def wait_for_the_lock(db: dict[str, Any], resource: str, owner: str) -> int:
    """Wait in ``lock()`` for ``resource`` as ``owner``; return the fencing
    token it got."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, owner=owner, ttl=30, timeout=60) as held:
        return int(held.fencing_token)
