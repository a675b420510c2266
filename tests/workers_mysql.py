"""Functions that run in worker processes of the MariaDB tests (tests.utils.run_in_processes)."""

from __future__ import annotations

from typing import Any

from tests.utils import setup_worker


def acquire_in_rounds(
    db: dict[str, Any], resources: list[str], start: Any
) -> list[tuple[bool, str | None]]:
    """For each resource in turn, all workers acquire it at once (a barrier per
    round); (won, exception repr) per round."""
    setup_worker(db)
    from django.db import connection

    from django_dlock.models import DistributedLock

    connection.ensure_connection()
    outcomes: list[tuple[bool, str | None]] = []
    for resource in resources:
        start.wait()
        try:
            lock = DistributedLock.objects.acquire(resource, ttl=30)
        except Exception as error:  # the test asserts that there is none
            outcomes.append((False, repr(error)))
        else:
            outcomes.append((lock is not None, None))
    return outcomes
